"""Trees written only to be read: git's empty tree, and the pruned pair a diff runs on.

Owns ``empty_tree`` and ``pruned_pair`` (two trees holding only the entries in which two trees
differ, at the same paths, so libgit2's tree-to-tree diff costs what the change costs, not the
size of the worktree). Both write tree objects and nothing else (no ref, no commit): nothing
names them, so gc collects them. They live in the store package because only it writes
``store.git``; the review reads (``show``, ``log``, the web app's diffs) and restore call them.
"""

from __future__ import annotations

import re

import pygit2

_TREE_MODE = 0o040000
# One entry of a raw tree object: mode, space, name, NUL, the 20-byte id (any bytes).
_TREE_RECORD = re.compile(rb"[0-7]+ [^\0]*\0.{20}", re.DOTALL)


def empty_tree(repo: pygit2.Repository) -> str:
    """The id of the empty tree (written to the store if it is not there yet)."""
    return str(repo.TreeBuilder().write())


def pruned_pair(repo: pygit2.Repository, tree_a: str | None, tree_b: str,
                cache: dict | None = None) -> tuple[str, str]:
    """Two trees that differ exactly as ``tree_a`` (None: the empty tree) and ``tree_b`` do, at
    the same paths, holding only the differing entries: libgit2 diffs them in O(changes).
    ``cache`` (kept across calls by a caller walking a chain) holds trees already read."""
    if tree_a is None:
        return empty_tree(repo), tree_b
    if tree_a == tree_b:
        return tree_a, tree_b
    a, b = _pruned(repo, pygit2.Oid(hex=tree_a), pygit2.Oid(hex=tree_b),
                   {} if cache is None else cache)
    return str(a), str(b)


def _pruned(repo: pygit2.Repository, tree_a: pygit2.Oid, tree_b: pygit2.Oid,
            cache: dict[pygit2.Oid, frozenset[bytes]]) -> tuple[pygit2.Oid, pygit2.Oid]:
    """``pruned_pair`` of two different trees: an entry equal on both sides (same mode, name
    and id: the same raw record) is left out, two differing subtrees are pruned in turn, anything
    else is kept as it is. Comparing raw record sets keeps a large directory's cost in C."""
    records_a, records_b = _records(repo, tree_a, cache), _records(repo, tree_b, cache)
    only_a = dict(_entry(r) for r in records_a - records_b)
    only_b = dict(_entry(r) for r in records_b - records_a)
    side_a, side_b = repo.TreeBuilder(), repo.TreeBuilder()
    for name in only_a.keys() | only_b.keys():
        ea, eb = only_a.get(name), only_b.get(name)
        if ea is not None and eb is not None and ea[0] == eb[0] == _TREE_MODE:
            sub_a, sub_b = _pruned(repo, ea[1], eb[1], cache)
            side_a.insert(name, sub_a, _TREE_MODE)
            side_b.insert(name, sub_b, _TREE_MODE)
            continue
        if ea is not None:
            side_a.insert(name, ea[1], ea[0])
        if eb is not None:
            side_b.insert(name, eb[1], eb[0])
    return side_a.write(), side_b.write()


def _records(repo: pygit2.Repository, tree_id: pygit2.Oid,
             cache: dict[pygit2.Oid, frozenset[bytes]]) -> frozenset[bytes]:
    """A tree's raw entry records (``MODE NAME\\0`` + a 20-byte id each), read once per call."""
    found = cache.get(tree_id)
    if found is None:
        found = cache[tree_id] = frozenset(_TREE_RECORD.findall(repo.odb.read(tree_id)[1]))
    return found


def _entry(record: bytes) -> tuple[str, tuple[int, pygit2.Oid]]:
    """``name, (mode, id)`` of one raw tree record."""
    mode, _, rest = record.partition(b" ")
    name = rest[:-21].decode("utf-8", "surrogateescape")
    return name, (int(mode, 8), pygit2.Oid(raw=rest[-20:]))
