"""``snapshotd revert RUN --node X``: undo one checkpoint's, one tool call's or a whole
attempt's change, keeping every change made since (``git revert`` semantics).

Owns the command line of revert; the revert is ``Operations.revert`` (the daemon's ``revert``
op when one answers, else on the home). Promises: ``--dry-run`` prints one line per path
(``reverted``, ``merged``, ``conflict``, ``untouched``) and changes nothing; an applied revert
prints the exact command that undoes it; a revert refused for conflicts writes nothing, prints
each conflicting path with both sides and exits 3 (``EXIT_CONFLICT``); other errors exit 1.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from snapshotd.cli.common import attempt_options, op_options, operations, print_json, run_call
from snapshotd.cli.terminal import field

# Exit status of a revert refused because paths conflict (nothing was written).
EXIT_CONFLICT = 3
REVERT_TIMEOUT_S = 3600.0


@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", required=True, help="The node whose change to revert.")
@click.option("--seq", type=click.IntRange(min=0), default=None,
              help="Revert the change of this checkpoint (with --to-seq: of the range).")
@click.option("--to-seq", type=click.IntRange(min=0), default=None,
              help="Last checkpoint of the range --seq..--to-seq.")
@click.option("--tool-call", "tool_call", default=None,
              help="Revert everything this tool call changed (any id it carries).")
@click.option("--turn", type=click.IntRange(min=1), default=None,
              help="Revert everything the tool calls of prompt N's turn changed.")
@click.option("--all", "all_", is_flag=True,
              help="Revert everything the attempt's tool calls changed.")
@attempt_options
@click.option("--conflicts", type=click.Choice(["refuse", "markers"]), default="refuse",
              show_default=True,
              help="On conflicting paths: write nothing (refuse), or write git-style markers.")
@click.option("--dry-run", is_flag=True,
              help="Print what each path would become; change nothing.")
@click.option("--force", is_flag=True,
              help="Revert even while an attempt is working on the worktree.")
@op_options
def revert(run_id: str, node_id: str, seq: int | None, to_seq: int | None,
           tool_call: str | None, turn: int | None, all_: bool, iteration: int | None, attempt: int | None,
           conflicts: str, dry_run: bool, force: bool, home: Path | None,
           socket_: Path | None, as_json: bool) -> None:
    """Undo a change of RUN against the worktree as it is now, like `git revert`.

    Paths nobody changed since go back to their state before the change; paths changed since
    (by you, another session, a later tool call) are merged line by line. Where anything
    conflicts, nothing is written (exit 3) unless --conflicts=markers. The state before is
    saved as a safety checkpoint and the command that undoes the revert is printed.
    """
    fields: dict[str, Any] = {"run_id": run_id, "node_id": node_id, "seq": seq,
                              "to_seq": to_seq, "tool_call": tool_call, "all": all_,
                              "turn": turn,
                              "iteration": iteration, "attempt": attempt,
                              "dry_run": dry_run, "force": force, "conflicts": conflicts}
    result = run_call(operations(home, socket_).revert, fields, timeout=REVERT_TIMEOUT_S)
    if as_json:
        print_json(result)
    else:
        _print_result(result)
    if result.get("refused"):
        sys.exit(EXIT_CONFLICT)


def _print_result(r: dict) -> None:
    where = f"{field(r['run_id'])}/{field(r['node_id'])} attempt {r['attempt']}"
    for row in r["paths"]:
        if r["dry_run"] or row["status"] != "untouched":
            click.echo(f"{row['status']:<9} {field(row['path'])}")
    for kept in r.get("kept", []):
        click.echo(field(f"snapshotd: kept {kept['path']}: {kept['reason']}"), err=True)
    for c in r["conflicts"]:
        click.echo(f"conflict {field(c['path'])}: {field(c['reason'])} (seq {c['seq']})",
                   err=True)
        click.echo(f"  now:      {field(c['current'][:400])}", err=True)
        click.echo(f"  reverted: {field(c['reverted'][:400])}", err=True)
    counts = r["counts"]
    summary = (f"{counts['reverted']} reverted, {counts['merged']} merged, "
               f"{counts['conflict']} conflict(s), {counts['untouched']} untouched")
    if r["dry_run"]:
        click.echo(f"dry run: revert of {field(r['what'])} of {where}: {summary}; nothing was "
                   "changed", err=True)
        return
    if r["refused"]:
        click.echo(f"revert of {field(r['what'])} of {where} refused: {summary}; nothing was "
                   "written (--conflicts=markers writes git-style markers instead)", err=True)
        return
    click.echo(f"reverted {field(r['what'])} of {where} in {field(r['target'])}: {summary}")
    if r.get("undo_command"):
        click.echo("undo with:")
        click.echo(f"  {field(r['undo_command'])}")
