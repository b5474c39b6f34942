"""``snapshotd blame RUN --node X PATH``: which checkpoint (tool call) introduced each line.

Owns the command line of blame. The blame is ``snapshotd.ops.operations.Operations.blame``, the
one the MCP tool and the web app use: through the daemon when one answers, else directly on the
home; ``--json`` prints its documented shape (``snapshotd.features.review.blame.public_shape``),
one line at a time (a big blame is never one string in memory); ``--lines A,B`` blames a range.
A blame past the daemon's ``blame_max_lines``/``blame_max_bytes`` exits 1 saying so.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import click

from snapshotd.cli.common import (
    attempt_options,
    call_or_fail,
    node_or_only,
    op_options,
    operations,
)
from snapshotd.cli.terminal import escape_text, field

# How wide the "who" column is in the text form (a tool call's id is never cut).
WHO_WIDTH = 40
# Lines of --json output written at once.
JSON_BATCH = 2000


@click.command()
@click.argument("run_id")
@click.argument("path")
@click.option("--node", "node_id", default=None,
              help="The node whose checkpoints to read (default: the run's only node).")
@click.option("--seq", type=click.IntRange(min=0), default=None,
              help="The checkpoint whose file to blame (default: the newest).")
@click.option("-L", "--lines", "line_range", default=None, metavar="A,B",
              help="Blame lines A to B only (from 1; 'A,' runs to the end).")
@attempt_options
@op_options
def blame(run_id: str, path: str, node_id: str | None, seq: int | None, line_range: str | None,
          iteration: int | None, attempt: int | None, home: Path | None, socket_: Path | None,
          as_json: bool) -> None:
    """Show every line of PATH (relative to the worktree, or absolute inside it) at a
    checkpoint with the checkpoint and tool call that introduced it: ``[ID label]`` of the tool
    call that owned the change, the seq of the checkpoint it landed in (a tier-2 one while a
    long tool call ran). Lines written outside the agent's tool calls (tier 2 no tool call
    owns, before-tool captures) are marked with '*'; lines the worktree held before the
    attempt's first checkpoint (its base commit) show '-' as their seq."""
    node_id = node_or_only(home, run_id, node_id)
    from snapshotd.features.review import outside_tool_call

    if os.path.isabs(path):
        path = os.path.normpath(path)
    first, last = _parse_range(line_range)
    fields = {"run_id": run_id, "node_id": node_id, "path": path, "seq": seq,
              "iteration": iteration, "attempt": attempt, "first_line": first, "last_line": last}
    result = call_or_fail(operations(home, socket_).blame, fields)
    if as_json:
        _print_json(result)
        return
    width = len(str(result.get("last_line") or len(result["lines"])))
    for line in result["lines"]:
        mark = "^" if _other_run(line, run_id) else "*" if outside_tool_call(line) else " "
        seq = "-" if line["seq"] is None else line["seq"]  # a line the base already held
        click.echo(f"{seq:>4}{mark} {who(line, run_id):<{WHO_WIDTH}} "
                   f"{line['line']:>{width}}) {escape_text(line['text'])}")


def _other_run(line: dict, run_id: str) -> str | None:
    """The run of another session whose tool call wrote the line (``review.others``), else None."""
    other = (line.get("tool_call") or {}).get("run_id")
    return other if other and other != run_id else None


def who(line: dict, run_id: str = "") -> str:
    """The blame's "who" column: ``[ID label]`` of the tool call credited with the line (its id
    whole, the label cut to the column), ``[ID] RUN`` for another session's (marked ``^``),
    else its checkpoint's label or source."""
    call = line.get("tool_call")
    other = _other_run(line, run_id)
    if call and other:
        text = f"[{field(call['id'])}] {field(other)}"
        return text if len(text) <= WHO_WIDTH else text[:WHO_WIDTH - 1] + "…"
    if not call:
        return field(line["label"] or f"({line['source']})")[:WHO_WIDTH]
    head = f"[{field(call['id'])}"
    label = field(call.get("label") or "")
    room = max(0, WHO_WIDTH - len(head) - 2)
    if label:
        head += " " + (label if len(label) <= room else label[:max(0, room - 1)] + "…")
    return head + "]"


def _parse_range(value: str | None) -> tuple[int | None, int | None]:
    if value is None:
        return None, None
    found = re.fullmatch(r"\s*(\d+)\s*,\s*(\d*)\s*", value)
    if not found or int(found.group(1)) < 1 or (found.group(2) and
                                                int(found.group(2)) < int(found.group(1))):
        raise click.BadParameter(f"{value!r}: expected A,B with 1 <= A <= B (or A, to the end)",
                                 param_hint="--lines")
    return int(found.group(1)), int(found.group(2)) if found.group(2) else None


def _print_json(result: dict) -> None:
    """The result as JSON (valid UTF-8, as ``cli.common.print_json`` makes it), written a batch
    of lines at a time, each blamed line one compact object on a line of its own: a big blame
    is never one string in memory, and grep finds a line's record."""

    def dumps(value: object, indent: int | None) -> str:
        text = json.dumps(value, indent=indent, ensure_ascii=False, default=str)
        return text.encode("utf-8", "backslashreplace").decode("utf-8")

    head = {k: v for k, v in result.items() if k != "lines"}
    out = ["{\n"] + [f"  {json.dumps(k)}: {dumps(v, None)},\n" for k, v in head.items()]
    out.append('  "lines": [')
    sep = ""
    for line in result["lines"]:
        out.append(f"{sep}\n    {dumps(line, None)}")
        sep = ","
        if len(out) >= JSON_BATCH:
            click.echo("".join(out), nl=False)
            out = []
    out.append("\n  ]\n}")
    click.echo("".join(out))
