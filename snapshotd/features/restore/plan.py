"""Restore plan: what a restore writes, deletes and leaves alone, computed before anything changes.

Owns ``Plan`` (``writes``, ``deletes``, ``kept``) and its making: ``plan_trees`` (a tree-to-tree
diff of the worktree's current capture against the checkpoint), ``walk_tree`` (every entry of a
checkpoint, for a restore into a new directory), ``check_paths`` (the refusal of paths that would
leave the target) and ``obstacles`` (checkpoint paths blocked by files the capture does not hold).
``snapshotd.features.restore.apply`` carries a plan out; ``snapshotd.features.restore.restore`` drives both.

Promises:
- The plan's cost follows the difference: identical subtrees are skipped by id, and tree objects
  are parsed raw (one ``odb.read`` and a byte parse per tree), not through pygit2's entry objects.
- Nested repositories (gitlinks) are never captured, so never written nor deleted.
- ``check_paths`` refuses, before anything is written, a path that is empty, absolute, has an
  empty, ``.`` or ``..`` component or a ``.git`` component (``restore-failed``).
- ``obstacles`` only inspects the worktree (``lstat``); a path it reports is left as it is.
"""

from __future__ import annotations

import itertools
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from snapshotd.core import RESTORE_FAILED, ServiceError

MODE_TREE = 0o040000
MODE_BLOB = 0o100644
MODE_EXEC = 0o100755
MODE_LINK = 0o120000
MODE_GITLINK = 0o160000


@dataclass
class Write:
    """One file or link the restore creates or replaces."""

    path: bytes
    oid: pygit2.Oid
    mode: int
    op: str  # "A": absent from the current capture, "M": present and different
    data: bytes | None = None  # content not in the store (a revert's merge); None: read ``oid``


@dataclass
class Plan:
    """Writes and deletes, sorted by path, and the paths left alone (``kept``, with a reason)."""

    writes: list[Write] = field(default_factory=list)
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


def plan_trees(repo: pygit2.Repository, current: pygit2.Tree, target: pygit2.Tree) -> Plan:
    """Tree-to-tree diff that skips identical subtrees by id, so its cost follows the difference
    (libgit2's tree diff reads every subtree of both sides)."""
    plan = Plan()
    _diff_trees(repo.odb, current.id.raw, target.id.raw, b"", plan)
    plan.writes.sort(key=lambda w: w.path)
    return plan


def walk_tree(repo: pygit2.Repository, tree: pygit2.Tree) -> Iterator[Write]:
    """Every file and link of ``tree``, in git's order, each an ``A`` write."""
    yield from _walk_raw(repo.odb, tree.id.raw, b"")


def check_paths(plan: Plan, cp: dict) -> None:
    """Refuse, before anything is written, a path that would leave the target or enter a .git."""
    for path in itertools.chain((w.path for w in plan.writes), plan.deletes):
        reason = _bad_path(path)
        if reason:
            raise ServiceError(
                RESTORE_FAILED, f"checkpoint seq {cp['seq']} ({cp['commit'][:12]}) holds "
                f"the path {os.fsdecode(path)!r}, which {reason}; refusing to restore it (nothing "
                "was written)")


def obstacles(root: Path, plan: Plan) -> list[tuple[bytes, str]]:
    """Checkpoint paths blocked by files the capture does not hold (ignored, too large,
    unreadable): those files win, and the path is reported instead of written."""
    base = os.fsencode(root)
    dirs = _DirStates(base, set(plan.deletes))
    kept: list[tuple[bytes, str]] = []
    for w in plan.writes:
        state = dirs.state(w.path.rpartition(b"/")[0])
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
            if not _only_deleted_inside(base, w.path, dirs.deleting):
                kept.append((w.path, "a directory holding ignored or uncaptured files stands "
                                     "where the checkpoint has a file"))
        else:
            kept.append((w.path, "an ignored or uncaptured file is in the way (it is kept)"))
    return kept


def tree_entries(odb: pygit2.Odb, tree_id: bytes | None) -> dict[bytes, tuple[bytes, int]]:
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


# -- helpers -------------------------------------------------------------------------------------


def _diff_trees(odb: pygit2.Odb, old_id: bytes | None, new_id: bytes | None, prefix: bytes,
                plan: Plan) -> None:
    if old_id is not None and new_id is not None and old_id == new_id:
        return
    old = tree_entries(odb, old_id)
    new = tree_entries(odb, new_id)
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
        if a is not None and not a_tree and a[1] != MODE_GITLINK and (b is None or b_tree):
            plan.deletes.append(path)
        if b is not None and not b_tree and b[1] != MODE_GITLINK:
            present = a is not None and not a_tree and a[1] != MODE_GITLINK
            plan.writes.append(Write(path, pygit2.Oid(raw=b[0]), b[1], "M" if present else "A"))


def _walk_raw(odb: pygit2.Odb, tree_id: bytes, prefix: bytes) -> Iterator[Write]:
    """Every file and link under a tree, in git's order, from the raw tree objects."""
    for name, (oid, mode) in tree_entries(odb, tree_id).items():
        path = prefix + name
        if mode == MODE_TREE:
            yield from _walk_raw(odb, oid, path + b"/")
        elif mode != MODE_GITLINK:
            yield Write(path, pygit2.Oid(raw=oid), mode, "A")


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


class _DirStates:
    """What stands at each directory a plan writes into, looked up once per directory."""

    def __init__(self, base: bytes, deleting: set[bytes]) -> None:
        self.base = base
        self.deleting = deleting
        self.states: dict[bytes, str] = {b"": "dir"}

    def state(self, prefix: bytes) -> str:
        """'dir' (a real directory), 'absent' (nothing, or it will be deleted), 'blocked'."""
        known = self.states.get(prefix)
        if known is not None:
            return known
        up = self.state(prefix.rpartition(b"/")[0])
        state = up if up != "dir" else self._look(prefix)
        self.states[prefix] = state
        return state

    def _look(self, prefix: bytes) -> str:
        try:
            st = os.lstat(self.base + b"/" + prefix)
        except FileNotFoundError:
            return "absent"
        except OSError:
            return "blocked"
        if stat.S_ISDIR(st.st_mode):
            return "dir"
        if prefix in self.deleting:
            return "absent"  # a captured file or link: deleted, then made a directory
        return "blocked"


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
