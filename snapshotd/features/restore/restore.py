"""Restore: bring a worktree, or a fresh directory, back to a checkpoint, precisely and confined.

Owns ``restore_checkpoint`` (behind the ``restore`` op, the CLI and ``attempt begin --resume``),
``undo_command``, ``end_command``, ``page_plan`` and the ops ``restore`` and ``restore_progress``
(``attach``); ``plan`` computes, ``apply`` writes. Promises (docs/restore.md, "Internals"):
- In place: under the worktree's lock, after a safety checkpoint (source ``restore``) recorded in
  the restored checkpoint's attempt, ended or not, returning the exact undo command; refused
  (``conflict``) while an attempt is working there unless forced, or when the worktree's path now
  resolves elsewhere. Only what differs is touched; writes are confined and atomic per file;
  then the restored state is captured and the restore recorded as an event (``restored``).
- Ignored and uncaptured files are never deleted or altered (one in the way is left, in ``kept``);
  ``.git``, HEAD, the index and branches are never touched.
- ``to=DIR`` fills a new or empty directory outside the home and store; ``dry_run`` changes nothing.
- The reply always fits one frame (paged; ``undo_command`` kept, ``fit_reply``). Default target:
  the newest agent-made checkpoint of the node's newest attempt; safety ones are named by seq.
"""

from __future__ import annotations

import logging
import os
import shlex
import threading
import time
from pathlib import Path

import msgpack
import pygit2

from snapshotd.core import (
    BAD_REQUEST,
    CONFLICT,
    DEFAULT_UMASK,
    NOT_FOUND,
    RESTORE_FAILED,
    AttemptKey,
    ServiceError,
    abs_path_field,
    bool_field,
    umask_field,
)
from snapshotd.features.replication import ensure_commit
from snapshotd.features.restore.apply import (
    Modes,
    Obstacle,
    Progress,
    apply_in_place,
    materialize,
    open_confined,
)
from snapshotd.features.restore.ignored import kept_set, write_ignored
from snapshotd.features.restore.paths import in_scope, scope_paths, scope_plan
from snapshotd.features.restore.plan import Plan, check_paths, obstacles, plan_trees, walk_tree
from snapshotd.features.restore.restored import record_restore
from snapshotd.ledger import Attempt
from snapshotd.service import (
    Service,
    SnapshotRequest,
    checkpoint_tree,
    current_tree_of,
    find_checkpoint,
    selection,
)
from snapshotd.store import empty_tree
from snapshotd_client import encode_frame

TYPE_CHECKING = False
if TYPE_CHECKING:
    from snapshotd.core import Config, Registry

log = logging.getLogger("snapshotd.restore")

# Replies stay well under the 1 MiB frame: plans and lists beyond these are paged or truncated
# (entries, and bytes of path and reason: 5,000 paths of 4 KiB would not fit).
WIRE_PLAN_LIMIT = 5000
WIRE_PLAN_BYTES = 640 * 1024
WIRE_KEPT_BYTES = 128 * 1024


# -- public entry --------------------------------------------------------------------------------


def restore_checkpoint(service: Service, *, run_id: str, node_id: str, seq: int | None = None,
                       iteration: int | None = None, attempt: int | None = None,
                       to: Path | None = None, dry_run: bool = False, force: bool = False,
                       progress: Progress | None = None, into: Attempt | None = None,
                       umask: int = DEFAULT_UMASK, include_ignored: bool = False,
                       paths: list[str] | None = None) -> dict:
    """Restore one checkpoint in place (default) or into ``to``; see the module docstring.

    ``paths``: restore only these (worktree-relative, or absolute inside it; a directory means
    everything under it) and leave every other path as it is (``paths.scope_plan``).

    ``into`` (the engine's resume into a directory of its own): restore in place into that
    attempt's worktree instead, with the safety checkpoint recorded in that attempt.
    ``umask``: the user's; what the restore creates gets git's modes less it (``Modes``).
    ``include_ignored``: then also the guard checkpoint's kept ignored files, where nothing is
    (``ignored.write_ignored``); ``not-found`` before anything changes when it has none.

    Raises ``ServiceError`` with code ``not-found`` (names the runs, nodes, attempts or seqs that
    exist), ``conflict`` (an attempt is active on the worktree and ``force`` is false),
    ``bad-id``, ``bad-request`` or ``restore-failed``.
    """
    started = time.perf_counter()
    run_id, node_id, seq, iteration, attempt = selection(run_id, node_id, seq, iteration, attempt)
    cp = find_checkpoint(service.ledger, run_id, node_id, seq=seq, iteration=iteration,
                         attempt=attempt)
    key = AttemptKey(run_id, node_id, cp["iteration"], cp["attempt"])
    owner = service.ledger.get_attempt(key)
    if owner is None:
        raise ServiceError(NOT_FOUND, f"attempt {key} is not in the ledger")
    # Restore anywhere: a checkpoint this store lacks is fetched and checked against the row.
    ensure_commit(service, cp["commit"], cp["tree"], ref=key.ref)
    kept = kept_set(service.store, key, cp["seq"]) if include_ignored else None
    repo = service.store.reader()
    target_tree = checkpoint_tree(repo, cp)
    result: dict = {
        "run_id": run_id, "node_id": node_id, "iteration": cp["iteration"],
        "attempt": cp["attempt"], "seq": cp["seq"], "commit": cp["commit"], "tree": cp["tree"],
        "source": cp["source"], "label": cp["label"], "dry_run": dry_run, "applied": False,
        "safety": None, "undo_command": None, "kept": [], "timings": {}, "scan": None,
        "paths": paths,
    }
    if to is not None:
        result.update(_restore_to(service, repo, target_tree, Path(to), cp,
                                  dry_run=dry_run, progress=progress, modes=Modes(umask),
                                  paths=paths))
    else:
        result.update(_restore_in_place(service, repo, into or owner, cp, target_tree,
                                        dry_run=dry_run, force=force, progress=progress,
                                        modes=Modes(umask), paths=paths))
    if kept is not None:
        result["ignored"] = write_ignored(Path(result["target"]), *kept, dry_run=dry_run,
                                          modes=Modes(umask))
    result["counts"] = {op: sum(1 for p in result["plan"] if p["op"] == op) for op in "AMD"}
    result["elapsed_ms"] = _ms(started)
    return result


def undo_command(run_id: str, node_id: str, iteration: int, attempt: int, seq: int) -> str:
    """The ``snapshotd restore`` command line that restores seq ``seq`` of that attempt."""
    return " ".join(["snapshotd", "restore", shlex.quote(run_id), "--node", shlex.quote(node_id),
                     "--iteration", str(iteration), "--attempt", str(attempt), "--seq", str(seq),
                     "--force"])


def end_command(key: AttemptKey) -> str:
    """The ``snapshotd attempt end`` command line that ends ``key`` as cancelled."""
    return " ".join(["snapshotd", "attempt", "end", "--run", shlex.quote(key.run_id),
                     "--node", shlex.quote(key.node_id), "--iteration", str(key.iteration),
                     "--attempt", str(key.attempt), "--status", "cancelled"])


def page_plan(result: dict, offset: object = None, limit: object = None) -> dict:
    """Cut ``plan`` and ``kept`` to what fits in one reply frame; ``plan_total`` tells the rest."""
    out = dict(result)
    plan = result["plan"]
    start = offset if isinstance(offset, int) and not isinstance(offset, bool) and offset > 0 else 0
    size = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else 0
    size = min(size or WIRE_PLAN_LIMIT, WIRE_PLAN_LIMIT)
    out["plan"] = _within(plan[start:start + size], WIRE_PLAN_BYTES)
    out["plan_offset"] = start
    out["plan_total"] = len(plan)
    out["plan_truncated"] = start + len(out["plan"]) < len(plan)
    out["kept"] = _within(result["kept"][:WIRE_PLAN_LIMIT], WIRE_KEPT_BYTES)
    out["kept_total"] = len(result["kept"])
    return out


def fit_reply(result: dict) -> dict:
    """``result`` if its reply frame can be encoded, else the same without ``plan`` and
    ``kept`` (and ``reply_trimmed`` saying why): a restore that was applied always gets its
    ``undo_command`` back to the caller."""
    try:
        encode_frame({"id": 0, "ok": True, "result": result})
        return result
    except (ValueError, TypeError) as exc:
        reason = str(exc)
    log.warning("restore: the reply did not fit one frame (%s); sent without the plan", reason)
    out = {k: v for k, v in result.items() if not isinstance(v, (list, dict)) or k in
           ("safety", "counts", "timings", "restored", "event")}
    out.update(plan=[], kept=[], plan_truncated=True, reply_trimmed=reason)
    try:
        encode_frame({"id": 0, "ok": True, "result": out})
    except (ValueError, TypeError):
        keep = ("run_id", "node_id", "iteration", "attempt", "seq", "commit", "mode",
                "dry_run", "applied", "undo_command")
        out = {k: result.get(k) for k in keep} | {"plan": [], "kept": [], "plan_truncated": True,
                                                   "reply_trimmed": reason}
    return out


# -- daemon ops ----------------------------------------------------------------------------------


def attach(service: Service, server: Registry, config: Config) -> None:
    """Register the ``restore`` and ``restore_progress`` ops on the daemon's server."""
    board = _ProgressBoard()

    def restore_op(fields: dict) -> dict:
        token = fields.get("progress_token")
        if token is not None and (not isinstance(token, str) or len(token) > 100):
            raise ServiceError(BAD_REQUEST, "progress_token must be a short string")
        if isinstance(fields.get("to"), msgpack.ExtType):
            raise ServiceError(BAD_REQUEST, "to is a path that is not UTF-8, which a "
                               "request cannot carry (docs/protocol.md); name a directory whose "
                               "path is UTF-8")
        to = abs_path_field(fields, "to")
        try:
            result = restore_checkpoint(
                service, run_id=fields.get("run_id"), node_id=fields.get("node_id"),
                seq=fields.get("seq"), iteration=fields.get("iteration"),
                attempt=fields.get("attempt"), to=to, dry_run=bool_field(fields, "dry_run"),
                force=bool_field(fields, "force"),
                progress=board.callback(token) if token else None, umask=umask_field(fields),
                include_ignored=bool_field(fields, "include_ignored"),
                paths=fields.get("paths"))
        finally:
            if token:
                board.finish(token)
        return fit_reply(page_plan(result, fields.get("plan_offset"), fields.get("plan_limit")))

    def progress_op(fields: dict) -> dict:
        token = fields.get("progress_token")
        if not isinstance(token, str):
            raise ServiceError(BAD_REQUEST, "progress_token must be a string")
        return board.get(token)

    server.register("restore", restore_op)
    server.register("restore_progress", progress_op)


class _ProgressBoard:
    """In-flight restores' progress, keyed by a client-chosen token (``restore_progress`` op)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._boards: dict[str, dict] = {}

    def callback(self, token: str) -> Progress:
        def report(done: int, total: int) -> None:
            with self._lock:
                self._boards[token] = {"done": done, "total": total, "finished": False}
        return report

    def finish(self, token: str) -> None:
        with self._lock:
            board = self._boards.get(token)
            if board is not None:
                board["finished"] = True
            # Finished boards are kept briefly for the last poll; cap the table's size.
            if len(self._boards) > 256:
                for stale in [t for t, b in self._boards.items() if b["finished"]][:128]:
                    del self._boards[stale]

    def get(self, token: str) -> dict:
        with self._lock:
            board = self._boards.get(token)
            return dict(board) if board else {"done": 0, "total": None, "finished": False}


# -- in place ------------------------------------------------------------------------------------


def _restore_in_place(service: Service, repo: pygit2.Repository, owner: Attempt, cp: dict,
                      target_tree: pygit2.Tree, *, dry_run: bool, force: bool,
                      progress: Progress | None, modes: Modes,
                      paths: list[str] | None = None) -> dict:
    root = Path(owner.worktree)
    if not root.is_absolute():
        raise ServiceError(RESTORE_FAILED, f"attempt {owner.key} has no usable worktree "
                           f"path ({owner.worktree!r}); restore it with --to DIR instead")
    scope = scope_paths(root, paths) if paths is not None else None
    refuse_links(root)
    if not dry_run and not force:
        refuse_active(service, root)
    timings: dict[str, float] = {}
    with service.worktree_lock(root):
        if not dry_run and not force:
            refuse_active(service, root)  # again under the lock: a begin may have raced us
        t0 = time.perf_counter()
        current_tree, safety, scan = _current_state(service, repo, owner, cp, root,
                                                    dry_run=dry_run, modes=modes)
        timings["capture_ms"] = _ms(t0)
        t0 = time.perf_counter()
        plan = plan_trees(repo, repo[current_tree].peel(pygit2.Tree), target_tree)
        if scope is not None:
            plan = scope_plan(plan, scope)
        check_paths(plan, cp)
        plan.kept = obstacles(root, plan)
        timings["plan_ms"] = _ms(t0)
        t0 = time.perf_counter()
        if not dry_run and (plan.writes or plan.deletes):
            _apply(repo, root, plan, progress, owner, cp, safety, modes)
        timings["apply_ms"] = _ms(t0)
        # The restored state captured, and the restore recorded as an event (restored.py).
        recorded = {} if dry_run else record_restore(service, owner, root, cp, safety)
    out: dict = {"target": str(root), "mode": "in-place", "plan": plan.as_list(),
                 "kept": plan.kept_list(), "applied": not dry_run, "timings": timings,
                 "scan": scan, **recorded}
    if safety is not None:
        k = owner.key
        out["safety"] = {"seq": safety["seq"], "commit": safety["commit"], "run_id": k.run_id,
                         "node_id": k.node_id, "iteration": k.iteration, "attempt": k.attempt,
                         "deduped": safety.get("deduped", False),
                         "scan": safety.get("scan")}
        out["undo_command"] = undo_command(k.run_id, k.node_id, k.iteration, k.attempt,
                                           safety["seq"])
    return out


def _current_state(service: Service, repo: pygit2.Repository, owner: Attempt, cp: dict,
                   root: Path, *, dry_run: bool,
                   modes: Modes) -> tuple[str, dict | None, str | None]:
    """The worktree's tree now, the safety checkpoint that recorded it (None on a dry run) and
    how it was read (``fast``/``full``; None for a missing worktree on a dry run)."""
    missing = not os.path.lexists(root)
    if not missing and (root.is_symlink() or not root.is_dir()):
        raise ServiceError(RESTORE_FAILED, f"{root} is no longer a directory; restore "
                           "with --to DIR instead")
    if missing and dry_run:
        return empty_tree(repo), None, None
    if missing:
        try:
            os.close(open_confined(root, create=True, modes=modes))
        except OSError as exc:
            raise ServiceError(RESTORE_FAILED, f"could not recreate the worktree {root} "
                               f"without following a link: {exc}; nothing was changed") from exc
    if dry_run:
        tree, scan = current_tree_of(service, root)
        return tree, None, scan
    safety = _safety_checkpoint(service, owner, cp)
    return safety["tree"], safety, safety.get("scan")


def _apply(repo: pygit2.Repository, root: Path, plan: Plan, progress: Progress | None,
           owner: Attempt, cp: dict, safety: dict | None, modes: Modes) -> None:
    """Apply the plan; a failure part-way names the safety checkpoint and its undo command."""
    try:
        apply_in_place(repo, root, plan, progress, modes)
    except (OSError, Obstacle) as exc:
        k = owner.key
        undo = (undo_command(k.run_id, k.node_id, k.iteration, k.attempt, safety["seq"])
                if safety else None)
        raise ServiceError(RESTORE_FAILED, f"restore of seq {cp['seq']} into {root} "
                           f"stopped part-way: {exc}" + (
                               f"; the previous state is safety checkpoint seq "
                               f"{safety['seq']}: `{undo}` brings it back" if safety else "")
                           ) from exc


def refuse_active(service: Service, root: Path) -> None:
    # An agent session that waits for its user (idle) is not working: restoring then cannot
    # fight it. One that works still refuses.
    active = [a for a in service.ledger.active_attempts(str(root)) if a.working]
    if active:
        a = active[-1]
        raise ServiceError(
            CONFLICT, f"attempt {a.key} is active on {root}; restoring under a working "
            f"agent would fight it. End it first (`{end_command(a.key)}`), or pass --force")


def _safety_checkpoint(service: Service, owner: Attempt, cp: dict) -> dict:
    """Capture the current state into the restored attempt (caller holds the worktree lock)."""
    current = service.ledger.get_attempt(owner.key) or owner
    req = SnapshotRequest(cwd=Path(owner.worktree), tier=1, source="restore",
                          label=f"before restore of seq {cp['seq']}",
                          run_id=owner.key.run_id, node_id=owner.key.node_id,
                          iteration=owner.key.iteration, attempt=owner.key.attempt)
    try:
        # capture_locked: capture_attempt() would take the worktree lock we already hold.
        return service.capture_locked(current, req, time.perf_counter())
    except ServiceError as exc:
        raise ServiceError(RESTORE_FAILED, f"could not take the safety checkpoint of "
                           f"{owner.worktree}, so nothing was changed: {exc.message}") from exc


# -- into another directory ----------------------------------------------------------------------


def _restore_to(service: Service, repo: pygit2.Repository, tree: pygit2.Tree, to: Path, cp: dict,
                *, dry_run: bool, progress: Progress | None, modes: Modes,
                paths: list[str] | None = None) -> dict:
    t0 = time.perf_counter()
    target = _resolve_to_target(to, service)
    entries = list(walk_tree(repo, tree))
    if paths is not None:
        scope = scope_paths(target, paths)
        entries = [w for w in entries if in_scope(w.path, scope)]
    plan = Plan(writes=entries)
    check_paths(plan, cp)
    timings = {"plan_ms": _ms(t0)}
    out = {"target": str(target), "mode": "to", "plan": plan.as_list(), "applied": not dry_run,
           "timings": timings}
    if dry_run:
        return out
    t0 = time.perf_counter()
    try:
        materialize(service.store.reader, target, entries, progress, timings, modes)
    except (OSError, Obstacle) as exc:
        raise ServiceError(RESTORE_FAILED, f"could not materialize seq {cp['seq']} into "
                           f"{target}: {exc} (a component of the path that is a link or not a "
                           "directory is never followed; what was created is taken back)"
                           ) from exc
    timings["apply_ms"] = _ms(t0)
    return out


def _resolve_to_target(to: Path, service: Service) -> Path:
    """The ``--to`` directory, resolved once: the links the caller's path goes through are
    followed now, and the result must be new or empty and outside the home and the store.
    From here on it is entered without following any link (``open_confined``)."""
    target = Path(os.path.realpath(os.path.abspath(to)))
    for name, place in (("snapshotd home", service.home), ("store", service.store.path)):
        real = Path(os.path.realpath(place))
        if target == real or real in target.parents:
            shown = f"{to} (which resolves to {target})" if str(target) != str(to) else str(to)
            raise ServiceError(BAD_REQUEST, f"--to {shown} is inside the {name} {real}; "
                               "choose a directory elsewhere")
    if os.path.lexists(target):
        if not target.is_dir():
            raise ServiceError(BAD_REQUEST, f"--to {target} exists and is not a "
                               "directory; name a new or empty directory")
        if any(os.scandir(target)):
            raise ServiceError(BAD_REQUEST, f"--to {target} is not empty; name a new or "
                               "empty directory (a restore into another directory never "
                               "overwrites)")
    return target


def refuse_links(root: Path) -> None:
    """Worktrees are recorded resolved: one that now resolves elsewhere goes through a link
    made since, and following it would read and write a directory that is not the worktree."""
    real = os.path.realpath(root)
    if real != str(root):
        raise ServiceError(RESTORE_FAILED, f"the worktree {root} now resolves to {real} "
                           "through a symbolic link; nothing was changed (restore into a "
                           "directory of your choice with --to DIR)")


def _within(rows: list[dict], budget: int) -> list[dict]:
    """The leading rows whose paths and reasons fit in ``budget`` bytes (at least one row)."""
    used = 0
    for n, row in enumerate(rows):
        used += 16 + len(row["path"].encode("utf-8", "surrogateescape")) + len(
            row.get("reason", "").encode("utf-8", "surrogateescape"))
        if used > budget and n:
            return rows[:n]
    return rows


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


__all__ = ["WIRE_PLAN_LIMIT", "attach", "end_command", "fit_reply", "page_plan",
           "restore_checkpoint", "undo_command"]
