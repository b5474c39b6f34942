"""The MCP twin of the command line: ``snapshotd mcp`` serves six tools over stdio.

Owns the tools an agent (or any MCP client) uses to see and use its durability surface:
``list_runs``, ``list_snapshots``, ``diff_checkpoint``, ``restore_checkpoint``, ``list_gaps`` and
``status``, built on the official MCP Python SDK (2.x, ``MCPServer``).

Promises:
- Every tool is a thin call into the code the CLI uses. ``list_snapshots``, ``diff_checkpoint``,
  ``restore_checkpoint`` and ``status`` ask the daemon over its socket (ops ``list``, ``diff``,
  ``restore``, ``status``), so a restore through MCP is serialized with captures of that worktree
  and obeys every rule the CLI obeys: it refuses while an attempt is active on the worktree unless
  ``force``, takes a safety checkpoint first and returns the undo command, stays confined to the
  target. ``list_runs``, ``list_gaps`` (and ``list_snapshots`` when no daemon answers) read the
  ledger and the gap spool the way ``snapshotd snapshots`` does.
- Results are structured (``structuredContent``) with the fields of the matching ``--json``
  output; ``restore_checkpoint`` defaults to ``dry_run=true``.
- A bad argument (an unknown run, a malformed id, a seq that does not exist, ``to_seq`` together
  with ``worktree``, a daemon that is not running) is a tool error result (``isError``) whose text
  says what to do; the server keeps serving.
- Nothing but the protocol is written to stdout: while serving, ``sys.stdout`` is stderr (and the
  SDK points fd 1 at stderr), and logging goes to stderr.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import ToolAnnotations
from pydantic import ConfigDict, Field, with_config
from typing_extensions import TypedDict

from snapshotd import __version__
from snapshotd_client import Client, DaemonUnavailable, SnapshotdError
from snapshotd_client.paths import gaps_path, home_dir, socket_path
from snapshotd_client.protocol import validate_id

log = logging.getLogger("snapshotd.mcp")

SERVER_NAME = "snapshotd"

INSTRUCTIONS = """\
snapshotd keeps a git checkpoint of your worktree after every tool call (and when writes settle),
grouped by run, node and attempt; a plain Claude Code session is run `claude-<session_id>`, node
`session`. Use list_runs to find a run, list_snapshots to see its checkpoints (seq, label, files
changed) and its gaps, diff_checkpoint to see what a checkpoint changed or how the worktree differs
from it now, and restore_checkpoint to get a checkpoint back. restore_checkpoint is a dry run
unless dry_run=false; an in-place restore first takes a safety checkpoint and returns
`undo_command` and `safety.seq` (restore that seq to undo). It refuses while an attempt is active
on the worktree (your own session counts) unless force=true. list_gaps shows captures that could
not be taken; status shows the daemon's health."""

# Daemon round trips: listing and status are quick; a diff captures the worktree (stat scan);
# a restore may write a whole tree.
QUICK_TIMEOUT_S = 30.0
DIFF_TIMEOUT_S = 120.0
RESTORE_TIMEOUT_S = 900.0
PROGRESS_POLL_S = 0.25
DEFAULT_PATCH_BYTES = 100_000
DEFAULT_PLAN_LIMIT = 1000
LOCK_RETRY_S = 5.0

T = TypeVar("T")


# -- result shapes (published as output schemas; extra fields pass through) ---------------------


@with_config(ConfigDict(extra="allow"))
class RunRow(TypedDict, total=False):
    run_id: str
    nodes: int
    attempts: int
    states: dict[str, int]
    checkpoints: int
    gaps: int
    unresolved_gaps: int
    worktrees: list[str]
    started_at: float | None
    last_activity: float | None


@with_config(ConfigDict(extra="allow"))
class RunsResult(TypedDict, total=False):
    runs: list[RunRow]
    total: int
    truncated: bool


@with_config(ConfigDict(extra="allow"))
class SnapshotsResult(TypedDict, total=False):
    run_id: str
    checkpoints: list[dict[str, Any]]
    gaps: list[dict[str, Any]]
    checkpoints_total: int
    truncated: bool
    source: str


@with_config(ConfigDict(extra="allow"))
class DiffSide(TypedDict, total=False):
    seq: int | None
    commit: str | None
    tree: str
    worktree: str


DiffResult = with_config(ConfigDict(extra="allow"))(TypedDict("DiffResult", {
    "run_id": str, "node_id": str, "iteration": int, "attempt": int,
    "from": DiffSide, "to": DiffSide, "files": list[dict[str, Any]],
    "stats": dict[str, Any], "stat": str, "patch": str | None, "patch_truncated": bool,
    "store": str,
}, total=False))


@with_config(ConfigDict(extra="allow"))
class RestoreResult(TypedDict, total=False):
    run_id: str
    node_id: str
    iteration: int
    attempt: int
    seq: int
    commit: str
    tree: str
    target: str
    mode: str
    dry_run: bool
    applied: bool
    plan: list[dict[str, Any]]
    plan_total: int
    plan_truncated: bool
    counts: dict[str, int]
    kept: list[dict[str, Any]]
    safety: dict[str, Any] | None
    undo_command: str | None


@with_config(ConfigDict(extra="allow"))
class GapsResult(TypedDict, total=False):
    gaps: list[dict[str, Any]]
    total: int
    unresolved: int
    by_reason: dict[str, int]
    truncated: bool


# -- public entry --------------------------------------------------------------------------------


def serve_stdio(*, home: Path | None = None, socket: Path | None = None,
                log_level: str = "WARNING") -> None:
    """Serve the tools over stdin/stdout until the client closes the stream."""
    build_server(home=home, socket=socket, log_level=log_level).run("stdio")


def build_server(*, home: Path | None = None, socket: Path | None = None,
                 log_level: str = "WARNING") -> MCPServer:
    """The MCP server with the six tools, talking to the daemon on ``socket`` and reading the
    ledger under ``home`` (both default the way the CLI's do)."""
    backend = Backend(home=home, socket=socket)
    app: MCPServer = MCPServer(SERVER_NAME, title="snapshotd checkpoints", version=__version__,
                               instructions=INSTRUCTIONS, log_level=_level(log_level),
                               lifespan=_stdout_to_stderr)

    @app.tool(annotations=ToolAnnotations(title="List runs", read_only_hint=True,
                                          open_world_hint=False))
    def list_runs(
        limit: Annotated[int | None, Field(ge=1, description="Only the newest N runs (by last "
                                           "activity); all when omitted.")] = None,
    ) -> RunsResult:
        """The runs snapshotd knows, oldest activity first, as `snapshotd runs --json` lists
        them: node and attempt counts, attempts by state, checkpoints, gaps (and how many are
        unresolved), worktrees, started_at and last_activity (epoch seconds)."""
        return _tool(backend.list_runs, limit=limit)

    @app.tool(annotations=ToolAnnotations(title="List checkpoints", read_only_hint=True,
                                          open_world_hint=False))
    def list_snapshots(
        run_id: Annotated[str, Field(description="The run, e.g. `claude-<session_id>`.")],
        node_id: Annotated[str | None, Field(description="Only this node.")] = None,
        attempt: Annotated[int | None, Field(ge=1, description="Only this attempt number.")] = None,
        limit: Annotated[int | None, Field(ge=1, description="Only the newest N checkpoints; all "
                                           "when omitted.")] = None,
    ) -> SnapshotsResult:
        """A run's checkpoints (seq, node, iteration, attempt, tier, source, label, commit, tree,
        files added/modified/deleted, created_at) with its gaps in line (a gap whose tool call got
        a checkpoint later is marked resolved). The same fields as `snapshotd snapshots --json`."""
        return _tool(backend.list_snapshots, run_id=run_id, node_id=node_id, attempt=attempt,
                     limit=limit)

    @app.tool(annotations=ToolAnnotations(title="Diff a checkpoint", read_only_hint=True,
                                          open_world_hint=False))
    def diff_checkpoint(
        run_id: Annotated[str, Field(description="The run.")],
        node_id: Annotated[str, Field(description="The node, e.g. `session`.")],
        seq: Annotated[int, Field(ge=0, description="The checkpoint to look at.")],
        to_seq: Annotated[int | None, Field(ge=0, description="Compare with this checkpoint of "
                                            "the same attempt.")] = None,
        worktree: Annotated[bool, Field(description="Compare with the worktree as it is now.")
                            ] = False,
        iteration: Annotated[int | None, Field(ge=0, description="The iteration (default: the "
                                               "newest that has checkpoints).")] = None,
        attempt: Annotated[int | None, Field(ge=1, description="The attempt (default: the "
                                             "newest).")] = None,
        patch: Annotated[bool, Field(description="Include the git-style patch text; false gives "
                                     "only the file list and the stat.")] = True,
        max_patch_bytes: Annotated[int, Field(ge=1, description="Cut the patch text after this "
                                              "many bytes (patch_truncated tells).")
                                   ] = DEFAULT_PATCH_BYTES,
    ) -> DiffResult:  # type: ignore[valid-type]
        """What checkpoint `seq` changed (against the previous checkpoint of its attempt), or how
        it differs from checkpoint `to_seq`, or from the worktree now (`worktree=true`): files
        (status, path, additions, deletions), stats, git's --stat text and the patch."""
        return _tool(backend.diff_checkpoint, run_id=run_id, node_id=node_id, seq=seq,
                     to_seq=to_seq, worktree=worktree, iteration=iteration, attempt=attempt,
                     patch=patch, max_patch_bytes=max_patch_bytes)

    @app.tool(annotations=ToolAnnotations(title="Restore a checkpoint", read_only_hint=False,
                                          destructive_hint=True, idempotent_hint=False,
                                          open_world_hint=False))
    async def restore_checkpoint(
        ctx: Context,
        run_id: Annotated[str, Field(description="The run.")],
        node_id: Annotated[str, Field(description="The node, e.g. `session`.")],
        seq: Annotated[int | None, Field(ge=0, description="The checkpoint (default: the newest "
                                         "of the newest attempt, not counting safety "
                                         "checkpoints).")] = None,
        dry_run: Annotated[bool, Field(description="Only compute the plan (A/M/D per path); "
                                       "change nothing. Pass false to restore.")] = True,
        to_dir: Annotated[str | None, Field(description="Materialize into this new or empty "
                                            "directory (absolute path) instead of restoring the "
                                            "worktree in place.")] = None,
        iteration: Annotated[int | None, Field(ge=0, description="The iteration (default: the "
                                               "newest).")] = None,
        attempt: Annotated[int | None, Field(ge=1, description="The attempt (default: the "
                                             "newest).")] = None,
        force: Annotated[bool, Field(description="Restore in place even though an attempt is "
                                     "active on the worktree (e.g. your own session). The safety "
                                     "checkpoint is still taken.")] = False,
        plan_limit: Annotated[int, Field(ge=1, le=5000, description="At most this many plan "
                                         "entries in the result (plan_total tells the rest).")
                              ] = DEFAULT_PLAN_LIMIT,
    ) -> RestoreResult:
        """Bring the worktree (or `to_dir`) back to a checkpoint. In place it first captures the
        current state as a safety checkpoint and returns `safety.seq` and `undo_command`; it
        touches only differing files, never ignored files, `.git` or anything outside the
        target. Default dry_run=true returns the plan and changes nothing."""
        token = uuid.uuid4().hex
        call = _guarded(backend.restore_checkpoint)
        outcome: list[Any] = []

        def work() -> None:
            # Kept out of the task group's exception handling: a ToolError must reach the SDK
            # as itself, not wrapped in an ExceptionGroup.
            try:
                outcome.append(call(run_id=run_id, node_id=node_id, seq=seq, dry_run=dry_run,
                                    to_dir=to_dir, iteration=iteration, attempt=attempt,
                                    force=force, plan_limit=plan_limit, progress_token=token))
            except BaseException as exc:  # noqa: BLE001 - re-raised below, outside the group
                outcome.append(exc)

        async with anyio.create_task_group() as tg:
            done = anyio.Event()

            async def watch() -> None:
                last: tuple[int, int | None] | None = None
                while not done.is_set():
                    with anyio.move_on_after(PROGRESS_POLL_S):
                        await done.wait()
                    if done.is_set():
                        break
                    board = await anyio.to_thread.run_sync(backend.restore_progress, token)
                    now = (board.get("done") or 0, board.get("total"))
                    if board.get("total") and now != last:
                        last = now
                        await ctx.report_progress(now[0], now[1], "restoring")

            tg.start_soon(watch)
            try:
                await anyio.to_thread.run_sync(work)
            finally:
                done.set()
        result = outcome[0]
        if isinstance(result, BaseException):
            raise result
        total = result.get("plan_total", len(result.get("plan", [])))
        if not dry_run:
            await ctx.report_progress(total, total, "restored")
        return result  # type: ignore[return-value]

    @app.tool(annotations=ToolAnnotations(title="List gaps", read_only_hint=True,
                                          open_world_hint=False))
    def list_gaps(
        run_id: Annotated[str | None, Field(description="Only this run's gaps.")] = None,
        unresolved_only: Annotated[bool, Field(description="Leave out gaps whose tool call got "
                                               "a checkpoint later.")] = False,
        limit: Annotated[int | None, Field(ge=1, description="Only the newest N gaps; all when "
                                           "omitted.")] = None,
    ) -> GapsResult:
        """Captures that could not be taken (gap records: ts, run, node, attempt, worktree, tier,
        source, tool_use_id, reason, detail), each marked resolved when a later checkpoint covered
        its tool call, oldest first, with counts by reason."""
        return _tool(backend.list_gaps, run_id=run_id, unresolved_only=unresolved_only,
                     limit=limit)

    @app.tool(annotations=ToolAnnotations(title="Daemon status", read_only_hint=True,
                                          open_world_hint=False))
    def status() -> dict[str, Any]:
        """The daemon's status map as `snapshotd status --json` prints it (pid, version, uptime,
        home, socket, sizes, watched worktrees, counters, gaps by reason, latencies), with
        `running: true`; `{running: false, socket, message}` when no daemon answers."""
        return _tool(backend.status)

    return app


# -- the operations ------------------------------------------------------------------------------


class Backend:
    """The six operations as plain calls; every failure a caller can fix is a ``ToolError``."""

    def __init__(self, *, home: Path | None = None, socket: Path | None = None) -> None:
        self._home = home
        self._socket = socket

    @property
    def home(self) -> Path:
        return (self._home or home_dir()).expanduser()

    @property
    def socket(self) -> Path:
        return socket_path(self._socket)

    # -- tools -----------------------------------------------------------------------------------

    def list_runs(self, *, limit: int | None = None) -> dict:
        from snapshotd.cli.runs import collect_runs

        home = self.home
        try:
            from snapshotd.ledger import ledger_exists

            rows = collect_runs(home) if ledger_exists(home) else []
        except SystemExit:  # collect_runs reports an unreadable spool the CLI way
            raise ToolError(f"io-error: could not read the ledger or gap spool under {home}; "
                            "see the server's stderr") from None
        total = len(rows)
        if limit is not None:
            rows = rows[-limit:]
        return {"runs": rows, "total": total, "truncated": len(rows) < total}

    def list_snapshots(self, *, run_id: str, node_id: str | None = None,
                       attempt: int | None = None, limit: int | None = None) -> dict:
        run_id = _check_id("run_id", run_id)
        if node_id is not None:
            node_id = _check_id("node_id", node_id)
        try:
            listing = self._request("list", QUICK_TIMEOUT_S, run_id=run_id, node_id=node_id,
                                    attempt=attempt)
            listing["source"] = "daemon"
        except DaemonUnavailable:
            listing = self._list_from_ledger(run_id, node_id, attempt)
            listing["source"] = "ledger"
        if not listing.get("checkpoints") and not listing.get("gaps"):
            self._require_known_run(run_id)
        checkpoints = listing.get("checkpoints") or []
        listing["checkpoints_total"] = len(checkpoints)
        if limit is not None and len(checkpoints) > limit:
            listing["checkpoints"] = checkpoints[-limit:]
        listing["truncated"] = len(listing["checkpoints"]) < len(checkpoints)
        return listing

    def diff_checkpoint(self, *, run_id: str, node_id: str, seq: int, to_seq: int | None = None,
                        worktree: bool = False, iteration: int | None = None,
                        attempt: int | None = None, patch: bool = True,
                        max_patch_bytes: int = DEFAULT_PATCH_BYTES) -> dict:
        run_id = _check_id("run_id", run_id)
        node_id = _check_id("node_id", node_id)
        if to_seq is not None and worktree:
            raise ToolError("bad-request: compare with to_seq or with worktree=true, not both")
        fields = {"run_id": run_id, "node_id": node_id, "seq": seq, "to_seq": to_seq,
                  "worktree": worktree, "iteration": iteration, "attempt": attempt,
                  "patch": patch}

        def direct(service: Any) -> dict:
            from snapshotd.diff import diff_checkpoints

            return diff_checkpoints(service, **fields)

        result = self._daemon_or_direct("diff", DIFF_TIMEOUT_S, fields, direct)
        if patch and result.get("patch_omitted"):
            # Too large for one reply frame: render it here from the two trees, then cut it
            # to what the caller asked for. A cut file list (files_total) stays cut.
            result["patch"] = _patch_from_store(result)
            result.pop("patch_omitted", None)
        text = result.get("patch")
        result["patch_truncated"] = False
        if isinstance(text, str):
            data = text.encode("utf-8", "surrogatepass")
            if len(data) > max_patch_bytes:
                result["patch"] = data[:max_patch_bytes].decode("utf-8", "ignore")
                result["patch_truncated"] = True
                result["patch_bytes"] = len(data)
        return result

    def restore_checkpoint(self, *, run_id: str, node_id: str, seq: int | None = None,
                           dry_run: bool = True, to_dir: str | None = None,
                           iteration: int | None = None, attempt: int | None = None,
                           force: bool = False, plan_limit: int = DEFAULT_PLAN_LIMIT,
                           progress_token: str | None = None) -> dict:
        run_id = _check_id("run_id", run_id)
        node_id = _check_id("node_id", node_id)
        to: str | None = None
        if to_dir is not None:
            expanded = os.path.expanduser(to_dir)
            if not to_dir or "\0" in to_dir or not os.path.isabs(expanded):
                raise ToolError(f"bad-request: to_dir must be an absolute path, not {to_dir!r}")
            to = os.path.normpath(expanded)
        fields = {"run_id": run_id, "node_id": node_id, "seq": seq, "iteration": iteration,
                  "attempt": attempt, "to": to, "dry_run": dry_run, "force": force}

        def direct(service: Any) -> dict:
            from snapshotd.restore import page_plan, restore_checkpoint

            result = restore_checkpoint(service, run_id=run_id, node_id=node_id, seq=seq,
                                        iteration=iteration, attempt=attempt,
                                        to=Path(to) if to else None, dry_run=dry_run,
                                        force=force)
            return page_plan(result, 0, plan_limit)

        result = self._daemon_or_direct("restore", RESTORE_TIMEOUT_S,
                                        dict(fields, plan_limit=plan_limit,
                                             progress_token=progress_token), direct)
        if result.get("undo_command") and (self._home is not None or self._socket is not None):
            from snapshotd.cli.restore import with_location

            result["undo_command"] = with_location(result["undo_command"], self._home,
                                                   self._socket)
        return result

    def restore_progress(self, token: str) -> dict:
        """The daemon's progress board for an in-flight restore (empty if it cannot say)."""
        try:
            with Client(self.socket, timeout=5) as client:
                return client.request("restore_progress", progress_token=token)
        except SnapshotdError:
            return {}

    def list_gaps(self, *, run_id: str | None = None, unresolved_only: bool = False,
                  limit: int | None = None) -> dict:
        from snapshotd.gaps import GapSpool

        if run_id is not None:
            run_id = _check_id("run_id", run_id)
        spool = GapSpool(gaps_path(self.home))
        gaps = spool.for_run(run_id) if run_id is not None else spool.all()
        with self._ledger() as ledger:
            if run_id is not None and not gaps:
                if ledger is None or run_id not in ledger.run_ids():
                    raise ToolError(self._unknown_run(run_id, ledger))
            covered: dict[str, set[str]] = {}
            rows = []
            for gap in gaps:
                gap = dict(gap)
                run = gap.get("run_id")
                tool = gap.get("tool_use_id")
                resolved = False
                if ledger is not None and isinstance(run, str) and tool:
                    if run not in covered:
                        covered[run] = ledger.tool_use_ids(run)
                    resolved = tool in covered[run]
                gap["resolved"] = resolved
                rows.append(gap)
        by_reason: dict[str, int] = {}
        for gap in rows:
            reason = str(gap.get("reason"))
            by_reason[reason] = by_reason.get(reason, 0) + 1
        unresolved = sum(1 for g in rows if not g["resolved"])
        if unresolved_only:
            rows = [g for g in rows if not g["resolved"]]
        total = len(rows)
        if limit is not None:
            rows = rows[-limit:]
        return {"gaps": rows, "total": total, "unresolved": unresolved, "by_reason": by_reason,
                "truncated": len(rows) < total}

    def status(self) -> dict:
        try:
            info = self._request("status", QUICK_TIMEOUT_S)
        except DaemonUnavailable:
            return {"running": False, "socket": str(self.socket),
                    "message": f"no daemon is running on {self.socket}; start it with "
                               "`snapshotd serve` or `snapshotd install-service`"}
        info["running"] = True
        return info

    # -- helpers ---------------------------------------------------------------------------------

    def _request(self, op: str, timeout: float, **fields: Any) -> dict:
        """One daemon request; DaemonUnavailable propagates (callers may fall back), every
        other failure becomes a ToolError naming the code."""
        with Client(self.socket, timeout=timeout) as client:
            try:
                return client.request(op, **fields)
            except DaemonUnavailable:
                raise
            except SnapshotdError as exc:
                if exc.code == "unknown-op":
                    raise ToolError(f"unknown-op: the daemon on {self.socket} does not serve "
                                    f"`{op}`; upgrade and restart it (`snapshotd serve`)"
                                    ) from None
                raise ToolError(f"{exc.code}: {exc.message}") from None

    def _daemon_or_direct(self, op: str, timeout: float, fields: dict,
                          direct: Callable[[Any], dict]) -> dict:
        """Through the daemon when one answers (serialized with its captures); else directly on
        the home under the daemon's home lock, as the CLI's ``run_op`` does. The daemon is pinged
        first: once it has our request, a lost daemon is an error, never a second run."""
        from snapshotd.config import ConfigError, load_config
        from snapshotd.server import DaemonLockError, HomeLock
        from snapshotd.service import Service, ServiceError

        deadline = time.monotonic() + LOCK_RETRY_S
        while True:
            try:
                with Client(self.socket, timeout=5) as probe:
                    probe.ping()
            except DaemonUnavailable:
                pass
            else:
                try:
                    return self._request(op, timeout, **fields)
                except DaemonUnavailable as exc:
                    raise ToolError(f"daemon-unavailable: the daemon went away during `{op}` "
                                    f"({exc.message}); check `snapshotd status` and "
                                    "list_snapshots before retrying") from None
            home = self.home
            from snapshotd.ledger import describe_ledger, ledger_exists

            if not ledger_exists(home):
                raise ToolError(f"not-found: no ledger at {describe_ledger(home)}: nothing has "
                                "been captured with this home yet")
            lock = HomeLock(home)
            try:
                lock.acquire()
            except DaemonLockError:
                # A daemon holds the home but did not answer yet (starting up): ask it again.
                if time.monotonic() > deadline:
                    raise ToolError(f"daemon-unavailable: a daemon holds {home} but does not "
                                    f"answer on {self.socket}; check `snapshotd status`"
                                    ) from None
                time.sleep(0.2)
                continue
            try:
                try:
                    config = load_config()
                except ConfigError as exc:
                    raise ToolError(f"bad-config: {exc}") from None
                service = Service(home, config)
                try:
                    return direct(service)
                except ServiceError as exc:
                    raise ToolError(f"{exc.code}: {exc.message}") from None
                finally:
                    service.close()
            finally:
                lock.release()

    @contextlib.contextmanager
    def _ledger(self) -> Any:
        """The ledger opened read-side as the CLI opens it; None when nothing was captured."""
        from snapshotd.ledger import ledger_exists, open_ledger

        if not ledger_exists(self.home):
            yield None
            return
        ledger = open_ledger(self.home)
        try:
            yield ledger
        finally:
            ledger.close()

    def _list_from_ledger(self, run_id: str, node_id: str | None, attempt: int | None) -> dict:
        from snapshotd.gaps import GapSpool
        from snapshotd.service import list_run

        with self._ledger() as ledger:
            if ledger is None:
                raise ToolError(self._unknown_run(run_id, None))
            return list_run(ledger, GapSpool(gaps_path(self.home)), run_id, node_id, attempt)

    def _require_known_run(self, run_id: str) -> None:
        with self._ledger() as ledger:
            if ledger is not None and run_id in ledger.run_ids():
                return
            raise ToolError(self._unknown_run(run_id, ledger))

    def _unknown_run(self, run_id: str, ledger: Any) -> str:
        known = ledger.run_ids() if ledger is not None else []
        names = ", ".join(known[-20:]) or "none"
        return (f"not-found: unknown run {run_id!r}; known runs: {names} "
                "(list_runs shows them all)")


# -- plumbing ------------------------------------------------------------------------------------


def _tool(fn: Callable[..., T], **kwargs: Any) -> T:
    return _guarded(fn)(**kwargs)


def _guarded(fn: Callable[..., T]) -> Callable[..., T]:
    """Turn the failures a caller can act on into ToolErrors with a sentence that says what to
    do; anything else is a bug and reaches the SDK's generic handler (logged on stderr)."""

    def call(**kwargs: Any) -> T:
        try:
            return fn(**kwargs)
        except ToolError:
            raise
        except DaemonUnavailable as exc:
            raise ToolError(f"daemon-unavailable: {exc.message}; start the daemon with "
                            "`snapshotd serve` (or `snapshotd install-service`)") from None
        except SnapshotdError as exc:
            raise ToolError(f"{exc.code}: {exc.message}") from None
        except OSError as exc:
            raise ToolError(f"io-error: {exc}") from None
        except Exception as exc:
            import sqlite3

            from snapshotd.ledger import LedgerError

            if isinstance(exc, (sqlite3.Error, LedgerError)) or \
                    type(exc).__module__.startswith("psycopg"):
                raise ToolError(f"ledger-error: the ledger could not be read: {exc}") from None
            raise

    return call


def _patch_from_store(result: dict) -> str | None:
    """The patch between the two trees a diff reply names, read from the store."""
    import pygit2

    from snapshotd.diff import render_trees

    repo = pygit2.Repository(result["store"])
    return render_trees(repo, result["from"]["tree"], result["to"]["tree"], patch=True)["patch"]


def _check_id(kind: str, value: str) -> str:
    try:
        return validate_id(kind, value)
    except ValueError as exc:
        raise ToolError(f"bad-id: {exc}") from None


def _level(name: str) -> Any:
    upper = name.upper()
    return upper if upper in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL") else "WARNING"


_stdout_lock = threading.Lock()


@contextlib.asynccontextmanager
async def _stdout_to_stderr(_app: MCPServer) -> AsyncIterator[dict]:
    """While serving, Python-level writes to ``sys.stdout`` (a stray print in a library) go to
    stderr. The SDK already points fd 1 at stderr and writes the protocol through a private
    duplicate, but text buffered in ``sys.stdout`` would otherwise reach the wire when the SDK
    hands fd 1 back at exit."""
    with _stdout_lock:
        saved = sys.stdout
        sys.stdout = sys.stderr
    try:
        yield {}
    finally:
        with _stdout_lock:
            sys.stdout = saved
