"""``snapshotd blame RUN --node X PATH``: which checkpoint (tool call) introduced each line.

Owns the command line of blame. The blame is ``snapshotd.ops.operations.Operations.blame``, the
one the MCP tool and the web app use: through the daemon when one answers, else directly on the
home; ``--json`` prints its documented shape (``snapshotd.features.review.blame.public_shape``).
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from snapshotd.cli.common import attempt_options, call_or_fail, op_options, operations, print_json
from snapshotd.cli.terminal import escape_text, field

# How wide the "who" column is in the text form.
WHO_WIDTH = 32


@click.command()
@click.argument("run_id")
@click.argument("path")
@click.option("--node", "node_id", required=True, help="The node whose checkpoints to read.")
@click.option("--seq", type=click.IntRange(min=0), default=None,
              help="The checkpoint whose file to blame (default: the newest).")
@attempt_options
@op_options
def blame(run_id: str, path: str, node_id: str, seq: int | None, iteration: int | None,
          attempt: int | None, home: Path | None, socket_: Path | None, as_json: bool) -> None:
    """Show every line of PATH (relative to the worktree, or absolute inside it) at a
    checkpoint with the checkpoint and tool call that introduced it. Lines written outside the
    agent's tool calls (tier 2, before-tool captures) are marked with '*'; lines the worktree
    held before the attempt's first checkpoint (its base commit) show '-' as their seq."""
    from snapshotd.features.review import outside_tool_call

    if os.path.isabs(path):
        path = os.path.normpath(path)
    fields = {"run_id": run_id, "node_id": node_id, "path": path, "seq": seq,
              "iteration": iteration, "attempt": attempt}
    result = call_or_fail(operations(home, socket_).blame, fields)
    if as_json:
        print_json(result)
        return
    width = len(str(len(result["lines"])))
    for line in result["lines"]:
        mark = "*" if outside_tool_call(line) else " "
        who = field(line["label"] or f"({line['source']})")
        seq = "-" if line["seq"] is None else line["seq"]  # a line the base already held
        click.echo(f"{seq:>4}{mark} {who[:WHO_WIDTH]:<{WHO_WIDTH}} "
                   f"{line['line']:>{width}}) {escape_text(line['text'])}")
