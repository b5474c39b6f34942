"""Tree objects of the store: rewriting a tree along changed paths, and counting the files that
differ between two trees.

Promises:
- ``rewrite_tree`` rewrites only the trees on the changed paths (deepest first), so its cost
  follows the change, and learns the change counts on the way; ``remember_changes`` keeps them
  so ``tree_changes`` answers without reading a tree.
- ``graft_trees`` puts whole trees (a nested repository's capture) at paths of a tree,
  rewriting only the trees on those paths.
- ``tree_changes`` reads only subtrees whose ids differ; its counts are those of
  ``git diff --stat`` (a file replaced by a directory is one deletion plus the additions under
  it; a mode change is a modification).
"""

from __future__ import annotations

import re
import threading

import pygit2

# One entry of a raw (SHA-1) tree object: mode, space, name, NUL, 20-byte id.
_TREE_ENTRY = re.compile(rb"[0-7]+ [^\0]*\0.{20}", re.S)
_TREE_MODE = b"40000 "

# Counts the fast path learnt while rewriting a tree, by (old tree, new tree): ids name
# contents, so an entry never goes stale; the newest few are kept.
_KNOWN_CHANGES: dict[tuple[str, str], tuple[int, int, int]] = {}
_KNOWN_LOCK = threading.Lock()
_KNOWN_MAX = 256


class TreeShapeChanged(Exception):
    """A changed file path crosses what is a file in the old tree: rebuild from the index."""


def rewrite_tree(repo: pygit2.Repository, index: pygit2.Index, base: str,
                 files: set[str]) -> tuple[str, tuple[int, int, int]]:
    """The tree of ``index`` given that it equals ``base`` except at the file paths ``files``:
    only the trees on those paths are rewritten (deepest first), so the cost follows the
    change. Directories left empty disappear, as in git. Also returns the files added,
    modified and deleted from ``base`` (what ``tree_changes`` would count), known here for
    free: every change is one of ``files`` and its old entry is in hand."""
    if not files:
        return base, (0, 0, 0)
    counts = [0, 0, 0]
    changes: dict[str, dict[str, tuple[pygit2.Oid, int] | None]] = {}
    for path in files:
        parent, _, name = path.rpartition("/")
        try:
            entry = index[path]
            changes.setdefault(parent, {})[name] = (entry.id, int(entry.mode))
        except KeyError:
            changes.setdefault(parent, {})[name] = None
    leaves = {d: set(names) for d, names in changes.items()}
    pending = set(changes)
    for d in list(pending):
        while d:
            d = d.rpartition("/")[0]
            pending.add(d)
    root = repo[base].peel(pygit2.Tree)
    new_root: str | None = None
    for d in sorted(pending, key=lambda p: (p.count("/") if p else -1), reverse=True):
        old = _subtree(repo, root, d)
        builder = repo.TreeBuilder(old) if old is not None else repo.TreeBuilder()
        files_here = leaves.get(d, ())
        for name, value in changes.get(d, {}).items():
            existing = builder.get(name)
            if name in files_here and existing is not None \
                    and existing.filemode == pygit2.GIT_FILEMODE_TREE:
                # The index has a file (or nothing) where the base has a directory.
                raise TreeShapeChanged(f"{d}/{name}")
            if value is None:
                if existing is not None:
                    builder.remove(name)
                    if name in files_here:
                        counts[2] += 1
                continue
            if name in files_here:
                if existing is None:
                    counts[0] += 1
                elif existing.id != value[0] or int(existing.filemode) != value[1]:
                    counts[1] += 1
            builder.insert(name, value[0], value[1])
        oid = builder.write() if len(builder) else None
        if d == "":
            new_root = str(oid) if oid is not None else str(repo.TreeBuilder().write())
        else:
            parent, _, name = d.rpartition("/")
            if name in leaves.get(parent, ()):
                raise TreeShapeChanged(d)  # a changed file path is also a directory's
            changes.setdefault(parent, {})[name] = (
                (oid, pygit2.GIT_FILEMODE_TREE) if oid is not None else None)
    assert new_root is not None
    return new_root, (counts[0], counts[1], counts[2])


def graft_trees(repo: pygit2.Repository, base: str, grafts: dict[str, str]) -> str:
    """Tree ``base`` with the tree ``grafts[path]`` at each path (directories made on the way
    as needed; whatever stood at that path is replaced). An empty grafted tree leaves no entry,
    and a directory left empty by that disappears, as in git."""
    tree = repo[base].peel(pygit2.Tree)
    oid = _graft(repo, tree, {path: pygit2.Oid(hex=oid) for path, oid in grafts.items()})
    return str(oid if oid is not None else repo.TreeBuilder().write())


def tree_changes(repo: pygit2.Repository, old: str | None, new: str) -> tuple[int, int, int]:
    """Files (and submodule links) added, modified and deleted from tree ``old`` to ``new``.
    Only subtrees whose ids differ are read, and each is compared as raw entry bytes (set
    arithmetic in C) rather than entry by entry in Python: a 1,000-entry root costs a fraction
    of a millisecond, where pygit2 entry objects cost several. libgit2's own tree-to-tree diff
    reads every subtree, equal or not. After a fast-path capture the counts are already known
    (``rewrite_tree`` learns them) and nothing is read. A file replaced by a directory (or
    back) counts as one deletion plus the additions under it, as in ``git diff --stat``; a
    mode change is a modification. Caller holds the store lock."""
    if old is not None:
        with _KNOWN_LOCK:
            known = _KNOWN_CHANGES.get((old, new))
        if known is not None:
            return known
    return compute_tree_changes(repo, old, new)


def compute_tree_changes(repo: pygit2.Repository, old: str | None,
                         new: str) -> tuple[int, int, int]:
    """``tree_changes`` from the trees themselves (never from what the fast path learnt)."""
    counts = [0, 0, 0]
    if old is None:
        counts[0] = _count_files(repo, pygit2.Oid(hex=new))
    elif old != new:
        _raw_tree_changes(repo, pygit2.Oid(hex=old), pygit2.Oid(hex=new), counts)
    return counts[0], counts[1], counts[2]


def remember_changes(old: str, new: str, counts: tuple[int, int, int]) -> None:
    """Keep the counts ``rewrite_tree`` learnt from ``old`` to ``new`` for ``tree_changes``."""
    with _KNOWN_LOCK:
        _KNOWN_CHANGES.pop((old, new), None)
        _KNOWN_CHANGES[(old, new)] = counts
        while len(_KNOWN_CHANGES) > _KNOWN_MAX:
            del _KNOWN_CHANGES[next(iter(_KNOWN_CHANGES))]


def _raw_tree_changes(repo: pygit2.Repository, old: pygit2.Oid, new: pygit2.Oid,
                      counts: list[int]) -> None:
    odb = repo.odb
    before = set(_TREE_ENTRY.findall(odb.read(old)[1]))
    after = set(_TREE_ENTRY.findall(odb.read(new)[1]))
    gone = dict(_split_entry(e) for e in before - after)
    for name, (mode, oid) in (_split_entry(e) for e in after - before):
        prev = gone.pop(name, None)
        is_tree = mode == _TREE_MODE
        if prev is None:
            counts[0] += _count_files(repo, oid) if is_tree else 1
        elif prev[0] == _TREE_MODE and is_tree:
            _raw_tree_changes(repo, prev[1], oid, counts)
        elif prev[0] == _TREE_MODE:
            counts[2] += _count_files(repo, prev[1])
            counts[0] += 1
        elif is_tree:
            counts[2] += 1
            counts[0] += _count_files(repo, oid)
        else:
            counts[1] += 1
    for mode, oid in gone.values():
        counts[2] += _count_files(repo, oid) if mode == _TREE_MODE else 1


def _split_entry(entry: bytes) -> tuple[bytes, tuple[bytes, pygit2.Oid]]:
    """(name, (mode and space, id)) of one raw tree entry."""
    space = entry.index(b" ")
    return entry[space + 1:-21], (entry[:space + 1], pygit2.Oid(raw=entry[-20:]))


def _count_files(repo: pygit2.Repository, tree: pygit2.Oid) -> int:
    """Non-tree entries (files, symlinks, submodule links) under ``tree``, all depths: one
    diff against the empty tree, counted in C."""
    return len(repo[tree].peel(pygit2.Tree).diff_to_tree())


def _graft(repo: pygit2.Repository, tree: pygit2.Tree | None,
           grafts: dict[str, pygit2.Oid]) -> pygit2.Oid | None:
    """``tree`` (or an empty one) with ``grafts`` applied, written; None when it is empty."""
    builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
    below: dict[str, dict[str, pygit2.Oid]] = {}
    for path, oid in grafts.items():
        head, _, rest = path.partition("/")
        if rest:
            below.setdefault(head, {})[rest] = oid
            continue
        if builder.get(head) is not None:
            builder.remove(head)
        if len(repo[oid].peel(pygit2.Tree)):
            builder.insert(head, oid, pygit2.GIT_FILEMODE_TREE)
    for head, sub in below.items():
        existing = builder.get(head)
        subtree = repo[existing.id].peel(pygit2.Tree) \
            if existing is not None and existing.filemode == pygit2.GIT_FILEMODE_TREE else None
        new = _graft(repo, subtree, sub)
        if existing is not None:
            builder.remove(head)
        if new is not None:
            builder.insert(head, new, pygit2.GIT_FILEMODE_TREE)
    return builder.write() if len(builder) else None


def _subtree(repo: pygit2.Repository, root: pygit2.Tree, path: str) -> pygit2.Tree | None:
    if path == "":
        return root
    tree = root
    for part in path.split("/"):
        try:
            entry = tree[part]
        except KeyError:
            return None
        if entry.filemode != pygit2.GIT_FILEMODE_TREE:
            raise TreeShapeChanged(path)
        tree = repo[entry.id]
    return tree
