"""Restore: bring a worktree, or a fresh directory, back to a checkpoint, precisely and confined.

Owns ``restore_checkpoint`` (the one implementation behind the ``restore`` op, the CLI with or
without a daemon, and the engine's ``attempt begin --resume``), the resolution of
``RUN/NODE[/ITERATION/ATTEMPT][@SEQ]`` to one checkpoint row (also used by ``diff``), and the
daemon ops ``restore``, ``restore_progress`` and ``diff`` (``attach``). DESIGN §9.

Promises:
- In place, a restore runs under the worktree's lock (so it is serialized with captures of that
  worktree), first takes a safety checkpoint of the current state (source ``restore``, tier 1) and
  returns the exact command that undoes it.
- Safety rule: the safety checkpoint is recorded in the attempt whose checkpoint is restored, even
  when that attempt has ended; so target, safety checkpoint and undo live in one commit chain and
  the undo is ``snapshotd restore RUN --node X --iteration I --attempt A --seq <safety> --force``.
  (The engine's resume into a directory of its own records it in the new attempt instead.)
- Only what differs is touched: the plan is a tree-to-tree diff of the worktree's current capture
  against the checkpoint, so its cost follows the difference, not the tree.
- Files are written to a temporary name in their own directory, synced and renamed into place; the
  exec bit follows the checkpoint; symlinks are recreated as links and never followed. Every
  directory is entered with ``O_NOFOLLOW`` relative to its parent's descriptor, so nothing is ever
  written through a symlink and nothing outside the target; a symlinked parent directory that the
  checkpoint holds as a real directory is replaced by one.
- A checkpoint path that is absolute, has an empty, ``.`` or ``..`` component, or a ``.git``
  component is refused before anything is written.
- Ignored and other uncaptured files are never deleted or altered; where one stands in the way of
  a checkpoint path, that path is left as it is and reported in ``kept``. ``.git``, HEAD, the index
  and branches of the user's repository are never touched.
- ``to=DIR`` materializes into a new or empty directory (a new one appears whole, by rename);
  ``dry_run`` computes the plan and changes nothing (no safety checkpoint either).
- Default target: the newest checkpoint of the newest attempt (highest iteration, then attempt
  number) of the node, skipping safety checkpoints (source ``restore``): a default restore never
  silently "restores" the state a previous restore replaced. Safety checkpoints are restored by
  naming their seq (the printed undo command does).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import itertools
import os
import shlex
import stat
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from snapshotd import faults
from snapshotd.keys import AttemptKey
from snapshotd.ledger import Attempt, Ledger
from snapshotd.replication import ensure_commit
from snapshotd.service import Service, ServiceError, SnapshotRequest
from snapshotd.store import StoreError
from snapshotd_client.protocol import validate_id, validate_int

TYPE_CHECKING = False
if TYPE_CHECKING:
    from snapshotd.config import Config
    from snapshotd.server import Server

Progress = Callable[[int, int], None]

MODE_TREE = 0o040000
MODE_BLOB = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000
MODE_GITLINK = 0o160000

# Up to this many writes, each file and directory is fsynced on its own; above it, two
# filesystem-wide barriers (before and after the renames) cost less than one fsync per file.
SMALL_PLAN = 64
# Replies stay well under the 1 MiB frame: plans and lists beyond this are paged or truncated.
WIRE_PLAN_LIMIT = 5000
TMP_PREFIX = b".snapshotd-restore-"
# Threads writing a large --to materialization (file creation dominates; see _materialize).
MATERIALIZE_WORKERS = 4

_tmp_counter = itertools.count()


# -- public entry --------------------------------------------------------------------------------


def restore_checkpoint(service: Service, *, run_id: str, node_id: str, seq: int | None = None,
                       iteration: int | None = None, attempt: int | None = None,
                       to: Path | None = None, dry_run: bool = False, force: bool = False,
                       progress: Progress | None = None, into: Attempt | None = None) -> dict:
    """Restore one checkpoint in place (default) or into ``to``; see the module docstring.

    ``into`` (the engine's resume into a directory of its own): restore in place into that
    attempt's worktree instead, with the safety checkpoint recorded in that attempt.

    Raises ``ServiceError`` with code ``not-found`` (names the runs, nodes, attempts or seqs that
    exist), ``conflict`` (an attempt is active on the worktree and ``force`` is false),
    ``bad-request`` or ``restore-failed``.
    """
    started = time.perf_counter()
    run_id, node_id, seq, iteration, attempt = _validate(run_id, node_id, seq, iteration, attempt)
    cp = find_checkpoint(service.ledger, run_id, node_id, seq=seq, iteration=iteration,
                         attempt=attempt)
    key = AttemptKey(run_id, node_id, cp["iteration"], cp["attempt"])
    owner = service.ledger.get_attempt(key)
    if owner is None:
        raise ServiceError("not-found", f"attempt {_fmt(key)} is not in the ledger")
    # Restore anywhere: a checkpoint this store lacks is fetched and checked against the row.
    ensure_commit(service, cp["commit"], cp["tree"], ref=key.ref)
    repo = pygit2.Repository(str(service.store.path))
    target_tree = _tree(repo, cp["tree"], cp)
    result: dict = {
        "run_id": run_id, "node_id": node_id, "iteration": cp["iteration"],
        "attempt": cp["attempt"], "seq": cp["seq"], "commit": cp["commit"], "tree": cp["tree"],
        "source": cp["source"], "label": cp["label"], "dry_run": dry_run, "applied": False,
        "safety": None, "undo_command": None, "kept": [], "timings": {}, "scan": None,
    }
    if to is not None:
        result.update(_restore_to(repo, target_tree, Path(to), service.home, cp,
                                  dry_run=dry_run, progress=progress))
    else:
        result.update(_restore_in_place(service, repo, into or owner, cp, target_tree,
                                        dry_run=dry_run, force=force, progress=progress))
    result["counts"] = {op: sum(1 for p in result["plan"] if p["op"] == op) for op in "AMD"}
    result["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return result


def find_checkpoint(ledger: Ledger, run_id: str, node_id: str, *, seq: int | None = None,
                    iteration: int | None = None, attempt: int | None = None,
                    skip_safety: bool = True) -> dict:
    """The checkpoint row a (run, node, iteration?, attempt?, seq?) selection names.

    Unspecified iteration/attempt mean the newest attempt of the node that has checkpoints
    (highest iteration, then highest attempt). Unspecified seq means its newest checkpoint, not
    counting safety checkpoints when ``skip_safety``. Errors name what does exist.
    """
    rows = ledger.checkpoints(run_id, node_id)
    if not rows:
        runs = ledger.run_ids()
        if run_id not in runs:
            known = ", ".join(runs[-20:]) or "none"
            raise ServiceError("not-found", f"unknown run {run_id!r}; known runs: {known}")
        nodes = sorted({c["node_id"] for c in ledger.checkpoints(run_id)})
        raise ServiceError("not-found", f"run {run_id!r} has no checkpoints for node {node_id!r}; "
                           f"its nodes: {', '.join(nodes) or 'none'}")
    chosen = [c for c in rows if (iteration is None or c["iteration"] == iteration)
              and (attempt is None or c["attempt"] == attempt)]
    if not chosen:
        have = sorted({(c["iteration"], c["attempt"]) for c in rows})
        listed = ", ".join(f"iteration {i} attempt {a}" for i, a in have)
        wanted = " ".join(part for part in (
            f"iteration {iteration}" if iteration is not None else "",
            f"attempt {attempt}" if attempt is not None else "") if part)
        raise ServiceError("not-found", f"run {run_id!r} node {node_id!r} has no checkpoints "
                           f"in {wanted}; it has: {listed}")
    newest = max((c["iteration"], c["attempt"]) for c in chosen)
    in_attempt = sorted((c for c in chosen if (c["iteration"], c["attempt"]) == newest),
                        key=lambda c: c["seq"])
    where = f"{run_id}/{node_id} iteration {newest[0]} attempt {newest[1]}"
    # Rows that retention pruned stay listed, but their commits are gone: never a target.
    live = [c for c in in_attempt if not c.get("pruned_at")]
    if seq is None:
        agent_made = [c for c in live if c["source"] != "restore"] if skip_safety else []
        if not live:
            raise ServiceError("not-found", f"every checkpoint of {where} has been pruned")
        return (agent_made or live)[-1]
    for c in in_attempt:
        if c["seq"] == seq:
            if c.get("pruned_at"):
                kept = [x["seq"] for x in live]
                below = [k for k in kept if k < seq]
                above = [k for k in kept if k > seq]
                nearest = ", ".join(str(k) for k in ([below[-1]] if below else [])
                                    + ([above[0]] if above else []))
                raise ServiceError("not-found", f"{where} seq {seq} was pruned "
                                   f"({c.get('pruned_reason') or 'retention'}); the nearest kept "
                                   f"seqs are {nearest or 'none'} (all kept: "
                                   f"{format_seqs(kept)})")
            return c
    raise ServiceError("not-found", f"{where} has no checkpoint seq {seq}; its seqs are "
                       f"{format_seqs([c['seq'] for c in live])}")


def format_seqs(seqs: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` → ``0-2, 5, 7-8``."""
    out: list[str] = []
    ordered = sorted(set(seqs))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(out) or "none"


def undo_command(run_id: str, node_id: str, iteration: int, attempt: int, seq: int) -> str:
    return " ".join(["snapshotd", "restore", shlex.quote(run_id), "--node", shlex.quote(node_id),
                     "--iteration", str(iteration), "--attempt", str(attempt), "--seq", str(seq),
                     "--force"])


# -- daemon ops ----------------------------------------------------------------------------------


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


def attach(service: Service, server: Server, config: Config) -> None:
    """Register the ``restore``, ``restore_progress`` and ``diff`` ops on the daemon's server."""
    from snapshotd.diff import diff_checkpoints

    board = _ProgressBoard()

    def restore_op(fields: dict) -> dict:
        token = fields.get("progress_token")
        if token is not None and (not isinstance(token, str) or len(token) > 100):
            raise ServiceError("bad-request", "progress_token must be a short string")
        to = _abs_path_field(fields, "to")
        try:
            result = restore_checkpoint(
                service, run_id=fields.get("run_id"), node_id=fields.get("node_id"),
                seq=fields.get("seq"), iteration=fields.get("iteration"),
                attempt=fields.get("attempt"), to=to, dry_run=_bool(fields, "dry_run"),
                force=_bool(fields, "force"),
                progress=board.callback(token) if token else None)
        finally:
            if token:
                board.finish(token)
        return page_plan(result, fields.get("plan_offset"), fields.get("plan_limit"))

    def progress_op(fields: dict) -> dict:
        token = fields.get("progress_token")
        if not isinstance(token, str):
            raise ServiceError("bad-request", "progress_token must be a string")
        return board.get(token)

    def diff_op(fields: dict) -> dict:
        return diff_checkpoints(
            service, run_id=fields.get("run_id"), node_id=fields.get("node_id"),
            seq=fields.get("seq"), to_seq=fields.get("to_seq"),
            worktree=_bool(fields, "worktree"), iteration=fields.get("iteration"),
            attempt=fields.get("attempt"), patch=fields.get("patch", True) is not False,
            wire=True)

    server.register("restore", restore_op)
    server.register("restore_progress", progress_op)
    server.register("diff", diff_op)


def page_plan(result: dict, offset: object = None, limit: object = None) -> dict:
    """Cut ``plan`` and ``kept`` to what fits in one reply frame; ``plan_total`` tells the rest."""
    out = dict(result)
    plan = result["plan"]
    start = offset if isinstance(offset, int) and not isinstance(offset, bool) and offset > 0 else 0
    size = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else 0
    size = min(size or WIRE_PLAN_LIMIT, WIRE_PLAN_LIMIT)
    out["plan"] = plan[start:start + size]
    out["plan_offset"] = start
    out["plan_total"] = len(plan)
    out["plan_truncated"] = start + size < len(plan)
    out["kept"] = result["kept"][:WIRE_PLAN_LIMIT]
    out["kept_total"] = len(result["kept"])
    return out


# -- in place ------------------------------------------------------------------------------------


def _restore_in_place(service: Service, repo: pygit2.Repository, owner: Attempt, cp: dict,
                      target_tree: pygit2.Tree, *, dry_run: bool, force: bool,
                      progress: Progress | None) -> dict:
    root = Path(owner.worktree)
    if not root.is_absolute():
        raise ServiceError("restore-failed", f"attempt {_fmt(owner.key)} has no usable worktree "
                           f"path ({owner.worktree!r}); restore it with --to DIR instead")
    if not dry_run and not force:
        _refuse_active(service, root)
    timings: dict[str, float] = {}
    with service.worktree_lock(root):
        if not dry_run and not force:
            _refuse_active(service, root)  # again under the lock: a begin may have raced us
        t0 = time.perf_counter()
        missing = not os.path.lexists(root)
        if not missing and (root.is_symlink() or not root.is_dir()):
            raise ServiceError("restore-failed", f"{root} is no longer a directory; restore "
                               "with --to DIR instead")
        safety = None
        scan: str | None = None  # how the current state was read: "fast" or "full"
        if missing and dry_run:
            current_tree = _empty_tree(repo)
        else:
            if missing:
                os.makedirs(root, 0o777, exist_ok=True)
            if dry_run:
                current_tree, scan = current_tree_of(service, root)
            else:
                safety = _safety_checkpoint(service, owner, cp)
                current_tree = safety["tree"]
                scan = safety.get("scan")
        timings["capture_ms"] = _ms(t0)
        t0 = time.perf_counter()
        plan = _plan(repo, repo[current_tree].peel(pygit2.Tree), target_tree)
        _check_paths(plan, cp)
        plan.kept = _obstacles(root, plan)
        timings["plan_ms"] = _ms(t0)
        t0 = time.perf_counter()
        if not dry_run and (plan.writes or plan.deletes):
            try:
                _apply_in_place(repo, root, plan, progress)
            except (OSError, _Obstacle) as exc:
                undo = (undo_command(owner.key.run_id, owner.key.node_id, owner.key.iteration,
                                     owner.key.attempt, safety["seq"]) if safety else None)
                raise ServiceError("restore-failed", f"restore of seq {cp['seq']} into {root} "
                                   f"stopped part-way: {exc}" + (
                                       f"; the previous state is safety checkpoint seq "
                                       f"{safety['seq']}: `{undo}` brings it back" if undo else "")
                                   ) from exc
        timings["apply_ms"] = _ms(t0)
    out: dict = {"target": str(root), "mode": "in-place", "plan": plan.as_list(),
                 "kept": plan.kept_list(), "applied": not dry_run, "timings": timings,
                 "scan": scan}
    if safety is not None:
        k = owner.key
        out["safety"] = {"seq": safety["seq"], "commit": safety["commit"], "run_id": k.run_id,
                         "node_id": k.node_id, "iteration": k.iteration, "attempt": k.attempt,
                         "deduped": safety.get("deduped", False),
                         "scan": safety.get("scan")}
        out["undo_command"] = undo_command(k.run_id, k.node_id, k.iteration, k.attempt,
                                           safety["seq"])
    return out


def _refuse_active(service: Service, root: Path) -> None:
    active = service.ledger.active_attempts(str(root))
    if active:
        a = active[-1]
        raise ServiceError(
            "conflict", f"attempt {_fmt(a.key)} is active on {root}; restoring under a working "
            f"agent would fight it. End it first (`{end_command(a.key)}`), or pass --force")


def end_command(key: AttemptKey) -> str:
    """The ``snapshotd attempt end`` command line that ends ``key`` as cancelled."""
    return " ".join(["snapshotd", "attempt", "end", "--run", shlex.quote(key.run_id),
                     "--node", shlex.quote(key.node_id), "--iteration", str(key.iteration),
                     "--attempt", str(key.attempt), "--status", "cancelled"])


def _safety_checkpoint(service: Service, owner: Attempt, cp: dict) -> dict:
    """Capture the current state into the restored attempt (caller holds the worktree lock)."""
    current = service.ledger.get_attempt(owner.key) or owner
    req = SnapshotRequest(cwd=Path(owner.worktree), tier=1, source="restore",
                          label=f"before restore of seq {cp['seq']}",
                          run_id=owner.key.run_id, node_id=owner.key.node_id,
                          iteration=owner.key.iteration, attempt=owner.key.attempt)
    try:
        # _capture_locked: capture_attempt() would take the worktree lock we already hold.
        return service.capture_locked(current, req, time.perf_counter())
    except ServiceError as exc:
        raise ServiceError("restore-failed", f"could not take the safety checkpoint of "
                           f"{owner.worktree}, so nothing was changed: {exc.message}") from exc


def current_tree_of(service: Service, root: Path) -> tuple[str, str]:
    """The worktree's tree now, recording nothing, and how it was read: ``fast`` (only the
    paths the watcher vouches changed since the last capture) or ``full`` (a stat scan). The
    caller holds the worktree lock. Used by ``--dry-run`` (and fit for ``diff --worktree``)."""
    try:
        found = service.read_worktree(root)
    except StoreError as exc:
        raise ServiceError("restore-failed", f"could not read {root}: {exc.message}") from exc
    except Exception as exc:  # noqa: BLE001 - reported to the caller, never a daemon crash
        raise ServiceError("restore-failed", f"could not read {root}: {exc}") from exc
    return found.tree, "full" if found.full_scan else "fast"


# -- the plan ------------------------------------------------------------------------------------


@dataclass
class _Write:
    path: bytes
    oid: pygit2.Oid
    mode: int
    op: str  # "A": absent from the current capture, "M": present and different


@dataclass
class _Plan:
    writes: list[_Write] = field(default_factory=list)
    deletes: list[bytes] = field(default_factory=list)
    kept: list[tuple[bytes, str]] = field(default_factory=list)

    def as_list(self) -> list[dict]:
        kept = {p for p, _ in self.kept}
        rows = [(w.path, w.op) for w in self.writes if w.path not in kept]
        rows += [(p, "D") for p in self.deletes]
        rows.sort()
        return [{"op": op, "path": os.fsdecode(p)} for p, op in rows]

    def kept_list(self) -> list[dict]:
        return [{"path": os.fsdecode(p), "reason": r} for p, r in self.kept]


def _plan(repo: pygit2.Repository, current: pygit2.Tree, target: pygit2.Tree) -> _Plan:
    """Tree-to-tree diff that skips identical subtrees by id, so its cost follows the difference
    (libgit2's tree diff reads every subtree of both sides)."""
    plan = _Plan()
    _diff_trees(repo.odb, current.id.raw, target.id.raw, b"", plan)
    plan.writes.sort(key=lambda w: w.path)
    return plan


def _diff_trees(odb: pygit2.Odb, old_id: bytes | None, new_id: bytes | None, prefix: bytes,
                plan: _Plan) -> None:
    if old_id is not None and new_id is not None and old_id == new_id:
        return
    old = _entries(odb, old_id)
    new = _entries(odb, new_id)
    for name in sorted(old.keys() | new.keys()):
        a, b = old.get(name), new.get(name)
        if a == b:
            continue
        path = prefix + name
        a_tree = a is not None and a[1] == MODE_TREE
        b_tree = b is not None and b[1] == MODE_TREE
        if a_tree or b_tree:
            _diff_trees(odb, a[0] if a_tree else None, b[0] if b_tree else None,
                        path + b"/", plan)
        # Nested repositories (gitlinks) are never captured, so never written nor deleted.
        if a is not None and not a_tree and a[1] != MODE_GITLINK and (b is None or b_tree):
            plan.deletes.append(path)
        if b is not None and not b_tree and b[1] != MODE_GITLINK:
            present = a is not None and not a_tree and a[1] != MODE_GITLINK
            plan.writes.append(_Write(path, pygit2.Oid(raw=b[0]), b[1], "M" if present else "A"))


def _entries(odb: pygit2.Odb, tree_id: bytes | None) -> dict[bytes, tuple[bytes, int]]:
    """A tree's entries, name -> (raw id, mode), parsed from the raw object: a 1,000-entry
    directory costs a fraction of what pygit2's entry objects (and their mode enums) cost."""
    if tree_id is None:
        return {}
    kind, raw = odb.read(pygit2.Oid(raw=tree_id))
    if kind != pygit2.enums.ObjectType.TREE:
        raise ValueError(f"object {tree_id.hex()} is not a tree")
    out: dict[bytes, tuple[bytes, int]] = {}
    find = raw.find
    i, end = 0, len(raw)
    while i < end:  # each entry: b"<octal mode> <name>\0<20-byte id>"
        space = find(b" ", i)
        nul = find(b"\0", space)
        out[raw[space + 1:nul]] = (raw[nul + 1:nul + 21], int(raw[i:space], 8))
        i = nul + 21
    return out


def _check_paths(plan: _Plan, cp: dict) -> None:
    """Refuse, before anything is written, a path that would leave the target or enter a .git."""
    for path in itertools.chain((w.path for w in plan.writes), plan.deletes):
        reason = _bad_path(path)
        if reason:
            raise ServiceError(
                "restore-failed", f"checkpoint seq {cp['seq']} ({cp['commit'][:12]}) holds the "
                f"path {os.fsdecode(path)!r}, which {reason}; refusing to restore it (nothing "
                "was written)")


def _bad_path(path: bytes) -> str | None:
    if not path or b"\0" in path:
        return "is empty or holds a NUL byte"
    if path.startswith(b"/"):
        return "is absolute"
    for part in path.split(b"/"):
        if part in (b"", b".", b".."):
            return "would escape the target directory"
        if part.lower() == b".git":
            return "lies inside a .git directory"
    return None


def _obstacles(root: Path, plan: _Plan) -> list[tuple[bytes, str]]:
    """Checkpoint paths blocked by files the capture does not hold (ignored, too large,
    unreadable): those files win, and the path is reported instead of written."""
    base = os.fsencode(root)
    deleting = set(plan.deletes)
    states: dict[bytes, str] = {b"": "dir"}

    def dir_state(prefix: bytes) -> str:
        """'dir' (a real directory), 'absent' (nothing, or it will be deleted), 'blocked'."""
        known = states.get(prefix)
        if known is not None:
            return known
        parent = prefix.rpartition(b"/")[0]
        up = dir_state(parent)
        if up != "dir":
            state = up
        else:
            try:
                st = os.lstat(base + b"/" + prefix)
            except FileNotFoundError:
                state = "absent"
            except OSError:
                state = "blocked"
            else:
                if stat.S_ISDIR(st.st_mode):
                    state = "dir"
                elif prefix in deleting:
                    state = "absent"  # a captured file or link: deleted, then made a directory
                else:
                    state = "blocked"
        states[prefix] = state
        return state

    kept: list[tuple[bytes, str]] = []
    for w in plan.writes:
        parent = w.path.rpartition(b"/")[0]
        state = dir_state(parent)
        if state == "blocked":
            kept.append((w.path, "an ignored or uncaptured file or link stands where the "
                                  "checkpoint has a directory"))
            continue
        if state == "absent" or w.op == "M":
            continue
        try:
            st = os.lstat(base + b"/" + w.path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            kept.append((w.path, f"cannot be inspected: {exc.strerror}"))
            continue
        if stat.S_ISDIR(st.st_mode):
            if not _only_deleted_inside(base, w.path, deleting):
                kept.append((w.path, "a directory holding ignored or uncaptured files stands "
                                     "where the checkpoint has a file"))
        else:
            kept.append((w.path, "an ignored or uncaptured file is in the way (it is kept)"))
    return kept


def _only_deleted_inside(base: bytes, rel: bytes, deleting: set[bytes]) -> bool:
    """Whether every file under ``rel`` is one the plan deletes (so the directory will vanish)."""
    for dirpath, dirnames, filenames in os.walk(base + b"/" + rel):
        inner = dirpath[len(base) + 1:]
        for name in filenames:
            if inner + b"/" + name not in deleting:
                return False
        for name in dirnames:
            if os.path.islink(os.path.join(dirpath, name)) and inner + b"/" + name not in deleting:
                return False
    return True


# -- applying ------------------------------------------------------------------------------------


class _Obstacle(Exception):
    """Something that is not a directory stands where the restore needs one."""


class _DirWalker:
    """Directory descriptors below a root, opened one component at a time with ``O_NOFOLLOW``.

    Keeps the chain of the last directory open, so paths processed in sorted order reuse it.
    """

    FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

    def __init__(self, root_fd: int) -> None:
        self.root_fd = root_fd
        self.chain: list[tuple[bytes, int]] = []
        self.touched: set[bytes] = set()

    def open_dir(self, rel: bytes, *, create: bool) -> int | None:
        parts = rel.split(b"/") if rel else []
        n = 0
        while n < len(self.chain) and n < len(parts) and self.chain[n][0] == parts[n]:
            n += 1
        self._truncate(n)
        fd = self.chain[-1][1] if self.chain else self.root_fd
        for i in range(n, len(parts)):
            child = self._child(fd, parts[i], b"/".join(parts[:i + 1]), create)
            if child is None:
                return None
            self.chain.append((parts[i], child))
            fd = child
        return fd

    def close(self) -> None:
        self._truncate(0)

    def _truncate(self, n: int) -> None:
        while len(self.chain) > n:
            os.close(self.chain.pop()[1])

    def _child(self, parent: int, name: bytes, rel: bytes, create: bool) -> int | None:
        try:
            return os.open(name, self.FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                return None
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            if not create:
                return None
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode):
                raise _Obstacle(f"{os.fsdecode(rel)!r} is a file where the checkpoint has a "
                                "directory") from None
            # A symlink where the checkpoint has a directory: replace the link itself.
            os.unlink(name, dir_fd=parent)
        try:
            os.mkdir(name, 0o777, dir_fd=parent)
        except FileExistsError:
            pass
        self.touched.add(rel.rpartition(b"/")[0])
        return os.open(name, self.FLAGS, dir_fd=parent)


def _apply_in_place(repo: pygit2.Repository, root: Path, plan: _Plan,
                    progress: Progress | None) -> None:
    kept = {p for p, _ in plan.kept}
    writes = [w for w in plan.writes if w.path not in kept]
    total = len(writes) + len(plan.deletes)
    small = len(writes) <= SMALL_PLAN
    done = 0
    root_fd = os.open(root, _DirWalker.FLAGS)
    walker = _DirWalker(root_fd)
    staged: list[tuple[bytes, bytes, bytes]] = []  # (dir, temp name, final name)
    try:
        # 1. Deletions first, so directories can replace files and links (and vice versa).
        emptied: set[bytes] = set()
        for path in sorted(plan.deletes, reverse=True):
            parent, _, name = path.rpartition(b"/")
            fd = walker.open_dir(parent, create=False)
            if fd is not None:
                try:
                    os.unlink(name, dir_fd=fd)
                    walker.touched.add(parent)
                except FileNotFoundError:
                    pass
                except (IsADirectoryError, PermissionError) as exc:
                    if exc.errno not in (errno.EISDIR, errno.EPERM):
                        raise
                    # Captured as a file, a directory now: it is not ours to remove.
                while parent:
                    emptied.add(parent)
                    parent = parent.rpartition(b"/")[0]
            done += 1
            _tick(progress, done, total)
        walker.close()
        # 2. Directories our deletions emptied go too (what git does), deepest first; those the
        # writes need stay.
        needed = {p for w in writes for p in _ancestors(w.path)}
        for d in sorted(emptied - needed, key=lambda p: p.count(b"/"), reverse=True):
            parent, _, name = d.rpartition(b"/")
            fd = walker.open_dir(parent, create=False)
            if fd is None:
                continue
            try:
                os.rmdir(name, dir_fd=fd)
                walker.touched.add(parent)
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR):
                    raise
        walker.close()
        # 3. Write every file under a temporary name in its own directory.
        for w in writes:
            parent, _, name = w.path.rpartition(b"/")
            fd = walker.open_dir(parent, create=True)
            assert fd is not None
            tmp = _temp_name()
            staged.append((parent, tmp, name))  # before writing: a half-written temp is removed
            _write_entry(repo, fd, tmp, w, fsync=small, like=name)
            done += 1
            _tick(progress, done, total)
        if staged and not small:
            _sync_fs(root_fd)  # the data of every temp file is durable before any rename
        # 4. Rename into place: each file switches from old to new content atomically.
        for renamed, (parent, tmp, name) in enumerate(staged):
            if renamed == len(staged) // 2:
                faults.crash_point("restore-mid")  # test seam: die half-way through the renames
            fd = walker.open_dir(parent, create=False)
            if fd is None:
                raise _Obstacle(f"directory {os.fsdecode(parent)!r} vanished during the restore")
            try:
                os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise
                raise _Obstacle(f"{os.fsdecode(parent + b'/' + name if parent else name)!r} "
                                "became a directory during the restore") from exc
            walker.touched.add(parent)
        staged.clear()
        walker.close()
        if small:
            for d in sorted(walker.touched):
                fd = walker.open_dir(d, create=False)
                if fd is not None:
                    os.fsync(fd)
        elif walker.touched:
            _sync_fs(root_fd)
    finally:
        for parent, tmp, _name in staged:  # a failure part-way leaves no temp files behind
            try:
                fd = walker.open_dir(parent, create=False)
                if fd is not None:
                    os.unlink(tmp, dir_fd=fd)
            except (OSError, _Obstacle):
                pass
        walker.close()
        os.close(root_fd)
    _tick(progress, total, total)


def _write_entry(repo: pygit2.Repository, dir_fd: int, name: bytes, w: _Write, *, fsync: bool,
                 like: bytes | None = None) -> None:
    """Create ``name`` in ``dir_fd`` as the checkpoint's blob or link (never following links)."""
    data = repo.odb.read(w.oid)[1]
    if w.mode == MODE_LINK:
        os.symlink(data, name, dir_fd=dir_fd)
        return
    mode = 0o777 if w.mode == MODE_EXEC else 0o666
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode, dir_fd=dir_fd)
    try:
        if like is not None:
            _keep_permissions(fd, dir_fd, like, executable=w.mode == MODE_EXEC)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _keep_permissions(fd: int, dir_fd: int, name: bytes, *, executable: bool) -> None:
    """A file that replaces an existing regular file keeps its permission bits (as an editor
    would); only the exec bits follow the checkpoint, where read is allowed (as git does)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return
    if not stat.S_ISREG(st.st_mode):
        return
    perms = stat.S_IMODE(st.st_mode) & 0o7777 & ~0o111
    if executable:
        perms |= (perms & 0o444) >> 2
    os.fchmod(fd, perms)


def _ancestors(path: bytes) -> Iterator[bytes]:
    parent = path.rpartition(b"/")[0]
    while parent:
        yield parent
        parent = parent.rpartition(b"/")[0]


def _temp_name() -> bytes:
    return TMP_PREFIX + f"{os.getpid()}-{next(_tmp_counter)}-{os.urandom(3).hex()}.tmp".encode()


def _tick(progress: Progress | None, done: int, total: int) -> None:
    if progress is not None and (done % 200 == 0 or done == total):
        progress(done, total)


# -- into another directory ----------------------------------------------------------------------


def _restore_to(repo: pygit2.Repository, tree: pygit2.Tree, to: Path, home: Path, cp: dict, *,
                dry_run: bool, progress: Progress | None) -> dict:
    t0 = time.perf_counter()
    target = Path(os.path.abspath(to))
    if target.is_symlink():
        target = target.resolve()
    _refuse_to_target(target, home)
    entries = list(_walk_tree(repo, tree, b""))
    plan = _Plan(writes=entries)
    _check_paths(plan, cp)
    timings = {"plan_ms": _ms(t0)}
    out = {"target": str(target), "mode": "to", "plan": plan.as_list(), "applied": not dry_run,
           "timings": timings}
    if dry_run:
        return out
    t0 = time.perf_counter()
    if target.exists():
        _materialize(repo, target, entries, progress, fresh=False, timings=timings)
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = target.parent / f".{target.name}.snapshotd-{os.getpid()}-{next(_tmp_counter)}"
        os.mkdir(staging, 0o777)
        try:
            _materialize(repo, staging, entries, progress, fresh=True, timings=timings)
            os.rename(staging, target)  # the directory appears whole, or not at all
        except BaseException:
            _remove_tree(staging)
            raise
        parent_fd = os.open(target.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(parent_fd)
        finally:
            os.close(parent_fd)
    timings["apply_ms"] = _ms(t0)
    return out


def _refuse_to_target(target: Path, home: Path) -> None:
    if target.exists():
        if not target.is_dir():
            raise ServiceError("bad-request", f"--to {target} exists and is not a directory; "
                               "name a new or empty directory")
        if any(os.scandir(target)):
            raise ServiceError("bad-request", f"--to {target} is not empty; name a new or empty "
                               "directory (a restore into another directory never overwrites)")
    home = home.resolve()
    if target == home or home in target.parents:
        raise ServiceError("bad-request", f"--to {target} is inside the snapshotd home {home}; "
                           "choose a directory elsewhere")


def _walk_tree(repo: pygit2.Repository, tree: pygit2.Tree, prefix: bytes) -> Iterator[_Write]:
    yield from _walk_raw(repo.odb, tree.id.raw, prefix)


def _walk_raw(odb: pygit2.Odb, tree_id: bytes, prefix: bytes) -> Iterator[_Write]:
    """Every file and link under a tree, in git's order, from the raw tree objects."""
    for name, (oid, mode) in _entries(odb, tree_id).items():
        path = prefix + name
        if mode == MODE_TREE:
            yield from _walk_raw(odb, oid, path + b"/")
        elif mode != MODE_GITLINK:
            yield _Write(path, pygit2.Oid(raw=oid), mode, "A")


def _materialize(repo: pygit2.Repository, target: Path, entries: list[_Write],
                 progress: Progress | None, *, fresh: bool,
                 timings: dict[str, float] | None = None) -> None:
    """Write every entry straight to its name in an empty directory, then one sync barrier.

    Large trees are written by several threads, each on its own contiguous run of the sorted
    entries (so mostly its own directories): file creation is the cost, and the kernel runs
    creations in different directories in parallel while the GIL is released."""
    root_fd = os.open(target, _DirWalker.FLAGS)
    total = len(entries)
    workers = min(MATERIALIZE_WORKERS, max(1, total // 1000))
    chunks = [entries[i * total // workers:(i + 1) * total // workers] for i in range(workers)]
    done = [0] * workers
    lock = threading.Lock()
    ok = False

    def write_chunk(k: int) -> None:
        # A repository object per thread: libgit2 objects are not shared across threads here.
        own = repo if k == 0 else pygit2.Repository(repo.path)
        walker = _DirWalker(root_fd)
        try:
            for i, w in enumerate(chunks[k], 1):
                parent, _, name = w.path.rpartition(b"/")
                fd = walker.open_dir(parent, create=True)
                assert fd is not None
                _write_entry(own, fd, name, w, fsync=False)
                if progress is not None and i % 200 == 0:
                    with lock:
                        done[k] = i
                        _tick(progress, sum(done) // 200 * 200, total)
        finally:
            walker.close()

    try:
        if workers == 1:
            write_chunk(0)
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(workers, thread_name_prefix="snapshotd-restore") as pool:
                for future in [pool.submit(write_chunk, k) for k in range(workers)]:
                    future.result()
        synced = time.perf_counter()
        _sync_fs(root_fd)
        if timings is not None:
            timings["sync_ms"] = _ms(synced)
        ok = True
    finally:
        if not ok and not fresh:
            # Into an existing empty directory: take back what we created, leave it empty.
            for top in {w.path.partition(b"/")[0] for w in entries}:
                _remove_tree(target / os.fsdecode(top))
        os.close(root_fd)
    _tick(progress, total, total)


def _remove_tree(path: Path) -> None:
    import shutil

    try:
        if path.is_symlink() or not path.is_dir():
            path.unlink(missing_ok=True)
        else:
            shutil.rmtree(path, ignore_errors=True)
    except OSError:
        pass


# -- helpers -------------------------------------------------------------------------------------


_libc = None


def _sync_fs(fd: int) -> None:
    """Flush the filesystem holding ``fd`` (``syncfs``), falling back to a global ``sync``."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        except OSError:
            _libc = False
    syncfs = getattr(_libc, "syncfs", None) if _libc else None
    if syncfs is None or syncfs(fd) != 0:
        os.sync()


def _empty_tree(repo: pygit2.Repository) -> str:
    return str(repo.TreeBuilder().write())


def _tree(repo: pygit2.Repository, tree_id: str, cp: dict) -> pygit2.Tree:
    try:
        return repo[tree_id].peel(pygit2.Tree)
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise ServiceError("restore-failed", f"checkpoint seq {cp['seq']} ({cp['commit'][:12]}) "
                           f"names tree {tree_id[:12]}, which the store no longer holds: {exc}"
                           ) from exc


def _validate(run_id: object, node_id: object, seq: object, iteration: object,
              attempt: object) -> tuple[str, str, int | None, int | None, int | None]:
    try:
        run = validate_id("run_id", run_id)
        node = validate_id("node_id", node_id)
    except ValueError as exc:
        raise ServiceError("bad-id", str(exc)) from None
    try:
        s = None if seq is None else validate_int("seq", seq, 0)
        i = None if iteration is None else validate_int("iteration", iteration, 0)
        a = None if attempt is None else validate_int("attempt", attempt, 1)
    except ValueError as exc:
        raise ServiceError("bad-request", str(exc)) from None
    return run, node, s, i, a


def _abs_path_field(fields: dict, name: str) -> Path | None:
    value = fields.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not os.path.isabs(value) or "\0" in value:
        raise ServiceError("bad-request", f"{name} must be an absolute path")
    return Path(value)


def _bool(fields: dict, name: str) -> bool:
    value = fields.get(name, False)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ServiceError("bad-request", f"{name} must be true or false")
    return value


def _fmt(key: AttemptKey) -> str:
    return f"{key.run_id}/{key.node_id}/{key.iteration}/{key.attempt}"


def _ms(t0: float) -> float:
    return round((time.perf_counter() - t0) * 1000, 3)


__all__ = ["attach", "current_tree_of", "find_checkpoint", "format_seqs", "page_plan",
           "restore_checkpoint", "undo_command"]
