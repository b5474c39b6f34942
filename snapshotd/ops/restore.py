"""Restore as the front ends run it: daemon or local, with progress and the plan's pages.

Owns ``run_restore`` (and ``run_revert``, the same for ``revert``), the one path of ``snapshotd restore``, the MCP tool and the web app into
``snapshotd.features.restore.restore.restore_checkpoint``: in the daemon when one answers (so
the restore is serialized with the captures of that worktree, under every rule of the
``restore`` op), else on the home under the daemon's lock (``snapshotd.ops.backend.run_op``).

Promises:
- ``progress(done, total)`` is called as paths are written: from the restore itself when it
  runs here, from the daemon's progress board (``restore_progress``, polled on a second
  connection) when it runs there; an older daemon without the board gives no progress, the
  same restore. ``progress_token`` instead leaves the polling to the caller.
- ``plan_limit`` None: the whole plan (a daemon's dry-run plan is fetched page by page and
  joined); a number: the first page of at most that many paths (``plan_total`` tells the rest).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snapshotd.core import process_umask
from snapshotd.ops import backend
from snapshotd_client import Client, SnapshotdError, socket_path

if TYPE_CHECKING:
    from snapshotd.service import Service

Progress = Callable[[int, int], None]

# A restore may write a whole tree.
RESTORE_TIMEOUT_S = 3600.0
# How often the daemon's progress board is read, and how long one read may take.
PROGRESS_POLL_S = 0.15
PROGRESS_TIMEOUT_S = 10.0


def run_restore(fields: dict[str, Any], *, home: Path | None = None,
                socket: Path | None = None, plan_limit: int | None = None,
                progress: Progress | None = None, progress_token: str | None = None,
                timeout: float = RESTORE_TIMEOUT_S) -> dict:
    """Restore ``fields`` (``run_id``, ``node_id``, ``seq``, ``iteration``, ``attempt``,
    ``to``: an absolute path or None, ``dry_run``, ``force``; ``paths`` (optional: only
    these); ``umask``, this process's when
    absent) through the daemon or here."""
    sent = dict(fields)
    # The restore runs in the daemon (umask 077): what it creates gets git's modes less ours.
    sent.setdefault("umask", process_umask())
    if plan_limit is not None:
        sent["plan_limit"] = plan_limit

    def local(service: Service) -> dict:
        from snapshotd.features.restore import page_plan, restore_checkpoint

        result = restore_checkpoint(
            service, run_id=fields["run_id"], node_id=fields["node_id"], seq=fields["seq"],
            iteration=fields["iteration"], attempt=fields["attempt"],
            to=Path(fields["to"]) if fields["to"] else None, dry_run=fields["dry_run"],
            force=fields["force"], progress=progress, umask=sent["umask"],
            include_ignored=bool(fields.get("include_ignored")),
            paths=fields.get("paths"))
        if plan_limit is not None:
            return page_plan(result, 0, plan_limit)
        # The same keys as the op's reply, whole.
        result.update(plan_total=len(result["plan"]), plan_offset=0, plan_truncated=False,
                      kept_total=len(result["kept"]))
        return result

    def via_daemon(client: Client) -> dict:
        if progress is not None:
            first = _request_with_progress(client, socket, sent, progress)
        elif progress_token is not None:
            first = client.request("restore", **sent, progress_token=progress_token)
        else:
            first = client.request("restore", **sent)
        if plan_limit is not None or not fields["dry_run"] or not first.get("plan_truncated"):
            return first
        # A dry-run's plan comes in pages; the result is recomputed per page, cheaply.
        plan = list(first["plan"])
        while len(plan) < first["plan_total"]:
            page = client.request("restore", **sent, plan_offset=len(plan))
            if not page["plan"]:
                break
            plan.extend(page["plan"])
        first.update(plan=plan, plan_truncated=False, plan_offset=0)
        return first

    op_fields = dict(sent, progress_token=progress_token) if progress_token else sent
    return backend.run_op("restore", op_fields, local, home=home, socket=socket,
                          timeout=timeout, via_daemon=via_daemon)


def _request_with_progress(client: Client, socket: Path | None, fields: dict,
                           progress: Progress) -> dict:
    """Send the restore on ``client`` and relay the daemon's board from another connection."""
    token = uuid.uuid4().hex
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["result"] = client.request("restore", **fields, progress_token=token)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=work, daemon=True)
    thread.start()
    reported = False
    with Client(socket_path(socket), timeout=PROGRESS_TIMEOUT_S) as poller:
        while thread.is_alive():
            thread.join(PROGRESS_POLL_S)
            if not thread.is_alive():
                break
            try:
                board = poller.request("restore_progress", progress_token=token)
            except SnapshotdError:
                break  # an older daemon without the op: no progress, same restore
            if board.get("total"):
                progress(board["done"], board["total"])
                reported = True
    thread.join()
    if "error" in box:
        raise box["error"]
    if reported:
        total = box["result"].get("plan_total", 0)
        progress(total, total)
    return box["result"]


def run_revert(fields: dict[str, Any], *, home: Path | None = None,
               socket: Path | None = None, timeout: float = RESTORE_TIMEOUT_S) -> dict:
    """Revert ``fields`` (``run_id``, ``node_id``; one of ``seq`` (with ``to_seq``),
    ``tool_call``, ``turn``, ``all``; ``iteration``, ``attempt``, ``dry_run``, ``force``, ``conflicts``;
    ``umask``, this process's when absent) through the daemon's ``revert`` op or here."""
    sent = {k: v for k, v in fields.items() if v is not None}
    sent.setdefault("umask", process_umask())

    def local(service: Service) -> dict:
        from snapshotd.features.restore import revert_checkpoints

        return revert_checkpoints(
            service, run_id=sent.get("run_id"), node_id=sent.get("node_id"),
            seq=sent.get("seq"), to_seq=sent.get("to_seq"), tool_call=sent.get("tool_call"),
            all_=bool(sent.get("all")), iteration=sent.get("iteration"),
            attempt=sent.get("attempt"), turn=sent.get("turn"),
            dry_run=bool(sent.get("dry_run")),
            force=bool(sent.get("force")), conflicts=sent.get("conflicts") or "refuse",
            umask=sent["umask"])

    return backend.run_op("revert", sent, local, home=home, socket=socket, timeout=timeout)
