"""``snapshotd restore RUN --node X``: bring a worktree (or a new directory) back to a checkpoint.

Owns the command line of restore and its progress bar. The restore is
``snapshotd.ops.operations.Operations.restore``, the one the MCP tool and the web app use: in
the daemon when one answers on the socket (so the restore is serialized with captures of that
worktree), else directly on the home under the daemon's own home lock.

Promises: ``--dry-run`` prints one ``A``/``M``/``D`` line per path and changes nothing; an in-place
restore prints the exact command that undoes it; ``--json`` prints the result map; a progress bar
shows on a terminal for large restores; errors go to stderr with exit 1.
"""

from __future__ import annotations

import sys
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
)
from snapshotd.cli.terminal import field, raw_text_stdout

# Restores with at least this many paths get a progress bar on a terminal.
PROGRESS_MIN = 1000
# A restore may write a whole tree.
RESTORE_TIMEOUT_S = 3600.0


@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", default=None,
              help="The node whose checkpoint to restore (default: the run's only node).")
@click.option("--seq", type=click.IntRange(min=0), default=None,
              help="Checkpoint seq (default: the newest of the attempt, not counting safety "
                   "checkpoints).")
@click.option("--before-turn", type=click.IntRange(min=1), default=None,
              help="The state when prompt N was submitted (docs/restore.md, by turn).")
@click.option("--after-turn", type=click.IntRange(min=1), default=None,
              help="The state at the end of turn N (before prompt N+1).")
@attempt_options
@click.option("--to", "to", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Materialize into this new or empty directory instead of the worktree.")
@click.option("--path", "paths", multiple=True,
              help="Restore only this path (repeatable; a directory means everything under "
                   "it; relative to the worktree). Every other file is left as it is; a path "
                   "the checkpoint lacks is deleted.")
@click.option("--dry-run", is_flag=True, help="Print the plan (A/M/D per path); change nothing.")
@click.option("--force", is_flag=True,
              help="Restore in place even while an attempt is working on the worktree.")
@click.option("--include-ignored", is_flag=True,
              help="Also write back a guard checkpoint's kept ignored files where none is "
                   "(docs/guard.md).")
@op_options
def restore(run_id: str, node_id: str | None, seq: int | None, before_turn: int | None,
            after_turn: int | None, iteration: int | None, attempt: int | None,
            to: Path | None, paths: tuple[str, ...], dry_run: bool, force: bool,
            include_ignored: bool, home: Path | None, socket_: Path | None,
            as_json: bool) -> None:
    """Restore a checkpoint of RUN in place, or into --to DIR.

    In place, the current state is first saved as a safety checkpoint and the command that
    undoes the restore is printed. Only differing paths are written; ignored files, .git, HEAD,
    the index and branches are never touched.
    """
    fields: dict[str, Any] = {"run_id": run_id, "node_id": node_id, "seq": seq,
                              "iteration": iteration, "attempt": attempt,
                              "to": str(to.absolute()) if to is not None else None,
                              "dry_run": dry_run, "force": force}
    if include_ignored:
        fields["include_ignored"] = True
    if paths:
        fields["paths"] = list(paths)
    show_bar = not as_json and not dry_run and sys.stdout.isatty()
    by_turn = before_turn is not None or after_turn is not None
    if by_turn and seq is not None:
        raise click.UsageError("--seq and --before-turn/--after-turn name different states: "
                               "give one")
    if not by_turn:
        fields["node_id"] = node_or_only(home, run_id, node_id)
    if by_turn:
        result = run_turn_restore(home, socket_, fields, before_turn, after_turn, show_bar)
    else:
        result = run_restore(home, socket_, fields, show_bar=show_bar)
    if as_json:
        print_json(result)
        return
    _print_result(result)
    if by_turn:
        _print_turn(result)


def run_restore(home: Path | None, socket_: Path | None, fields: dict,
                *, show_bar: bool) -> dict:
    """The restore through the daemon (a dry-run's plan whole) or directly on the home, with a
    progress bar on a terminal when ``show_bar``."""
    bar = _Bar(show_bar)
    try:
        return run_call(operations(home, socket_).restore, fields,
                        progress=bar.update if show_bar else None, timeout=RESTORE_TIMEOUT_S)
    finally:
        bar.close()


def run_turn_restore(home: Path | None, socket_: Path | None, fields: dict,
                     before: int | None, after: int | None, show_bar: bool) -> dict:
    """The restore by turn (``Operations.restore_turn``), with the same progress bar."""
    bar = _Bar(show_bar)
    try:
        return run_call(operations(home, socket_).restore_turn, fields, before=before,
                        after=after, progress=bar.update if show_bar else None,
                        timeout=RESTORE_TIMEOUT_S)
    finally:
        bar.close()


def _print_turn(r: dict) -> None:
    turn = r.get("turn") or {}
    when = "before" if turn.get("before") else "after"
    line = f": {field(turn['first_line'])}" if turn.get("first_line") else ""
    click.echo(f"that is the state {when} turn {turn.get('turn')}{line}")
    if r.get("resume_command"):
        click.echo("continue the conversation with (Claude Code: /rewind in it picks the "
                   "prompt):" if r["resume_command"].startswith("claude ") else
                   "continue the conversation with:")
        click.echo(f"  {field(r['resume_command'])}")


class _Bar:
    """A click progress bar created on the first report of a large enough restore."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.bar: Any = None
        self.shown = 0

    def update(self, done: int, total: int) -> None:
        if not self.enabled or total < PROGRESS_MIN:
            return
        if self.bar is None:
            # Its own \r and cursor codes: written past the escaping of terminal.guard_output.
            self.bar = click.progressbar(length=total, label="restoring", show_pos=True,
                                         file=raw_text_stdout())
            self.bar.__enter__()
        if done > self.shown:
            self.bar.update(done - self.shown)
            self.shown = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def _print_result(r: dict) -> None:
    where = (f"{field(r['run_id'])}/{field(r['node_id'])} iteration {r['iteration']} "
             f"attempt {r['attempt']}")
    counts = r.get("counts", {})
    total = r.get("plan_total", len(r["plan"]))
    for kept in r.get("kept", []):
        click.echo(field(f"snapshotd: kept {kept['path']}: {kept['reason']}"), err=True)
    ignored = r.get("ignored")
    if ignored:
        verb = "would write" if r["dry_run"] else "wrote"
        click.echo(f"ignored files: {verb} {ignored['written_total']}, left "
                   f"{ignored['left_total']} (kept set {ignored['commit'][:10]})", err=True)
        for left in ignored["left"]:
            click.echo(field(f"snapshotd: left {left['path']}: {left['reason']}"), err=True)
    if r["dry_run"]:
        for row in r["plan"]:
            click.echo(f"{row['op']} {field(row['path'])}")
        verb = "materialize" if r["mode"] == "to" else "restore"
        click.echo(f"dry run: {total} change(s) would {verb} seq {r['seq']} of {where} into "
                   f"{field(r['target'])}; nothing was changed", err=True)
        return
    summary = (f"{counts.get('A', 0)} added, {counts.get('M', 0)} modified, "
               f"{counts.get('D', 0)} deleted")
    if r["mode"] == "to":
        click.echo(f"materialized seq {r['seq']} of {where} ({r['commit'][:10]}) into "
                   f"{field(r['target'])}: {total} file(s)")
        return
    if total == 0:
        click.echo(f"{field(r['target'])} already matches seq {r['seq']} of {where} "
                   f"({r['commit'][:10]}); nothing to change")
    else:
        click.echo(f"restored seq {r['seq']} of {where} ({r['commit'][:10]}) into "
                   f"{field(r['target'])}: {summary}")
    safety = r.get("safety")
    if safety:
        click.echo(f"the state before the restore is safety checkpoint seq {safety['seq']}; "
                   "undo with:")
        click.echo(f"  {field(r['undo_command'])}")
