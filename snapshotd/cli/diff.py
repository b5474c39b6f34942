"""``snapshotd diff RUN --node X --seq A``: what changed, as a git-style patch.

Owns the command line of diff. The diff is ``snapshotd.ops.operations.Operations.diff``, the
one the MCP tool and the web app use: through the daemon when one answers (a ``--worktree``
diff then captures the worktree under its lock), else directly on the home; a patch or file
list too large for one reply is rendered from the two tree ids the reply names.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from snapshotd.cli.common import (
    attempt_options,
    node_or_only,
    op_options,
    operations,
    print_json,
    run_call,
    shown,
)
from snapshotd.cli.terminal import field, raw_stdout


@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", default=None,
              help="The node whose checkpoints to compare (default: the run's only node).")
@click.option("--seq", type=click.IntRange(min=0), required=True,
              help="The checkpoint to start from.")
@click.option("--to-seq", type=click.IntRange(min=0), default=None,
              help="Compare with this checkpoint of the same attempt.")
@click.option("--worktree", is_flag=True, help="Compare with the worktree as it is now.")
@click.option("--stat", "show_stat", is_flag=True, help="A diffstat instead of the patch.")
@click.option("--name-status", is_flag=True, help="One 'STATUS<TAB>path' line per file.")
@attempt_options
@op_options
def diff(run_id: str, node_id: str | None, seq: int, to_seq: int | None, worktree: bool,
         show_stat: bool, name_status: bool, iteration: int | None, attempt: int | None,
         home: Path | None, socket_: Path | None, as_json: bool) -> None:
    """Show the changes from checkpoint --seq to --to-seq, to the worktree now (--worktree),
    or, with neither, what checkpoint --seq changed against the previous one."""
    node_id = node_or_only(home, run_id, node_id)
    if to_seq is not None and worktree:
        raise click.UsageError("give --to-seq or --worktree, not both")
    if show_stat and name_status:
        raise click.UsageError("give --stat or --name-status, not both")
    want_patch = not (show_stat or name_status) or as_json
    fields: dict[str, Any] = {"run_id": run_id, "node_id": node_id, "seq": seq,
                              "to_seq": to_seq, "worktree": worktree, "iteration": iteration,
                              "attempt": attempt, "patch": want_patch}
    result = run_call(operations(home, socket_).diff, fields)
    if as_json:
        print_json(result)
    elif show_stat:
        click.echo(shown(result["stat"]), nl=False)
    elif name_status:
        for f in result["files"]:
            if f["old_path"]:
                click.echo(f"{f['status']}\t{field(f['old_path'])}\t{field(f['path'])}")
            else:
                click.echo(f"{f['status']}\t{field(f['path'])}")
    else:
        # Byte for byte, as git writes a patch: names and text that are not UTF-8 included.
        out = raw_stdout()
        out.write((result["patch"] or "").encode("utf-8", "surrogateescape"))
        out.flush()
