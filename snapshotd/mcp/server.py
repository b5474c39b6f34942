"""The MCP twin of the command line: ``snapshotd mcp`` serves its tools over stdio.

Owns the tools an agent (or any MCP client) uses to see and use its durability surface (the
``ops.Operations`` calls: runs, checkpoints, diff, restore, gaps, status, show, log, find, blame,
export, bisect: ``bisect_tool``), built on the official MCP Python SDK (2.x, ``MCPServer``), and how their failures and
secrets reach the client. Promises:
- Every tool is a thin call into the code the CLI uses, so a restore through MCP is serialized
  with captures of that worktree and obeys every rule the CLI obeys: refused while an attempt is
  active unless ``force``, a safety checkpoint first, the undo command returned, confined.
- Results are structured (``structuredContent``) with the fields of the matching ``--json``
  output; ``restore_checkpoint`` defaults to ``dry_run=true``.
- A bad argument (unknown run, malformed id, missing seq, ``to_seq`` with ``worktree``, no daemon)
  is a tool error (``isError``) saying what to do; the server keeps serving. No URL password
  reaches the client (``config.redact_url`` on the status map and every error's text).
- Only the protocol goes to stdout: while serving, ``sys.stdout`` is stderr, as is logging.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
import threading
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
from snapshotd.core import ConfigError, ServiceError, redact_url
from snapshotd.ledger import LedgerError
from snapshotd.mcp.bisect_tool import INSTRUCTIONS as BISECT_INSTRUCTIONS
from snapshotd.mcp.bisect_tool import add_bisect_tool
from snapshotd.mcp.revert_tool import INSTRUCTIONS as REVERT_INSTRUCTIONS
from snapshotd.mcp.revert_tool import add_revert_tool
from snapshotd.mcp.turns_tool import INSTRUCTIONS as TURNS_INSTRUCTIONS
from snapshotd.mcp.turns_tool import add_turns_tools
from snapshotd.ops import DEFAULT_PATCH_BYTES, DEFAULT_PLAN_LIMIT, Operations
from snapshotd_client import DaemonUnavailable, SnapshotdError

log = logging.getLogger("snapshotd.mcp")

SERVER_NAME = "snapshotd"

INSTRUCTIONS = """\
snapshotd keeps a git checkpoint of your worktree after every tool call (and when writes settle),
grouped by run, node and attempt; a plain Claude Code session is run `claude-<session_id>`, node
`session`. Use list_runs to find a run, list_checkpoints to see its checkpoints (seq, label, files
changed) and its gaps, diff_checkpoint to see what a checkpoint changed or how the worktree differs
from it now, and restore_checkpoint to get a checkpoint back. restore_checkpoint is a dry run
unless dry_run=false; an in-place restore first takes a safety checkpoint and returns
`undo_command` and `safety.seq` (restore that seq to undo). It refuses while an attempt is active
on the worktree (your own session counts) unless force=true. list_gaps shows captures that could
not be taken; status shows the daemon's health. blame_file tells which checkpoint (tool call)
introduced each line of a file; export_checkpoints turns an attempt into a new branch or patches;
show_checkpoint shows one checkpoint's change with its tool call; log_checkpoints lists a run's
checkpoints newest first (pickaxe="def parse" finds when a text appeared or disappeared);
find_path lists the checkpoints that changed a path.""" + BISECT_INSTRUCTIONS + TURNS_INSTRUCTIONS \
    + REVERT_INSTRUCTIONS

PROGRESS_POLL_S = 0.25
# A URL in text (a status field, a git error): each one goes through redact_url.
URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")

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
    coverage: dict[str, Any]


@with_config(ConfigDict(extra="allow"))
class RunsResult(TypedDict, total=False):
    runs: list[RunRow]
    total: int
    truncated: bool


@with_config(ConfigDict(extra="allow"))
class CheckpointsResult(TypedDict, total=False):
    run_id: str
    checkpoints: list[dict[str, Any]]
    gaps: list[dict[str, Any]]
    checkpoints_total: int
    truncated: bool
    source: str
    coverage: list[dict[str, Any]]


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
    ignored: dict[str, Any]


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
    """The MCP server with its tools, talking to the daemon on ``socket`` and reading the
    ledger under ``home`` (both default the way the CLI's do)."""
    ops = Operations(home=home, socket=socket)
    app: MCPServer = MCPServer(SERVER_NAME, title="snapshotd checkpoints", version=__version__,
                               instructions=INSTRUCTIONS, log_level=_level(log_level),
                               lifespan=_stdout_to_stderr)
    _add_listing_tools(app, ops)
    _add_diff_tool(app, ops)
    _add_restore_tool(app, ops)
    _add_health_tools(app, ops)
    _add_review_tools(app, ops)
    _add_history_tools(app, ops)
    add_bisect_tool(app, ops, _guarded)
    add_turns_tools(app, ops, _guarded)
    add_revert_tool(app, ops, _guarded)
    return app


# -- the tools -----------------------------------------------------------------------------------


def _read_only(title: str) -> ToolAnnotations:
    return ToolAnnotations(title=title, read_only_hint=True, open_world_hint=False)


def _add_listing_tools(app: MCPServer, ops: Operations) -> None:
    @app.tool(annotations=_read_only("List runs"))
    def list_runs(
        limit: Annotated[int | None, Field(ge=1, description="Only the newest N runs (by last "
                                           "activity); all when omitted.")] = None,
    ) -> RunsResult:
        """The runs snapshotd knows, oldest activity first, as `snapshotd runs --json` lists
        them: node and attempt counts, attempts by state, checkpoints, gaps (and how many are
        unresolved), worktrees, started_at, last_activity (epoch seconds) and coverage (tool
        calls captured of those seen, gaps, changes from outside, added up over its attempts)."""
        return _tool(ops.list_runs, limit=limit)

    @app.tool(annotations=_read_only("List checkpoints"))
    def list_checkpoints(
        run_id: Annotated[str, Field(description="The run, e.g. `claude-<session_id>`.")],
        node_id: Annotated[str | None, Field(description="Only this node.")] = None,
        attempt: Annotated[int | None, Field(ge=1, description="Only this attempt number.")] = None,
        limit: Annotated[int | None, Field(ge=1, description="Only the newest N checkpoints; all "
                                           "when omitted.")] = None,
    ) -> CheckpointsResult:
        """A run's checkpoints (seq, node, iteration, attempt, tier, source, label, commit, tree,
        files added/modified/deleted, created_at, `tool_call`: the tool call it is, its own or
        the one that owned a tier-2 checkpoint, and `tool_calls`: those whose capture
        deduplicated onto it) with its gaps in line (a gap whose tool call got a checkpoint
        later is marked resolved), and `coverage`: per attempt, the tool calls seen and
        captured as theirs, inferred, open gaps (the last named), changes from outside and a
        one-line `summary`. The same fields as `snapshotd snapshots --json`."""
        return _tool(ops.list_checkpoints, run_id=run_id, node_id=node_id, attempt=attempt,
                     limit=limit)


def _add_diff_tool(app: MCPServer, ops: Operations) -> None:
    @app.tool(annotations=_read_only("Diff a checkpoint"))
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
        return _tool(ops.diff_checkpoint, run_id=run_id, node_id=node_id, seq=seq,
                     to_seq=to_seq, worktree=worktree, iteration=iteration, attempt=attempt,
                     patch=patch, max_patch_bytes=max_patch_bytes)


def _add_restore_tool(app: MCPServer, ops: Operations) -> None:
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
        include_ignored: Annotated[bool, Field(description="Also write back the ignored files "
                                               "(.env.local, local config) a guard checkpoint "
                                               "kept, where none is now.")] = False,
        paths: Annotated[list[str] | None, Field(description="Restore only these paths "
                                                 "(relative to the worktree; a directory "
                                                 "means everything under it); every other "
                                                 "file is left as it is.")] = None,
    ) -> RestoreResult:
        """Bring the worktree (or `to_dir`) back to a checkpoint. In place it first captures the
        current state as a safety checkpoint and returns `safety.seq` and `undo_command`; it
        touches only differing files, never ignored files, `.git` or anything outside the
        target. Default dry_run=true returns the plan and changes nothing."""
        return await _restore_with_progress(ctx, ops, dict(
            run_id=run_id, node_id=node_id, seq=seq, dry_run=dry_run, to_dir=to_dir,
            iteration=iteration, attempt=attempt, force=force, plan_limit=plan_limit,
            include_ignored=include_ignored, paths=paths))


def _add_health_tools(app: MCPServer, ops: Operations) -> None:
    @app.tool(annotations=_read_only("List gaps"))
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
        return _tool(ops.list_gaps, run_id=run_id, unresolved_only=unresolved_only,
                     limit=limit)

    @app.tool(annotations=_read_only("Daemon status"))
    def status() -> dict[str, Any]:
        """The daemon's status map as `snapshotd status --json` prints it (pid, version, uptime,
        home, socket, sizes, watched worktrees, counters, gaps by reason, latencies, and
        `coverage`: each active attempt's figures and their `total`), with `running: true`; `{running: false, socket, message}` when no daemon answers. Passwords
        in URLs (remote, ledger) are shown as `***`."""
        return redact(_tool(ops.status))


# Shared argument descriptions of the review tools (module level: annotations are resolved here).
_RUN = Field(description="The run.")
_NODE = Field(description="The node, e.g. `session`.")
_ITERATION = Field(ge=0, description="The iteration (default: the newest).")
_ATTEMPT = Field(ge=1, description="The attempt (default: the newest).")


def _add_review_tools(app: MCPServer, ops: Operations) -> None:
    @app.tool(annotations=_read_only("Blame a file"))
    def blame_file(
        run_id: Annotated[str, _RUN], node_id: Annotated[str, _NODE],
        path: Annotated[str, Field(description="The file, relative to the worktree.")],
        seq: Annotated[int | None, Field(ge=0, description="The checkpoint (default: the "
                                         "newest).")] = None,
        iteration: Annotated[int | None, _ITERATION] = None,
        attempt: Annotated[int | None, _ATTEMPT] = None,
        first_line: Annotated[int, Field(ge=1, description="First line to return.")] = 1,
        last_line: Annotated[int | None, Field(ge=1, description="Last line to return.")] = None,
    ) -> dict[str, Any]:
        """Each line of `path` at a checkpoint with the checkpoint that introduced it (seq,
        tool_use_id, label, tier, source), as `snapshotd blame --json`. Tier 2, or source
        `outside`, means it was written outside the agent's tool calls."""
        return _tool(ops.blame_file, run_id=run_id, node_id=node_id, path=path, seq=seq,
                     iteration=iteration, attempt=attempt, first_line=first_line,
                     last_line=last_line)

    @app.tool(annotations=ToolAnnotations(title="Export checkpoints", read_only_hint=False,
                                          destructive_hint=False, idempotent_hint=False,
                                          open_world_hint=False))
    def export_checkpoints(
        run_id: Annotated[str, _RUN], node_id: Annotated[str, _NODE],
        branch: Annotated[str | None, Field(description="A new branch to create.")] = None,
        patches_dir: Annotated[str | None, Field(description="Or: a new or empty directory "
                                                 "(absolute) for a `git am` series.")] = None,
        squash: Annotated[bool, Field(description="One commit for the range.")] = False,
        repo_dir: Annotated[str | None, Field(description="The repository (absolute; default "
                                              "the worktree's).")] = None,
        from_seq: Annotated[int | None, Field(ge=0, description="Export after this seq.")] = None,
        to_seq: Annotated[int | None, Field(ge=0, description="Up to this seq.")] = None,
        iteration: Annotated[int | None, _ITERATION] = None,
        attempt: Annotated[int | None, _ATTEMPT] = None,
    ) -> dict[str, Any]:
        """The attempt's checkpoints as commits on a new branch (based on the commit HEAD
        pointed at when the attempt began) or as patches, as `snapshotd export --json`. Writes
        only objects and the new branch: never HEAD, the index, the worktree or another ref."""
        return _tool(ops.export_checkpoints, run_id=run_id, node_id=node_id, branch=branch,
                     patches_dir=patches_dir, squash=squash, repo_dir=repo_dir,
                     from_seq=from_seq, to_seq=to_seq, iteration=iteration, attempt=attempt)


def _add_history_tools(app: MCPServer, ops: Operations) -> None:
    @app.tool(annotations=_read_only("Show a checkpoint"))
    def show_checkpoint(
        run_id: Annotated[str, Field(description="The run.")],
        node_id: Annotated[str | None, Field(description="The node, e.g. `session` (needed "
                                             "unless tool_call is given).")] = None,
        seq: Annotated[int | None, Field(ge=0, description="The checkpoint (default: the newest "
                                         "of the attempt).")] = None,
        tool_call: Annotated[str | None, Field(description="Show this tool call's whole change "
                                               "instead (any of its ids): from the checkpoint "
                                               "before its first to its last.")] = None,
        iteration: Annotated[int | None, Field(ge=0, description="The iteration (default: the "
                                               "newest).")] = None,
        attempt: Annotated[int | None, Field(ge=1, description="The attempt (default: the "
                                             "newest).")] = None,
        patch: Annotated[bool, Field(description="Include the patch text.")] = True,
        max_patch_bytes: Annotated[int, Field(ge=1, description="Cut the patch after this many "
                                              "bytes.")] = DEFAULT_PATCH_BYTES,
    ) -> dict[str, Any]:
        """What checkpoint `seq` changed against the previous one (the first against its base:
        the commit the worktree was at, else the empty tree), with its tool call (`tool_call`:
        id, label, how it owns the checkpoint; `tool_calls`: calls whose capture deduplicated
        onto it) and the attempt's gaps around it; with `tool_call`, that tool call's whole
        change. `snapshotd show --json` (`--tool-call ID`)."""
        if tool_call is not None:
            return _tool(ops.show_tool_call, run_id=run_id, tool_call=tool_call,
                         node_id=node_id, patch=patch, max_patch_bytes=max_patch_bytes)
        if node_id is None:
            raise ToolError("bad-request: give node_id (or tool_call)")
        return _tool(ops.show_checkpoint, run_id=run_id, node_id=node_id, seq=seq,
                     iteration=iteration, attempt=attempt, patch=patch,
                     max_patch_bytes=max_patch_bytes)

    @app.tool(annotations=_read_only("Log a run"))
    def log_checkpoints(
        run_id: Annotated[str, Field(description="The run.")],
        node_id: Annotated[str | None, Field(description="Only this node.")] = None,
        iteration: Annotated[int | None, Field(ge=0, description="Only this iteration.")] = None,
        attempt: Annotated[int | None, Field(ge=1, description="Only this attempt.")] = None,
        path: Annotated[str | None, Field(description="Only checkpoints that changed this file "
                                          "or directory (relative to the worktree).")] = None,
        since: Annotated[str | None, Field(description="Only checkpoints since this long ago "
                                           "(`2h`, `7d`) or this ISO time.")] = None,
        pickaxe: Annotated[str | None, Field(description="Only checkpoints that changed how "
                                             "often this text occurs (git log -S).")] = None,
        patch: Annotated[bool, Field(description="Include each patch.")] = False,
        limit: Annotated[int | None, Field(ge=1, description="At most N checkpoints.")] = None,
        root: Annotated[bool, Field(description="Also diff a first checkpoint with no known "
                                    "base (its whole tree against the empty tree).")] = False,
        max_patch_bytes: Annotated[int, Field(ge=1, description="Cut each patch after this many "
                                              "bytes.")] = DEFAULT_PATCH_BYTES,
    ) -> dict[str, Any]:
        """The run's checkpoints newest first across nodes and attempts, each with its tool call
        and diffstat. `snapshotd log --json`."""
        return _tool(ops.log_checkpoints, run_id=run_id, node_id=node_id, iteration=iteration,
                     attempt=attempt, path=path, since=since, pickaxe=pickaxe, patch=patch,
                     limit=limit, root=root, max_patch_bytes=max_patch_bytes)

    @app.tool(annotations=_read_only("Find a path's history"))
    def find_path(
        path: Annotated[str, Field(description="A file or directory of a worktree: absolute, or "
                                   "relative to `cwd`.")],
        cwd: Annotated[str | None, Field(description="Absolute directory a relative path is "
                                         "resolved against (default: the server's).")] = None,
        since: Annotated[str | None, Field(description="Only checkpoints since this long ago "
                                           "or this ISO time.")] = None,
        limit: Annotated[int | None, Field(ge=1, description="At most N checkpoints.")] = None,
    ) -> dict[str, Any]:
        """The runs and checkpoints that changed `path`, newest first, each with its tool call
        and A/M/D. `snapshotd find --json`."""
        return _tool(ops.find_path, path=path, cwd=cwd, since=since, limit=limit)


async def _restore_with_progress(ctx: Context, ops: Operations, kwargs: dict[str, Any]) -> Any:
    """The restore in a worker thread while the daemon's progress board is relayed to the
    client as progress notifications."""
    token = uuid.uuid4().hex
    call = _guarded(ops.restore_checkpoint)
    outcome: list[Any] = []

    def work() -> None:
        # Kept out of the task group's exception handling: a ToolError must reach the SDK as
        # itself, not wrapped in an ExceptionGroup.
        try:
            outcome.append(call(**kwargs, progress_token=token))
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
                board = await anyio.to_thread.run_sync(ops.restore_progress, token)
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
    if not kwargs["dry_run"]:
        await ctx.report_progress(total, total, "restored")
    return result


# -- plumbing ------------------------------------------------------------------------------------


def redact(value: T) -> T:
    """``value`` with the password of every URL in it (in any string, at any depth) replaced
    by ``***``."""
    if isinstance(value, str):
        return URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {k: redact(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, list):
        return [redact(v) for v in value]  # type: ignore[return-value]
    return value


def _tool(fn: Callable[..., T], **kwargs: Any) -> T:
    return _guarded(fn)(**kwargs)


def _guarded(fn: Callable[..., T]) -> Callable[..., T]:
    """Turn the failures a caller can act on into ToolErrors with a sentence that says what to
    do (URLs redacted); anything else is a bug and reaches the SDK's generic handler (logged on
    stderr)."""

    def call(**kwargs: Any) -> T:
        try:
            return fn(**kwargs)
        except ToolError as exc:
            raise ToolError(redact(str(exc))) from None
        except DaemonUnavailable as exc:
            text = (f"daemon-unavailable: {exc.message}; start the daemon with "
                    "`snapshotd serve` (or `snapshotd install-service`)")
        except (ServiceError, SnapshotdError) as exc:
            text = f"{exc.code}: {exc.message}"
        except ConfigError as exc:
            text = f"bad-config: {exc}"
        except LedgerError as exc:
            text = f"ledger-error: the ledger could not be read: {exc}"
        except OSError as exc:
            text = f"io-error: {exc}"
        raise ToolError(redact(text)) from None

    return call


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
