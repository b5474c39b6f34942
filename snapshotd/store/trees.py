"""Tree objects of the store: rewriting a tree along changed paths, and counting the files that
differ between two trees.

Promises:
- ``rewrite_tree`` rewrites only the trees on the changed paths (deepest first), so its cost
  follows the change, and learns the change counts on the way; ``remember_changes`` keeps them
  so ``tree_changes`` answers without reading a tree. A directory on those paths costs a copy
  of its raw bytes, not a libgit2 entry per name (a monorepo's root has thousands), written
  by ``loose`` (no deflate, no interpreter lock held across the file's system calls), and its
  result is exactly the tree libgit2 writes from the index.
- ``graft_trees`` puts whole trees (a nested repository's capture) at paths of a tree,
  rewriting only the trees on those paths.
- ``tree_changes`` reads only subtrees whose ids differ; its counts are those of
  ``git diff --stat`` (a file replaced by a directory is one deletion plus the additions under
  it; a mode change is a modification).
"""

from __future__ import annotations

import bisect
import itertools
import logging
import re
import threading
from collections.abc import Callable

import pygit2

from snapshotd.store.loose import StoredObjects

log = logging.getLogger("snapshotd.store")

# One entry of a raw (SHA-1) tree object: mode, space, name, NUL, 20-byte id.
_TREE_ENTRY = re.compile(rb"[0-7]+ [^\0]*\0.{20}", re.S)
_TREE_MODE = b"40000 "

# Counts the fast path learnt while rewriting a tree, by (old tree, new tree): ids name
# contents, so an entry never goes stale; the newest few are kept.
_KNOWN_CHANGES: dict[tuple[str, str], tuple[int, int, int]] = {}
_KNOWN_LOCK = threading.Lock()
_KNOWN_MAX = 256
# How many files a tree holds, by tree id, for the trees full scans wrote (the newest few).
_FILE_COUNTS: dict[str, int] = {}
# The raw bytes of the newest trees ``rewrite_tree`` wrote of at least ``_WIDE_BYTES`` (about
# 400 entries): the next capture of that worktree rewrites the same directories,
# and reading one back means parsing or inflating it whole. A few per watched worktree.
_WIDE_TREES: dict[pygit2.Oid, bytes] = {}
_WIDE_BYTES = 16 << 10
_WIDE_MAX = 16
_WIDE_MAX_BYTES = 16 << 20
# Where entries of those trees were found, by name: (start, end). A rewrite that replaces
# entries without changing the tree's length (a subtree's or a file's new id) leaves every
# entry where it was, so its tree inherits what its base had learnt and the next capture of
# the same directories searches nothing (a search is two scans of a 320 KB root).
_WIDE_SPANS: dict[pygit2.Oid, dict[bytes, tuple[int, int]]] = {}
# Where every entry of those trees ends (``_entry_ends``), carried the same way: whether a
# name found once in the bytes starts an entry is then one bisection, not a parse of the tree.
_WIDE_ENDS: dict[pygit2.Oid, list[int]] = {}


# One entry found in raw tree bytes: (start, end, mode, id).
_Entry = tuple[int, int, bytes, pygit2.Oid]


class TreeShapeChanged(Exception):
    """A changed file path crosses what is a file in the old tree: rebuild from the index."""


def rewrite_tree(repo: pygit2.Repository, index: pygit2.Index, base: str,
                 files: set[str], stored: StoredObjects | None = None
                 ) -> tuple[str, tuple[int, int, int]]:
    """The tree of ``index`` given that it equals ``base`` except at the file paths ``files``:
    only the trees on those paths are rewritten (deepest first), so the cost follows the
    change. Directories left empty disappear, as in git. Also returns the files added,
    modified and deleted from ``base`` (what ``tree_changes`` would count), known here for
    free: every change is one of ``files`` and its old entry is in hand.

    Each directory is rewritten as raw bytes (``_splice``): entries replaced or removed in
    place, an added one put where git sorts it; one copy of the bytes instead of one libgit2
    tree-builder entry per name, which is what a wide directory (a monorepo's root with
    thousands of entries) costs on every capture. Only a name whose bytes are ambiguous in
    the tree goes through libgit2's tree builder, for that directory alone. Trees are written
    stored by ``stored`` (``loose.StoredObjects``) when given: libgit2 would deflate them
    and write the file holding the interpreter lock, which every other capture waits for."""
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
    old = _OldTrees(repo, base)
    new_root: str | None = None
    for d in sorted(pending, key=lambda p: (p.count("/") if p else -1), reverse=True):
        oid = _rewrite_dir(repo, old, d, changes.get(d, {}), leaves.get(d, set()), counts,
                           stored)
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


def remember_file_count(tree: str, files: int) -> None:
    """Keep how many non-tree entries ``tree`` holds (a full scan's tree holds its index's
    entries): the first checkpoint of an attempt counts every file as added, and a diff of a
    million-file tree against the empty tree costs over a second."""
    with _KNOWN_LOCK:
        _FILE_COUNTS.pop(tree, None)
        _FILE_COUNTS[tree] = files
        while len(_FILE_COUNTS) > _KNOWN_MAX:
            del _FILE_COUNTS[next(iter(_FILE_COUNTS))]


def known_file_count(tree: str) -> int | None:
    """What ``remember_file_count`` keeps for ``tree``, if anything."""
    with _KNOWN_LOCK:
        return _FILE_COUNTS.get(tree)


def _count_files(repo: pygit2.Repository, tree: pygit2.Oid) -> int:
    """Non-tree entries (files, symlinks, submodule links) under ``tree``, all depths: as
    remembered, else one diff against the empty tree, counted in C."""
    known = known_file_count(str(tree))
    if known is not None:
        return known
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


class _OldTrees:
    """The directories of one base tree, read as raw bytes and searched there (a wide one this
    daemon wrote is at hand, never parsed into libgit2 entries again). libgit2's object cache
    keeps no tree over 4 KB, so a parsed base tree was parsed anew by every capture, twice,
    holding the interpreter lock."""

    def __init__(self, repo: pygit2.Repository, base: str) -> None:
        self.repo = repo
        self._ids: dict[str, pygit2.Oid | None] = {"": pygit2.Oid(hex=base)}
        self._raw: dict[pygit2.Oid, bytes | None] = {}
        self._ends: dict[pygit2.Oid, list[int] | None] = {}
        self._found: dict[tuple[pygit2.Oid, bytes], _Entry | None] = {}
        # Spans of entries, known before this capture (a wide tree's) or learnt by it.
        self.spans: dict[pygit2.Oid, dict[bytes, tuple[int, int]]] = {}

    def oid(self, path: str) -> pygit2.Oid | None:
        """The id of directory ``path`` in the base tree; None when it is not there. Raises
        ``TreeShapeChanged`` when a file stands on the way."""
        if path in self._ids:
            return self._ids[path]
        parent, _, name = path.rpartition("/")
        above = self.oid(parent)
        found: pygit2.Oid | None = None
        if above is not None:
            raw = self.raw(above)
            entry = self.find(above, name.encode()) if raw is not None else _AMBIGUOUS
            if entry is _AMBIGUOUS:
                tree = self.repo[above].peel(pygit2.Tree)
                if name in tree:
                    child = tree[name]
                    if child.filemode != pygit2.GIT_FILEMODE_TREE:
                        raise TreeShapeChanged(path)
                    found = child.id
            elif entry is not None:
                if entry[2] != _TREE_MODE[:-1]:
                    raise TreeShapeChanged(path)
                found = entry[3]
        self._ids[path] = found
        return found

    def find(self, oid: pygit2.Oid, name: bytes) -> _Entry | None:
        """``_find_entry`` of ``name`` in wide tree ``oid``, each answer kept: a capture looks
        each name up on the way down and again to splice it (a 320 KB root searched twice)."""
        key = (oid, name)
        if key not in self._found:
            raw = self.raw(oid)
            spans = self.spans_of(oid)
            span = spans.get(name)
            if raw is None:
                entry: _Entry | None = _AMBIGUOUS
            elif span is not None:
                entry = _entry_at(raw, *span)
            else:
                entry = _find_entry(raw, name)
                if entry is not None and entry is not _AMBIGUOUS:
                    # Found once, but maybe inside another entry's name ("y 100644 x" holds
                    # " x\0") when no entry "x" exists: only one that starts an entry is it.
                    if _starts_at(self.ends_of(oid), entry[0]):
                        spans[name] = entry[0], entry[1]
                    else:
                        entry = _AMBIGUOUS
            self._found[key] = entry
        return self._found[key]

    def ends_of(self, oid: pygit2.Oid) -> list[int] | None:
        """Where each entry of tree ``oid`` ends (known for the newest wide trees, else split
        once a capture: 20 µs for a 100-entry tree, 2 ms for a 10,000-entry root)."""
        if oid not in self._ends:
            with _KNOWN_LOCK:
                ends = _WIDE_ENDS.get(oid)
            if ends is None:
                raw = self.raw(oid)
                ends = _entry_ends(raw) if raw is not None else None
            self._ends[oid] = ends
        return self._ends[oid]

    def known_ends(self, oid: pygit2.Oid) -> list[int] | None:
        """``ends_of`` when known (this capture split the tree, or it was carried to it),
        without splitting the tree for it."""
        if oid in self._ends:
            return self._ends[oid]
        with _KNOWN_LOCK:
            return _WIDE_ENDS.get(oid)

    def spans_of(self, oid: pygit2.Oid) -> dict[bytes, tuple[int, int]]:
        """The known entry spans of wide tree ``oid`` (this capture adds to its own copy)."""
        if oid not in self.spans:
            with _KNOWN_LOCK:
                self.spans[oid] = dict(_WIDE_SPANS.get(oid, {}))
        return self.spans[oid]

    def raw(self, oid: pygit2.Oid) -> bytes | None:
        """The raw entries of tree ``oid`` (the store's newest wide trees are at hand: the next
        capture starts from them); None when the object is not a tree (libgit2 then reads it,
        and says what is wrong)."""
        if oid in self._raw:
            return self._raw[oid]
        with _KNOWN_LOCK:
            data = _WIDE_TREES.get(oid)
        if data is None:
            kind, body = self.repo.odb.read(oid)
            data = bytes(body) if kind == pygit2.GIT_OBJECT_TREE else None
        self._raw[oid] = data
        return data


# ``_find_entry``'s answer when a name's bytes occur more than once in a raw tree.
_AMBIGUOUS = (-1, -1, b"", pygit2.Oid(raw=bytes(20)))
# The modes git writes into a tree, longest first so a tree's "40000" is never read as the
# tail of another.
_MODES = (b"100644", b"100755", b"120000", b"160000", b"40000")


def _entry_at(raw: bytes, start: int, end: int) -> _Entry:
    """The entry known to span ``raw[start:end]`` (its mode and id read afresh: a rewrite may
    have replaced them in place)."""
    mode = raw[start:raw.index(b" ", start, end)]
    if mode not in _MODES:
        return _AMBIGUOUS  # a mode this reader does not know: let libgit2 read the tree
    return start, end, mode, pygit2.Oid(raw=raw[end - 20:end])


def _find_entry(raw: bytes, name: bytes) -> _Entry | None:
    """(start, end, mode, id) of entry ``name`` in raw tree bytes, None when absent, or
    ``_AMBIGUOUS``. A name's entry always holds `` <name>\\0`` and names hold no NUL, so when
    those bytes occur exactly once they are that entry (found by C-speed searches, not by
    walking every entry)."""
    needle = b" " + name + b"\0"
    at = raw.find(needle)
    if at < 0:
        return None
    if raw.find(needle, at + 1) >= 0:
        return _AMBIGUOUS
    mode = next((m for m in _MODES if raw.endswith(m, 0, at)), None)
    if mode is None:
        return _AMBIGUOUS  # a mode this reader does not know: let libgit2 read the tree
    end = at + len(needle) + 20
    return at - len(mode), end, mode, pygit2.Oid(raw=raw[end - 20:end])


def _rewrite_dir(repo: pygit2.Repository, old: _OldTrees, d: str,
                 changes: dict[str, tuple[pygit2.Oid, int] | None], files_here: set[str],
                 counts: list[int], stored: StoredObjects | None
                 ) -> pygit2.Oid | None:
    """Directory ``d`` of the base with ``changes`` applied, written (None: it is empty).
    Counts the changed files among ``files_here``."""
    base_id = old.oid(d)
    raw = old.raw(base_id) if base_id is not None else b""
    if raw is not None:
        if base_id is not None:
            spliced = _splice(raw, d, changes, files_here, lambda name: old.find(base_id, name),
                              lambda: old.ends_of(base_id))
        else:  # a new directory
            spliced = _splice(raw, d, changes, files_here, lambda name: None, lambda: [])
        if spliced is not None:
            data, found, in_place = spliced
            for i in range(3):
                counts[i] += found[i]
            if not data:
                return None
            oid = _write_raw_tree(repo, data, stored)
            if base_id is not None and in_place:
                # Every entry where it was: what was learnt of the base holds for the new tree.
                _keep_layout(oid, old.spans_of(base_id), old.known_ends(base_id))
            return oid
    tree = repo[base_id].peel(pygit2.Tree) if base_id is not None else None
    builder = repo.TreeBuilder(tree) if tree is not None else repo.TreeBuilder()
    for name, value in changes.items():
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
    return builder.write() if len(builder) else None


def _keep_layout(oid: pygit2.Oid, spans: dict[bytes, tuple[int, int]],
                 ends: list[int] | None) -> None:
    """Remember ``spans`` (and ``ends``, never changed once made) for wide tree ``oid`` while
    its bytes are kept."""
    with _KNOWN_LOCK:
        if oid in _WIDE_TREES:
            _WIDE_SPANS[oid] = dict(spans)
            if ends is not None:
                _WIDE_ENDS[oid] = ends


def _write_raw_tree(repo: pygit2.Repository, data: bytes,
                    stored: StoredObjects | None) -> pygit2.Oid:
    """Write raw tree ``data`` (stored, given ``stored``); a wide one is kept for the next
    capture's rewrite."""
    wide = len(data) >= _WIDE_BYTES
    if stored is None:
        oid = repo.odb.write(pygit2.GIT_OBJECT_TREE, data)
    else:
        try:
            oid = stored.write("tree", data)
        except OSError as exc:
            # libgit2 writes it instead, and says so itself when the disk refuses it too.
            log.warning("could not write a %d-byte tree stored (%s); writing it deflated",
                        len(data), exc)
            oid = repo.odb.write(pygit2.GIT_OBJECT_TREE, data)
    if not wide:
        return oid
    with _KNOWN_LOCK:
        _WIDE_TREES.pop(oid, None)
        _WIDE_TREES[oid] = data
        while len(_WIDE_TREES) > _WIDE_MAX \
                or sum(map(len, _WIDE_TREES.values())) > _WIDE_MAX_BYTES:
            oldest = next(iter(_WIDE_TREES))
            del _WIDE_TREES[oldest]
            _WIDE_SPANS.pop(oldest, None)
            _WIDE_ENDS.pop(oldest, None)
    return oid


def _splice(raw: bytes, d: str, changes: dict[str, tuple[pygit2.Oid, int] | None],
            files_here: set[str], find: Callable[[bytes], _Entry | None],
            ends_of: Callable[[], list[int] | None]
            ) -> tuple[bytes, tuple[int, int, int], bool] | None:
    """Raw tree ``raw`` with ``changes`` applied, the changed files counted (as libgit2's
    tree builder would: ``_rewrite_dir``) and whether every entry stayed where it was (only
    replaced, each by one as long); None when a name is ambiguous in the bytes or the
    entries cannot be read in order. A replaced or removed entry is edited in place; an added
    one, or one turning between tree and non-tree (it moves), goes where git sorts it, found
    by bisecting the entries (``ends_of``: where each ends, ``_entry_ends``). ``find`` is
    ``_find_entry`` over ``raw`` (remembered: the same names were looked up on the way
    down)."""
    edits: list[tuple[int, int, bytes, bytes]] = []  # (start, end, sort key, new bytes)
    ends: list[int] | None = None
    added = modified = deleted = 0
    in_place = True
    for name, value in changes.items():
        bname = name.encode()
        entry = find(bname)
        if entry is _AMBIGUOUS:
            return None
        if entry is not None:
            start, end, mode, oid = entry
            if name in files_here and mode == _TREE_MODE[:-1]:
                raise TreeShapeChanged(f"{d}/{name}")  # a file (or nothing) where a directory was
            if value is None:
                edits.append((start, end, b"", b""))
                deleted += name in files_here
                in_place = False
                continue
        elif value is None:
            continue
        new_mode = b"%o" % value[1]
        is_tree = value[1] == pygit2.GIT_FILEMODE_TREE
        data = b"%s %s\0%s" % (new_mode, bname, value[0].raw)
        if entry is None:
            added += name in files_here
        else:
            if name in files_here and (oid != value[0] or mode != new_mode):
                modified += 1
            if (mode == _TREE_MODE[:-1]) == is_tree:
                edits.append((start, end, b"", data))
                in_place = in_place and end - start == len(data)
                continue
            edits.append((start, end, b"", b""))  # it moves: a tree sorts as "name/"
        in_place = False
        if ends is None:
            ends = ends_of()
            if ends is None:
                return None
        key = bname + b"/" if is_tree else bname
        at = _insert_at(raw, ends, key)
        edits.append((at, at, key, data))
    parts, at = [], 0
    for start, end, _key, data in sorted(edits):
        parts += [raw[at:start], data]
        at = end
    parts.append(raw[at:])
    return b"".join(parts), (added, modified, deleted), in_place


def _entry_ends(raw: bytes) -> list[int] | None:
    """The offset where each entry of raw tree ``raw`` ends, or None when its entries do not
    cover it end to end. Read from the start, each entry is read exactly (a name holds no
    NUL), so these are the only places an entry starts."""
    ends = list(itertools.accumulate(map(len, _TREE_ENTRY.findall(raw))))
    return ends if (ends[-1] if ends else 0) == len(raw) else None


def _starts_at(ends: list[int] | None, at: int) -> bool:
    """Whether an entry starts at byte ``at`` of the tree whose entries end at ``ends``."""
    if not ends:
        return False
    if at == 0:
        return True
    i = bisect.bisect_left(ends, at)
    return i < len(ends) - 1 and ends[i] == at


def _insert_at(raw: bytes, ends: list[int], key: bytes) -> int:
    """The byte offset in raw tree ``raw`` (its entries ending at ``ends``) where an entry
    whose sort key is ``key`` goes: a bisection reading only the entries it probes."""
    def probe(i: int) -> bytes:
        return _sort_key(raw[ends[i - 1] if i else 0:ends[i]])

    i = bisect.bisect_left(range(len(ends)), key, key=probe)
    return ends[i - 1] if i else 0


def _sort_key(entry: bytes) -> bytes:
    """What git sorts a raw tree entry by: its name, a tree's as if it ended in "/"."""
    space = entry.index(b" ")
    name = entry[space + 1:-21]
    return name + b"/" if entry[:space] in (b"40000", b"040000") else name
