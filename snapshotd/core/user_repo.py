"""The user's own git repository beside a worktree, read and never written.

Owns finding a worktree's git dir (a ``.git`` directory or a ``gitdir:`` file), its
``info/exclude``, a parsed, cleaned copy of its index (``strip_index``) that seeds a new stat
cache, the repository (``open_user_repo``), its HEAD commit (``user_head``, the base an export
builds on) and its objects dir (``objects_dir``, borrowed read-only by a scratch repository).

Promises: nothing here writes into the user's repository; an index we do not fully understand
(format 4, split or sparse, conflicts, SHA-256) is refused (None), never half-used;
``user_head`` never fails a capture: outside a repository, with an unborn or unreadable HEAD it
gives None (the last logged at warning: export then falls back to HEAD at export time). Files
of the user's repository are opened without blocking and only when regular (``open_regular``,
``not_regular``, ``blocking_file``), so a FIFO planted in ``.git`` makes the seed give up and
an export refuse, never wait; HEAD is resolved here from its files (``head_commit``) because
libgit2 and git open them with a blocking ``open``.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import pygit2

_U16 = struct.Struct(">H")
# The fixed part of an index entry as read here: its mode (at 24), object id (at 40) and flags
# (at 60), in one call per entry.
_ENTRY = struct.Struct(">24xI12x20sH")
_GITLINK = 0o160000
_OID_HEX = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_MAX_SYMREF_DEPTH = 5  # libgit2's limit
# git reads no larger .git file ("too large to be a .git file"); no ref file is near it.
_MAX_GIT_FILE_BYTES = 1 << 20
# Refs kept in each linked worktree's own git dir, not the common one (git's list).
_PER_WORKTREE_REFS = ("refs/worktree/", "refs/bisect/", "refs/rewritten/")

log = logging.getLogger("snapshotd.user_repo")


def user_gitdir(root: Path) -> Path | None:
    """The git dir of the repository whose worktree is ``root`` (a ``.git`` dir or file)."""
    gitdir = _gitdir(os.path.join(root, ".git"))
    return Path(gitdir) if gitdir is not None else None


def repo_info_exclude(root: Path) -> str | None:
    """The ``info/exclude`` of the repository whose worktree is ``root`` (in the common git dir
    for a linked worktree). On every capture's path: names joined as strings, each looked up
    by one system call."""
    gitdir = _gitdir(os.path.join(root, ".git"))
    if gitdir is None:
        return None
    try:
        return os.path.join(_common_dir(gitdir), "info", "exclude")
    except OSError:
        return None


# A cache-tree node: [name (bytes, its parent's path left out), entry count (-1: invalid),
# subtree count, raw tree id or None]. A list, since validating it may invalidate it.
CacheNode = list


@dataclass
class SeedIndex:
    """What ``strip_index`` keeps of a user's git index."""

    entries: bytes  # header and entries, no extensions, no checksum
    count: int  # how many entries
    blobs: list[bytes]  # the raw object id of every entry but gitlinks (repeats included)
    cache_tree: bytes | None  # the TREE extension's data, every node valid only if all below are
    nodes: list[CacheNode]  # that data's nodes, pre-order (none without a cache-tree)

    @property
    def trees(self) -> list[bytes]:
        """The raw tree ids the cache-tree's valid nodes name."""
        return [node[3] for node in self.nodes if node[3] is not None]

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
    blobs: list[bytes] = []
    keep = blobs.append
    patches: list[tuple[int, bytes]] = []  # (offset, bytes): flags to clear
    entry_at = _ENTRY.unpack_from
    off = 12
    # One pass, a few operations an entry (a monorepo's index holds a million): the rare
    # flags (a stage, assume-valid, an extended entry) and long names take the slow branch.
    # Ids stay raw: turned to text they cost a third of this loop.
    for _ in range(count):
        if off + 62 > end:
            return None
        mode, oid, flags = entry_at(data, off)
        if flags & 0xF000 or flags & 0xFFF == 0xFFF:
            entry = _rare_entry(data, off, flags, version, end, patches)
            if entry is None:
                return None
            nul = entry
        else:
            nul = off + 62 + flags
        length = (nul - off + 8) & ~7
        if off + length > end or data[nul] != 0:
            return None
        if mode & 0o170000 == 0o040000:  # a sparse index's directory entry
            return None
        if mode != _GITLINK:
            keep(oid)
        off += length
    if off > end:
        return None
    out = bytearray(data[:off])
    for at, value in patches:
        out[at:at + 2] = value
    cache_tree: tuple[bytes, list[CacheNode]] | None = None
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
        return SeedIndex(bytes(out), count, blobs, None, [])
    return SeedIndex(bytes(out), count, blobs, *cache_tree)


def _rare_entry(data: bytes, off: int, flags: int, version: int, end: int,
                patches: list[tuple[int, bytes]]) -> int | None:
    """Where the name of the index entry at ``off`` ends (its NUL), for an entry with rare
    ``flags`` or a long name; flags to clear go to ``patches``; None when the index is one we
    do not handle (a merge stage, intent-to-add)."""
    if flags & 0x3000:  # a merge stage: the user is mid-conflict
        return None
    extended = version >= 3 and bool(flags & 0x4000)
    head = 62 + (2 if extended else 0)
    if flags & 0x8000:  # assume-valid off: check stats
        patches.append((off + 60, _U16.pack(flags & ~0x8000)))
    if extended:
        ext = _U16.unpack_from(data, off + 62)[0]
        if ext & 0x2000:  # intent-to-add: no blob behind it
            return None
        if ext & 0x4000:  # skip-worktree off
            patches.append((off + 62, _U16.pack(ext & ~0x4000)))
    name_len = flags & 0xFFF
    if name_len < 0xFFF:
        return off + head + name_len
    nul = data.find(b"\0", off + head, end)
    return nul if nul >= 0 else None


def valid_cache_tree(body: bytes) -> tuple[bytes, list[CacheNode]] | None:
    """The TREE extension rewritten so that a node counts as valid only if every node below it
    is (git keeps it so; we do not rely on it, since a valid node's tree is used as is), and its
    nodes as rewritten, in pre-order. None if it does not parse or is not one tree."""
    nodes: list[CacheNode] = []
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
    return bytes(out), nodes


def open_user_repo(path: Path) -> pygit2.Repository | None:
    """The non-bare repository whose worktree holds ``path`` (``discover_gitdir``), or None
    (not in a repository). Raises ``NotRegularFile`` when a file libgit2 would open on the way
    is a FIFO or the like (``blocking_file``): its blocking open would wait for good."""
    gitdir = discover_gitdir(path)
    if gitdir is None:
        return None
    odd = blocking_file(gitdir)
    if odd is not None:
        raise NotRegularFile(odd)
    repo = pygit2.Repository(str(gitdir))
    return None if repo.is_bare else repo


def user_head(root: Path) -> str | None:
    """The commit the HEAD of ``root``'s repository points at, or None (no repository, unborn
    HEAD, or unreadable: logged)."""
    try:
        gitdir = discover_gitdir(root)
        return None if gitdir is None else head_commit(gitdir)
    except (ValueError, OSError) as exc:
        log.warning("could not read the HEAD of the repository at %s (export will use the HEAD "
                    "at export time): %s", root, exc)
        return None


def discover_gitdir(path: Path) -> Path | None:
    """The git dir of the repository whose worktree holds ``path``: that of the first ``.git``
    (a directory, or a ``gitdir:`` file) holding a ``HEAD``, from ``path`` up, not crossing
    into another file system (git's default)."""
    here = os.path.abspath(path)
    try:
        device = os.stat(here).st_dev
    except OSError:
        return None
    while True:
        gitdir = _gitdir(os.path.join(here, ".git"))
        if gitdir is not None and os.path.lexists(os.path.join(gitdir, "HEAD")):
            return Path(gitdir)
        parent = os.path.dirname(here)
        try:
            if parent == here or os.stat(parent).st_dev != device:
                return None
        except OSError:
            return None
        here = parent


def head_commit(gitdir: Path) -> str | None:
    """The object id the HEAD of the repository at ``gitdir`` resolves to, through symbolic
    refs, loose ref files and ``packed-refs``; None when its branch has no commit yet. Every
    file is opened only when regular: raises ``NotRegularFile`` naming one that is not (a FIFO),
    ``OSError`` for one that cannot be read, ``ValueError`` for content git would not write."""
    common = common_dir(gitdir)
    name = "HEAD"
    for _ in range(_MAX_SYMREF_DEPTH):
        own = name == "HEAD" or name.startswith(_PER_WORKTREE_REFS)
        value = _loose_ref((gitdir if own else common) / name)
        if value is None:
            value = _packed_ref(common / "packed-refs", name)
        if value is None:
            return None
        if not value.startswith("ref:"):
            if _OID_HEX.fullmatch(value) is None:
                raise ValueError(f"{name} holds {value[:80]!r}, not an object id")
            return value
        name = value[len("ref:"):].strip()
        if not name.startswith("refs/") or not pygit2.reference_is_valid_name(name):
            raise ValueError(f"a symbolic ref names {name[:80]!r}, not a ref")
    raise ValueError(f"HEAD goes through more than {_MAX_SYMREF_DEPTH} symbolic refs")


def blocking_file(gitdir: Path) -> Path | None:
    """The first file of the repository at ``gitdir`` that git or libgit2 opens on the way to
    its config, HEAD and objects which is there but not a regular file (a FIFO: such an open
    waits for good; a device, a link to ``/dev/zero`` say: git reads ``info/attributes`` until
    memory runs out), or None."""
    common = common_dir(gitdir)
    odd = not_regular(gitdir / "commondir", gitdir / "HEAD", gitdir / "config",
                      gitdir / "config.worktree", common / "config", common / "config.worktree",
                      common / "packed-refs", common / "shallow",
                      common / "objects" / "info" / "alternates", common / "info" / "attributes")
    if odd is not None:
        return odd
    try:
        head_commit(gitdir)
    except NotRegularFile as exc:
        return exc.path
    except (OSError, ValueError):
        pass  # not a file that blocks: whoever reads the repository reports it
    return None


def objects_dir(repo: pygit2.Repository) -> Path:
    """The object directory of ``repo`` (its common dir's, for a linked worktree)."""
    return common_dir(Path(repo.path)).resolve() / "objects"


def common_dir(gitdir: Path) -> Path:
    """The git dir holding the objects, refs and ``info`` of the repository whose git dir is
    ``gitdir``: the one its ``commondir`` file names (a linked worktree's), else itself.
    Raises ``OSError`` when that file is there but cannot be read."""
    return Path(_common_dir(os.fspath(gitdir)))


def open_regular(path: Path | str) -> BinaryIO:
    """``path`` opened for reading when it is a regular file, else ``OSError``. Opened without
    blocking: a FIFO or a device in the user's repository (a hostile tree) must never stall a
    capture, as a plain ``open`` of a FIFO does until a writer comes."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotRegularFile(path)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: Path | str, limit: int | None = None) -> bytes:
    """The bytes of regular file ``path`` (``open_regular``); with ``limit``, ``FileTooLarge``
    when it holds more, never read past it (a sparse file of gigabytes costs nothing to make)."""
    with open_regular(path) as f:
        if limit is None:
            return f.read()
        data = f.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(path, limit)
    return data


def not_regular(*paths: Path) -> Path | None:
    """The first of ``paths`` that exists (followed through symlinks) and is not a regular
    file: git reading it (the user's config, say) would block on a FIFO for good."""
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode):
            return path
    return None


class NotRegularFile(OSError):
    """A file of the user's repository that is there but is not a regular file (a FIFO, a
    device, a directory): ``path``."""

    def __init__(self, path: Path | str) -> None:
        super().__init__(errno.EINVAL, f"{path} is not a regular file")
        self.path = Path(path)


class FileTooLarge(OSError):
    """A file over the most ``read_regular`` was to read of it."""

    def __init__(self, path: Path | str, limit: int) -> None:
        super().__init__(errno.EFBIG, f"{path} is over {limit} bytes")


def _loose_ref(path: Path) -> str | None:
    """The stripped text of loose ref file ``path``, or None when there is none (a directory
    there holds refs below the name, not the ref itself)."""
    try:
        if stat.S_ISDIR(os.stat(path).st_mode):
            return None
        return read_regular(path, _MAX_GIT_FILE_BYTES).decode("ascii").strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except (FileTooLarge, UnicodeDecodeError) as exc:
        raise ValueError(f"{path} is not a ref file ({exc})") from exc


def _packed_ref(packed_refs: Path, name: str) -> str | None:
    """The id ``packed_refs`` gives ``name``, or None (no such line, or no such file)."""
    try:
        text = read_regular(packed_refs)
    except FileNotFoundError:
        return None
    text += b"\n"  # a last line git always ends, written by hand without
    wanted = b" " + name.encode() + b"\n"
    at = text.find(wanted)
    while at >= 0:
        start = text.rfind(b"\n", 0, at) + 1
        if not text.startswith((b"#", b"^"), start):
            return text[start:at].decode("ascii", "replace")
        at = text.find(wanted, at + 1)
    return None


def _gitdir(dot_git: str) -> str | None:
    """``user_gitdir`` given the worktree's ``.git``: itself when a directory, the one a
    ``gitdir:`` file names, else None."""
    try:
        mode = os.stat(dot_git).st_mode
        if stat.S_ISDIR(mode):
            return dot_git
        if not stat.S_ISREG(mode):
            return None  # never opened: a device's open may do something
        # git refuses a larger one unread ("too large to be a .git file").
        text = read_regular(dot_git, _MAX_GIT_FILE_BYTES).decode("utf-8").strip()
    except (OSError, ValueError):
        return None  # no .git, one too large (OSError), or not UTF-8
    if not text.startswith("gitdir:"):
        return None
    named = text[len("gitdir:"):].strip()
    return named if os.path.isabs(named) else os.path.realpath(
        os.path.join(os.path.dirname(dot_git), named))


def _common_dir(gitdir: str) -> str:
    common = os.path.join(gitdir, "commondir")
    if not os.path.isfile(common):
        return gitdir
    named = read_regular(common, _MAX_GIT_FILE_BYTES).decode("utf-8").strip()
    return named if os.path.isabs(named) else os.path.join(gitdir, named)
