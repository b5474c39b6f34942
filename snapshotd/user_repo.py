"""The user's own git repository beside a worktree, read and never written.

Owns finding a worktree's git dir (a ``.git`` directory or a ``gitdir:`` file), its
``info/exclude``, the files its index tracks, and a parsed, cleaned copy of its index
(``strip_index``) from which a new stat cache is seeded.

Promises: nothing here writes into the user's repository; an index we do not fully understand
(format 4, split or sparse, conflicts, SHA-256) is refused (None), never half-used.
"""

from __future__ import annotations

import hashlib
import stat
import struct
from dataclasses import dataclass
from pathlib import Path

import pygit2
from pygit2.enums import FileMode


def user_gitdir(root: Path) -> Path | None:
    """The git dir of the repository whose worktree is ``root`` (a ``.git`` dir or file)."""
    dot_git = root / ".git"
    try:
        if dot_git.is_dir():
            return dot_git
        if dot_git.is_file():
            text = dot_git.read_text().strip()
            if text.startswith("gitdir:"):
                gitdir = Path(text[len("gitdir:"):].strip())
                return gitdir if gitdir.is_absolute() else (root / gitdir).resolve()
    except OSError:
        return None
    return None


def repo_info_exclude(root: Path) -> str | None:
    """The ``info/exclude`` of the repository whose worktree is ``root`` (in the common git dir
    for a linked worktree)."""
    gitdir = user_gitdir(root)
    if gitdir is None:
        return None
    try:
        common = gitdir / "commondir"
        if common.is_file():
            c = Path(common.read_text().strip())
            gitdir = c if c.is_absolute() else (gitdir / c)
    except OSError:
        return None
    return str(gitdir / "info" / "exclude")


def tracked_files(root: Path) -> list[str]:
    """The paths of the files (not submodules) the index of ``root``'s repository tracks;
    empty when it has none or it cannot be read."""
    gitdir = user_gitdir(root)
    user_index = gitdir / "index" if gitdir is not None else None
    if user_index is None or not user_index.is_file():
        return []
    try:
        entries = pygit2.Index(str(user_index))
    except (pygit2.GitError, OSError):
        return []
    return [entry.path for entry in entries if entry.mode != FileMode.COMMIT]


@dataclass
class SeedIndex:
    """What ``strip_index`` keeps of a user's git index."""

    entries: bytes  # header and entries, no extensions, no checksum
    objects: list[tuple[str, int]]  # (object id, mode) of every entry
    cache_tree: bytes | None  # the TREE extension's data, every node valid only if all below are
    trees: list[str]  # the tree ids its valid nodes name

    def index_file(self, *, with_cache_tree: bool) -> bytes:
        """The bytes of an index file: the entries, the cache-tree if asked, the checksum."""
        out = self.entries
        if with_cache_tree and self.cache_tree is not None:
            out += b"TREE" + struct.pack(">I", len(self.cache_tree)) + self.cache_tree
        return out + hashlib.sha1(out).digest()


def strip_index(data: bytes) -> SeedIndex | None:
    """A copy of a git index (format 2 or 3) with its entries and, apart, its cache-tree (the
    TREE extension: the tree id of each directory whose entries did not change since a tree
    was written for it). Other extensions are dropped. Assume-valid, skip-worktree and
    intent-to-add flags are cleared or refused, since each would hide the file's real state.
    None for what we do not handle (format 4, split or sparse index, conflicts, SHA-256)."""
    if len(data) < 32 or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3):
        return None
    end = len(data) - 20
    if hashlib.sha1(data[:end]).digest() != data[end:]:
        return None
    objects: list[tuple[str, int]] = []
    patches: list[tuple[int, bytes]] = []  # (offset, bytes): flags to clear
    unpack_from = struct.unpack_from
    off = 12
    for _ in range(count):
        if off + 62 > end:
            return None
        mode = unpack_from(">I", data, off + 24)[0]
        flags = unpack_from(">H", data, off + 60)[0]
        if flags & 0x3000:  # a merge stage: the user is mid-conflict
            return None
        extended = version >= 3 and bool(flags & 0x4000)
        head = 62 + (2 if extended else 0)
        name_len = flags & 0xFFF
        nul = off + head + name_len if name_len < 0xFFF else data.index(b"\0", off + head)
        length = (nul - off + 8) & ~7
        if off + length > end or data[nul] != 0:
            return None
        if flags & 0x8000:  # assume-valid off: check stats
            patches.append((off + 60, struct.pack(">H", flags & ~0x8000)))
        if extended:
            ext = unpack_from(">H", data, off + 62)[0]
            if ext & 0x2000:  # intent-to-add: no blob behind it
                return None
            if ext & 0x4000:  # skip-worktree off
                patches.append((off + 62, struct.pack(">H", ext & ~0x4000)))
        if stat.S_ISDIR(mode):  # a sparse index's directory entry
            return None
        objects.append((data[off + 40:off + 60].hex(), mode))
        off += length
    if off > end:
        return None
    out = bytearray(data[:off])
    for at, value in patches:
        out[at:at + 2] = value
    cache_tree: tuple[bytes, list[str]] | None = None
    while off + 8 <= end:
        sig = data[off:off + 4]
        size = struct.unpack(">I", data[off + 4:off + 8])[0]
        body = data[off + 8:off + 8 + size]
        off += 8 + size
        if off > end:
            return None
        if sig in (b"link", b"sdir"):  # split or sparse index: the entries are not all here
            return None
        if sig == b"TREE":
            cache_tree = valid_cache_tree(body)
    if cache_tree is None:
        return SeedIndex(bytes(out), objects, None, [])
    return SeedIndex(bytes(out), objects, cache_tree[0], cache_tree[1])


def valid_cache_tree(body: bytes) -> tuple[bytes, list[str]] | None:
    """The TREE extension rewritten so that a node counts as valid only if every node below it
    is (git keeps it so; we do not rely on it, since a valid node's tree is used as is), and the
    ids of its valid nodes. None if it does not parse."""
    nodes: list[list] = []  # [path, entry count, subtree count, raw id or None], pre-order
    off = 0
    try:
        while off < len(body):
            nul = body.index(b"\0", off)
            newline = body.index(b"\n", nul)
            entries, subtrees = (int(n) for n in body[nul + 1:newline].split(b" "))
            path = body[off:nul]
            off = newline + 1
            oid = None
            if entries >= 0:
                oid = body[off:off + 20]
                off += 20
                if len(oid) != 20:
                    return None
            nodes.append([path, entries, subtrees, oid])
    except ValueError:
        return None

    def walk(i: int) -> tuple[int, bool]:
        node = nodes[i]
        valid = node[1] >= 0
        j = i + 1
        for _ in range(node[2]):
            if j >= len(nodes):
                raise IndexError
            j, below = walk(j)
            valid = valid and below
        if not valid:
            node[1], node[3] = -1, None
        return j, valid

    try:
        if not nodes or walk(0)[0] != len(nodes):
            return None
    except (IndexError, RecursionError):
        return None
    out = bytearray()
    for path, entries, subtrees, oid in nodes:
        out += path + b"\0" + f"{entries} {subtrees}\n".encode() + (oid or b"")
    return bytes(out), [oid.hex() for _p, _e, _s, oid in nodes if oid is not None]
