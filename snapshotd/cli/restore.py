"""``snapshotd restore RUN --node X``: bring a worktree (or a new directory) back to a checkpoint.

Owns the command line of restore. It runs through ``snapshotd.ops.backend.run_op``: in the daemon
when one answers on the socket (so the restore is serialized with captures of that worktree),
else directly on the home under the daemon's own home lock.

Promises: ``--dry-run`` prints one ``A``/``M``/``D`` line per path and changes nothing; an in-place
restore prints the exact command that undoes it; ``--json`` prints the result map; a progress bar
shows on a terminal for large restores; errors go to stderr with exit 1.
"""

from __future__ import annotations

import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import click

from snapshotd.cli.common import (
    attempt_options,
    daemon_client,
    op_options,
    print_json,
    run_op,
    shown,
)
from snapshotd.ops.backend import with_location
from snapshotd_client import SnapshotdError

# Restores with at least this many paths get a progress bar on a terminal.
PROGRESS_MIN = 1000
# A restore may write a whole tree.
RESTORE_TIMEOUT_S = 3600.0


@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", required=True, help="The node whose checkpoint to restore.")
@click.option("--seq", type=click.IntRange(min=0), default=None,
              help="Checkpoint seq (default: the newest of the attempt, not counting safety "
                   "checkpoints).")
@attempt_options
@click.option("--to", "to", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Materialize into this new or empty directory instead of the worktree.")
@click.option("--dry-run", is_flag=True, help="Print the plan (A/M/D per path); change nothing.")
@click.option("--force", is_flag=True,
              help="Restore in place even while an attempt is working on the worktree.")
@op_options
def restore(run_id: str, node_id: str, seq: int | None, iteration: int | None,
            attempt: int | None, to: Path | None, dry_run: bool, force: bool,
            home: Path | None, socket_: Path | None, as_json: bool) -> None:
    """Restore a checkpoint of RUN in place, or into --to DIR.

    In place, the current state is first saved as a safety checkpoint and the command that
    undoes the restore is printed. Only differing paths are written; ignored files, .git, HEAD,
    the index and branches are never touched.
    """
    fields: dict[str, Any] = {"run_id": run_id, "node_id": node_id, "seq": seq,
                              "iteration": iteration, "attempt": attempt,
                              "to": str(to.absolute()) if to is not None else None,
                              "dry_run": dry_run, "force": force}
    show_bar = not as_json and not dry_run and sys.stdout.isatty()
    result = run_restore(home, socket_, fields, show_bar=show_bar)
    if result.get("undo_command"):
        result["undo_command"] = with_location(result["undo_command"], home, socket_)
    if as_json:
        print_json(result)
        return
    _print_result(result)


def run_restore(home: Path | None, socket_: Path | None, fields: dict,
                *, show_bar: bool) -> dict:
    """The restore through the daemon (paging a dry-run's plan) or directly on the home."""
    from snapshotd.features.restore.restore import restore_checkpoint

    def direct(service: Any) -> dict:
        bar = _Bar(show_bar)
        try:
            result = restore_checkpoint(
                service, run_id=fields["run_id"], node_id=fields["node_id"], seq=fields["seq"],
                iteration=fields["iteration"], attempt=fields["attempt"],
                to=Path(fields["to"]) if fields["to"] else None, dry_run=fields["dry_run"],
                force=fields["force"], progress=bar.update)
        finally:
            bar.close()
        # The same keys as the op's reply, whole.
        result.update(plan_total=len(result["plan"]), plan_offset=0, plan_truncated=False,
                      kept_total=len(result["kept"]))
        return result

    def via_daemon(client: Any) -> dict:
        if show_bar:
            first = _request_with_bar(client, socket_, fields)
        else:
            first = client.request("restore", **fields)
        if not fields["dry_run"] or not first.get("plan_truncated"):
            return first
        # A dry-run's plan comes in pages; the result is recomputed per page, cheaply.
        plan = list(first["plan"])
        while len(plan) < first["plan_total"]:
            page = client.request("restore", **fields, plan_offset=len(plan))
            if not page["plan"]:
                break
            plan.extend(page["plan"])
        first.update(plan=plan, plan_truncated=False, plan_offset=0)
        return first

    return run_op(home, socket_, "restore", fields, direct, timeout=RESTORE_TIMEOUT_S,
                  via_daemon=via_daemon)


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
            self.bar = click.progressbar(length=total, label="restoring", show_pos=True)
            self.bar.__enter__()
        if done > self.shown:
            self.bar.update(done - self.shown)
            self.shown = done

    def close(self) -> None:
        if self.bar is not None:
            self.bar.__exit__(None, None, None)
            self.bar = None


def _request_with_bar(client: Any, socket_: Path | None, fields: dict) -> dict:
    """Send the restore on one connection and poll its progress on another."""
    token = uuid.uuid4().hex
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = client.request("restore", **fields, progress_token=token)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    bar = _Bar(True)
    try:
        with daemon_client(socket_, timeout=10) as poller:
            while thread.is_alive():
                thread.join(0.15)
                if not thread.is_alive():
                    break
                try:
                    board = poller.request("restore_progress", progress_token=token)
                except SnapshotdError:
                    break  # an older daemon without the op: no bar, same restore
                if board.get("total"):
                    bar.update(board["done"], board["total"])
        thread.join()
        if "result" in box and bar.bar is not None:
            total = box["result"].get("plan_total", 0)
            bar.update(total, total)
    finally:
        bar.close()
    if "error" in box:
        raise box["error"]
    return box["result"]


def _print_result(r: dict) -> None:
    where = f"{r['run_id']}/{r['node_id']} iteration {r['iteration']} attempt {r['attempt']}"
    counts = r.get("counts", {})
    total = r.get("plan_total", len(r["plan"]))
    for kept in r.get("kept", []):
        click.echo(shown(f"snapshotd: kept {kept['path']}: {kept['reason']}"), err=True)
    if r["dry_run"]:
        for row in r["plan"]:
            click.echo(f"{row['op']} {shown(row['path'])}")
        verb = "materialize" if r["mode"] == "to" else "restore"
        click.echo(f"dry run: {total} change(s) would {verb} seq {r['seq']} of {where} into "
                   f"{shown(r['target'])}; nothing was changed", err=True)
        return
    summary = (f"{counts.get('A', 0)} added, {counts.get('M', 0)} modified, "
               f"{counts.get('D', 0)} deleted")
    if r["mode"] == "to":
        click.echo(f"materialized seq {r['seq']} of {where} ({r['commit'][:10]}) into "
                   f"{shown(r['target'])}: {total} file(s)")
        return
    if total == 0:
        click.echo(f"{shown(r['target'])} already matches seq {r['seq']} of {where} "
                   f"({r['commit'][:10]}); nothing to change")
    else:
        click.echo(f"restored seq {r['seq']} of {where} ({r['commit'][:10]}) into "
                   f"{shown(r['target'])}: {summary}")
    safety = r.get("safety")
    if safety:
        click.echo(f"the state before the restore is safety checkpoint seq {safety['seq']}; "
                   "undo with:")
        click.echo(f"  {shown(r['undo_command'])}")
