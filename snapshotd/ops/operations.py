"""The one operations surface of every front end: the CLI, the MCP server and the web app.

Owns ``Operations``: each op they share (list, show, log, find, diff, compare, blame, export,
restore, bisect, checkout, gaps, status) as one plain call on one home and socket, with no MCP SDK, click or HTTP
in sight. Ops that act or capture go to the daemon when one answers, else run on the home under
the daemon's lock (``snapshotd.ops.backend.run_op``, ``snapshotd.ops.review``,
``snapshotd.ops.restore``: progress callback, plan paging); reads open the home for reading
(``backend.read_home``). The field-level calls (``diff``, ``blame``, ``export``, ``restore``)
return the op's reply as the CLI prints it; the keyword calls shape it for the MCP tools.

Promises:
- Every diff is ``snapshotd.features.review.diff.render_trees`` (renames found by similarity):
  the CLI, the MCP tools and the web app describe a pair of checkpoints alike.
- Every failure a caller can act on is a ``ServiceError`` (or the client's
  ``DaemonUnavailable``) whose message says what to do; nothing here prints or exits.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snapshotd.core import BAD_REQUEST, ServiceError, id_field
from snapshotd.features.review import public_shape
from snapshotd.ops import backend
from snapshotd.ops.bisect import run_bisect, run_checkout
from snapshotd.ops.restore import RESTORE_TIMEOUT_S, Progress, run_restore, run_revert
from snapshotd.ops.review import DIFF_TIMEOUT_S as WHOLE_DIFF_TIMEOUT_S
from snapshotd.ops.review import run_blame, run_diff, run_export
from snapshotd.service import (
    collect_runs,
    list_from_ledger,
    list_gaps,
    open_ledger_if_any,
    require_known_run,
    run_calls,
    set_turns,
    with_turns,
)
from snapshotd_client import Client, DaemonUnavailable, SnapshotdError, home_dir, socket_path

if TYPE_CHECKING:
    from snapshotd.features.bisect import Progress as BisectProgress
    from snapshotd.features.review import HomeView

# Daemon round trips: listing and status are quick; a diff captures the worktree (stat scan);
# a restore may write a whole tree.
QUICK_TIMEOUT_S = 30.0
DIFF_TIMEOUT_S = 120.0
MCP_RESTORE_TIMEOUT_S = 900.0
PROGRESS_TIMEOUT_S = 5.0
DEFAULT_PATCH_BYTES = 100_000
DEFAULT_PLAN_LIMIT = 1000
# The MCP tool's bisect is bounded: per run of the command, and in runs.
MCP_BISECT_TIMEOUT_S = 300.0
MCP_BISECT_MAX_STEPS = 12


class Operations:
    """The operations on one home and socket (both default the way the CLI's do)."""

    def __init__(self, *, home: Path | None = None, socket: Path | None = None) -> None:
        self._home = home
        self._socket = socket

    @property
    def home(self) -> Path:
        return (self._home or home_dir()).expanduser()

    @property
    def socket(self) -> Path:
        return socket_path(self._socket)

    def list_runs(self, *, limit: int | None = None) -> dict:
        rows = collect_runs(self.home)
        total = len(rows)
        if limit is not None:
            rows = rows[-limit:]
        return {"runs": rows, "total": total, "truncated": len(rows) < total}

    def list_checkpoints(self, *, run_id: str, node_id: str | None = None,
                         attempt: int | None = None, limit: int | None = None) -> dict:
        run_id = id_field("run_id", run_id)
        if node_id is not None:
            node_id = id_field("node_id", node_id)
        try:
            # Every page (a long run's listing does not fit one reply frame), then cut below.
            result = backend.request_pages("list", socket=self.socket, timeout=QUICK_TIMEOUT_S,
                                           run_id=run_id, node_id=node_id, attempt=attempt)
            result["source"] = "daemon"
        except DaemonUnavailable:
            result = list_from_ledger(self.home, run_id, node_id, attempt)
            result["source"] = "ledger"
        if not result.get("checkpoints") and not result.get("gaps"):
            require_known_run(self.home, run_id)
        with open_ledger_if_any(self.home) as ledger:  # issue 44: as snapshots --json
            result = with_turns(result, ledger.turns(run_id, node_id, attempt) if ledger else [])
        checkpoints = result.get("checkpoints") or []
        result["tool_calls"] = run_calls(checkpoints)  # one entry per call, as snapshots --json
        result["checkpoints_total"] = len(checkpoints)
        if limit is not None and len(checkpoints) > limit:
            result["checkpoints"] = checkpoints[-limit:]
        result["truncated"] = len(result["checkpoints"]) < len(checkpoints)
        return result

    def diff(self, fields: dict[str, Any], *, timeout: float = WHOLE_DIFF_TIMEOUT_S) -> dict:
        """``snapshotd diff --json``: the ``diff`` op's reply for ``fields`` (``run_id``,
        ``node_id``, ``seq``, ``to_seq``, ``worktree``, ``iteration``, ``attempt``, ``patch``),
        with a patch or file list too large for one reply frame rendered here, whole."""
        result = run_diff(fields, home=self._home, socket=self._socket, timeout=timeout)
        return backend.complete_diff(result, fields.get("patch", True) is not False)

    def diff_checkpoint(self, *, run_id: str, node_id: str, seq: int, to_seq: int | None = None,
                        worktree: bool = False, iteration: int | None = None,
                        attempt: int | None = None, patch: bool = True,
                        max_patch_bytes: int = DEFAULT_PATCH_BYTES) -> dict:
        """The MCP tool's diff: the patch cut to ``max_patch_bytes``, a cut file list left cut."""
        run_id = id_field("run_id", run_id)
        node_id = id_field("node_id", node_id)
        if to_seq is not None and worktree:
            raise ServiceError(BAD_REQUEST, "compare with to_seq or with worktree=true, not both")
        fields = {"run_id": run_id, "node_id": node_id, "seq": seq, "to_seq": to_seq,
                  "worktree": worktree, "iteration": iteration, "attempt": attempt,
                  "patch": patch}
        result = run_diff(fields, home=self._home, socket=self._socket, timeout=DIFF_TIMEOUT_S)
        if patch and result.get("patch_omitted"):
            # Too large for one reply frame: rendered here from the two trees, then cut to
            # what the caller asked for. A cut file list (files_total) stays cut.
            result = dict(result, patch=backend.complete_diff(result, True)["patch"])
            result.pop("patch_omitted", None)
        return _cut_patch(result, max_patch_bytes)

    def compare(self, sel: dict[str, Any], against: dict[str, Any] | None, *,
                patch: bool = True, max_patch_bytes: int | None = None) -> dict:
        """What checkpoint ``sel`` changed against ``against`` (any checkpoint of the store,
        across attempts too) or, when None, its parent checkpoint; selections are dicts of
        ``run_id``, ``node_id``, ``seq``, ``iteration``, ``attempt``. Read from the store
        directly, daemon or not (``snapshotd.features.review.history.compare``)."""
        from snapshotd.features.review import compare

        def call(view: HomeView) -> dict:
            return compare(view, sel, against, patch=patch)

        result = backend.read_home(call, home=self._home)
        if max_patch_bytes is not None:
            result = _cut_patch(result, max_patch_bytes)
        return result

    def show_checkpoint(self, *, run_id: str, node_id: str, seq: int | None = None,
                        iteration: int | None = None, attempt: int | None = None,
                        patch: bool = True, max_patch_bytes: int = DEFAULT_PATCH_BYTES) -> dict:
        from snapshotd.features.review import show_checkpoint

        result = backend.read_home(lambda view: _turned(view, show_checkpoint(
            view, run_id=run_id, node_id=node_id, seq=seq, iteration=iteration,
            attempt=attempt, patch=patch), lambda r: [r["checkpoint"]]), home=self._home)
        return _cut_patch(result, max_patch_bytes)

    def show_tool_call(self, *, run_id: str, tool_call: str, node_id: str | None = None,
                       patch: bool = True, max_patch_bytes: int = DEFAULT_PATCH_BYTES) -> dict:
        """``snapshotd show --tool-call ID --json``: one tool call's whole change, by any of
        its ids (``snapshotd.features.review.tool_call_change``)."""
        from snapshotd.features.review import show_tool_call

        result = backend.read_home(lambda view: show_tool_call(
            view, run_id=run_id, tool_call=tool_call, node_id=node_id, patch=patch),
            home=self._home)
        return _cut_patch(result, max_patch_bytes)

    def log_checkpoints(self, *, run_id: str, node_id: str | None = None,
                        iteration: int | None = None, attempt: int | None = None,
                        path: str | None = None, since: str | None = None,
                        pickaxe: str | None = None, patch: bool = False, limit: int | None = None,
                        root: bool = False, max_patch_bytes: int = DEFAULT_PATCH_BYTES) -> dict:
        from snapshotd.features.review import log_run

        result = backend.read_home(lambda view: _turned(view, log_run(
            view, run_id=run_id, node_id=node_id, iteration=iteration, attempt=attempt,
            path=path, since=since, pickaxe=pickaxe, patch=patch, limit=limit, root=root),
            lambda r: r["entries"]), home=self._home)
        result["entries"] = [_cut_patch(e, max_patch_bytes) for e in result["entries"]]
        return result

    def find_path(self, *, path: str, cwd: str | None = None, since: str | None = None,
                  limit: int | None = None) -> dict:
        from snapshotd.features.review import find_path

        return backend.read_home(lambda view: _turned(view, find_path(
            view, path=path, cwd=cwd, since=since, limit=limit), lambda r: r["checkpoints"]),
            home=self._home)

    def restore(self, fields: dict[str, Any], *, plan_limit: int | None = None,
                progress: Progress | None = None, progress_token: str | None = None,
                timeout: float = RESTORE_TIMEOUT_S) -> dict:
        """The ``restore`` op on ``fields`` (``run_id``, ``node_id``, ``seq``, ``iteration``,
        ``attempt``, ``to``, ``dry_run``, ``force``), daemon or local
        (``snapshotd.ops.restore.run_restore``: progress, the plan whole or its first page); an
        undo command names the home and socket this surface was given."""
        result = run_restore(fields, home=self._home, socket=self._socket,
                             plan_limit=plan_limit, progress=progress,
                             progress_token=progress_token, timeout=timeout)
        if result.get("undo_command") and (self._home is not None or self._socket is not None):
            result["undo_command"] = backend.with_location(result["undo_command"], self._home,
                                                           self._socket)
        return result

    def restore_checkpoint(self, *, run_id: str, node_id: str, seq: int | None = None,
                           dry_run: bool = True, to_dir: str | None = None,
                           iteration: int | None = None, attempt: int | None = None,
                           force: bool = False, plan_limit: int = DEFAULT_PLAN_LIMIT,
                           progress: Progress | None = None,
                           progress_token: str | None = None,
                           include_ignored: bool = False,
                           paths: list[str] | None = None) -> dict:
        """The MCP tool's and the web app's restore: ``to_dir`` absolute, the plan's first
        ``plan_limit`` paths; ``include_ignored``: a guard checkpoint's kept files too;
        ``paths``: only these (``restore --path``)."""
        fields = {"run_id": id_field("run_id", run_id), "node_id": id_field("node_id", node_id),
                  "seq": seq, "iteration": iteration, "attempt": attempt,
                  "to": _absolute_dir(to_dir), "dry_run": dry_run, "force": force}
        if include_ignored:
            fields["include_ignored"] = True
        if paths:
            fields["paths"] = list(paths)
        return self.restore(fields, plan_limit=plan_limit, progress=progress,
                            progress_token=progress_token, timeout=MCP_RESTORE_TIMEOUT_S)

    def list_turns(self, *, run_id: str, node_id: str | None = None,
                   attempt: int | None = None) -> dict:
        """``snapshotd turns --json``, the MCP ``list_turns``: the run's turns with their tool
        calls, files changed and gaps (``snapshotd.ops.turns.list_turns``)."""
        from snapshotd.ops.turns import list_turns

        run_id = id_field("run_id", run_id)
        return backend.read_home(lambda view: list_turns(view, run_id, node_id, attempt),
                                 home=self._home)

    def restore_turn(self, fields: dict[str, Any], *, before: int | None = None,
                     after: int | None = None, **kwargs: Any) -> dict:
        """``restore --before-turn N`` / ``--after-turn N``: ``fields`` as ``restore`` takes
        them (``node_id`` may be None: the node of the run's turns), the seq chosen by turn
        (``snapshotd.ops.turns.turn_target``); the reply adds ``turn`` (its number and first
        line) and ``resume_command`` (None when the agent cannot resume by id)."""
        from snapshotd.ops.turns import resume_command, turn_target

        run_id = id_field("run_id", fields["run_id"])
        target = backend.read_home(lambda view: turn_target(
            view.ledger, run_id, fields.get("node_id"), fields.get("iteration"),
            fields.get("attempt"), before=before, after=after), home=self._home)
        turn = target.pop("turn")
        result = self.restore({**fields, **target}, **kwargs)
        result["turn"] = {"turn": turn["turn"], "first_line": turn["first_line"],
                          "before": before is not None}
        result["resume_command"] = resume_command(run_id, turn)
        return result

    def restore_turn_checkpoint(self, *, run_id: str, before_turn: int | None = None,
                                after_turn: int | None = None, node_id: str | None = None,
                                dry_run: bool = True, to_dir: str | None = None,
                                iteration: int | None = None, attempt: int | None = None,
                                force: bool = False,
                                plan_limit: int = DEFAULT_PLAN_LIMIT) -> dict:
        """The MCP tool's restore by turn: ``restore_turn`` with ``to_dir`` absolute and the
        plan's first ``plan_limit`` paths."""
        fields = {"run_id": id_field("run_id", run_id),
                  "node_id": id_field("node_id", node_id) if node_id is not None else None,
                  "seq": None, "iteration": iteration, "attempt": attempt,
                  "to": _absolute_dir(to_dir), "dry_run": dry_run, "force": force}
        return self.restore_turn(fields, before=before_turn, after=after_turn,
                                 plan_limit=plan_limit, timeout=MCP_RESTORE_TIMEOUT_S)

    def revert(self, fields: dict[str, Any], *, timeout: float = RESTORE_TIMEOUT_S) -> dict:
        """The ``revert`` op on ``fields`` (``snapshotd.ops.restore.run_revert``), daemon or
        local; an undo command names the home and socket this surface was given."""
        result = run_revert(fields, home=self._home, socket=self._socket, timeout=timeout)
        if result.get("undo_command") and (self._home is not None or self._socket is not None):
            result["undo_command"] = backend.with_location(result["undo_command"], self._home,
                                                           self._socket)
        return result

    def revert_checkpoint(self, *, run_id: str, node_id: str, seq: int | None = None,
                          to_seq: int | None = None, tool_call: str | None = None,
                          all_: bool = False, dry_run: bool = True,
                          conflicts: str = "refuse", iteration: int | None = None,
                          attempt: int | None = None, force: bool = False,
                          turn: int | None = None) -> dict:
        """The MCP tool's and the web app's revert (a dry run unless asked)."""
        fields = {"run_id": id_field("run_id", run_id), "node_id": id_field("node_id", node_id),
                  "seq": seq, "to_seq": to_seq, "tool_call": tool_call, "all": all_,
                  "turn": turn,
                  "iteration": iteration, "attempt": attempt, "dry_run": dry_run,
                  "force": force, "conflicts": conflicts}
        return self.revert(fields, timeout=MCP_RESTORE_TIMEOUT_S)

    def restore_progress(self, token: str) -> dict:
        """The daemon's progress board for an in-flight restore (empty if it cannot say: a
        restore running without a daemon, or an older daemon)."""
        try:
            with Client(self.socket, timeout=PROGRESS_TIMEOUT_S) as client:
                return client.request("restore_progress", progress_token=token)
        except SnapshotdError:
            return {}

    def bisect(self, fields: dict[str, Any], argv: list[str], *, timeout: float | None = None,
               max_steps: int | None = None, progress: BisectProgress | None = None,
               output: int | None = None, scratch_parent: Path | None = None) -> dict:
        """``snapshotd bisect --json`` for ``fields`` (``run_id``, ``node_id``, ``good``,
        ``bad``, ``iteration``, ``attempt``): run here, never in the daemon
        (``snapshotd.ops.bisect.run_bisect``); ``output`` None keeps each run's output tail."""
        return run_bisect(fields, argv, home=self._home, timeout=timeout, max_steps=max_steps,
                          progress=progress, output=output, scratch_parent=scratch_parent)

    def bisect_checkpoints(self, *, run_id: str, node_id: str, command: list[str],
                           good: int | None = None, bad: int | None = None,
                           iteration: int | None = None, attempt: int | None = None,
                           timeout_s: float = MCP_BISECT_TIMEOUT_S,
                           max_steps: int = MCP_BISECT_MAX_STEPS,
                           progress: BisectProgress | None = None) -> dict:
        """The MCP tool's bisect: bounded per run (``timeout_s``) and in runs (``max_steps``),
        each run's output tail in its step."""
        fields = {"run_id": id_field("run_id", run_id), "node_id": id_field("node_id", node_id),
                  "good": good, "bad": bad, "iteration": iteration, "attempt": attempt}
        if not isinstance(command, list) or not command or not all(
                isinstance(word, str) and word and "\0" not in word for word in command):
            raise ServiceError(BAD_REQUEST, "command must be a non-empty list of arguments, "
                               "e.g. [\"pytest\", \"-x\", \"tests/test_app.py\"]")
        return self.bisect(fields, command, timeout=timeout_s, max_steps=max_steps,
                           progress=progress)

    def checkout(self, fields: dict[str, Any]) -> dict:
        """``snapshotd checkout --json`` for ``fields`` (``run_id``, ``node_id``, ``seq``,
        ``iteration``, ``attempt``, ``target``, ``writable``): read-only, here."""
        return run_checkout(fields, home=self._home)

    def blame(self, fields: dict[str, Any]) -> dict:
        """``snapshotd blame --json`` for ``fields`` (``run_id``, ``node_id``, ``path``, ``seq``,
        ``iteration``, ``attempt``, ``first_line``, ``last_line``): the documented shape
        (``public_shape``; its ``lines`` may be a compact sequence: iterate it), plus ``turn``,
        the blamed checkpoint's turn (issue 44)."""
        raw = run_blame(fields, home=self._home, socket=self._socket)
        shaped = public_shape(raw)
        shaped["turn"] = raw.get("turn")
        return shaped

    def blame_file(self, *, run_id: str, node_id: str, path: str, seq: int | None = None,
                   iteration: int | None = None, attempt: int | None = None,
                   first_line: int = 1, last_line: int | None = None) -> dict:
        """``snapshotd blame --json``, of lines ``first_line``..``last_line`` only (a list)."""
        result = self.blame({"run_id": run_id, "node_id": node_id, "path": path, "seq": seq,
                             "iteration": iteration, "attempt": attempt,
                             "first_line": first_line, "last_line": last_line})
        result["lines"] = list(result["lines"])
        return result

    def export(self, fields: dict[str, Any]) -> dict:
        """``snapshotd export --json`` for the ``export`` op's ``fields``, daemon or local."""
        return run_export(fields, home=self._home, socket=self._socket)

    def export_checkpoints(self, *, run_id: str, node_id: str, branch: str | None = None,
                           patches_dir: str | None = None, squash: bool = False,
                           repo_dir: str | None = None, from_seq: int | None = None,
                           to_seq: int | None = None, iteration: int | None = None,
                           attempt: int | None = None) -> dict:
        """``snapshotd export --json``. Never with ``allow_secrets``: the agent being captured
        does not decide that a secret leaves the host; a person releases it after review."""
        return self.export({"run_id": run_id, "node_id": node_id, "branch": branch,
                            "squash": squash, "repo": _absolute_dir(repo_dir),
                            "patches": _absolute_dir(patches_dir), "from_seq": from_seq,
                            "to_seq": to_seq, "iteration": iteration, "attempt": attempt})

    def list_gaps(self, *, run_id: str | None = None, unresolved_only: bool = False,
                  limit: int | None = None) -> dict:
        if run_id is not None:
            run_id = id_field("run_id", run_id)
        return list_gaps(self.home, run_id, unresolved_only=unresolved_only, limit=limit)

    def status(self) -> dict:
        try:
            info = backend.request("status", socket=self.socket, timeout=QUICK_TIMEOUT_S)
        except DaemonUnavailable:
            return {"running": False, "socket": str(self.socket),
                    "message": f"no daemon is running on {self.socket}; start it with "
                               "`snapshotd serve` or `snapshotd install-service`"}
        info["running"] = True
        return info


def _turned(view: HomeView, result: dict, rows: Callable[[dict], list[dict]]) -> dict:
    """``result`` with a ``turn`` on each of its checkpoint ``rows`` (issue 44)."""
    set_turns(view.ledger, rows(result))
    return result


def _absolute_dir(to_dir: str | None) -> str | None:
    if to_dir is None:
        return None
    expanded = os.path.expanduser(to_dir)
    if not to_dir or "\0" in to_dir or not os.path.isabs(expanded):
        raise ServiceError(BAD_REQUEST, f"to_dir must be an absolute path, not {to_dir!r}")
    return os.path.normpath(expanded)


def _cut_patch(result: dict, max_patch_bytes: int) -> dict:
    text = result.get("patch")
    result["patch_truncated"] = False
    if isinstance(text, str):
        data = text.encode("utf-8", "surrogatepass")
        if len(data) > max_patch_bytes:
            result["patch"] = data[:max_patch_bytes].decode("utf-8", "ignore")
            result["patch_truncated"] = True
            result["patch_bytes"] = len(data)
    return result

