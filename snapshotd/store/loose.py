"""Loose objects the capture hot path writes without libgit2's extra work: its trees and its
commit, stored uncompressed inside their zlib streams, the commit formatted from its tree's id.
Why not libgit2 (it deflates every object, looks a commit's tree up before writing it and holds
the interpreter lock through the write): docs/performance.md, "snapshotd/store/loose.py".
``git gc`` packs these loose objects (with deltas) like any other.

Promises:
- ``write_stored`` (and ``StoredObjects.write``, bound to one object directory) writes a valid
  loose object (``git cat-file``, ``git fsck --strict``) whose zlib stream is made of stored
  blocks, framed here (``stored_zlib``), not by zlib at level 0: a copy and a checksum. The
  object appears whole or not at all (a temporary file under ``objects``, named as ``git gc``
  expires them, renamed into place); an object already loose is not written again. With
  ``fsync`` the file and its fan-out directory are fsynced before it returns, as libgit2 does.
- ``commit_bytes`` are the bytes libgit2's ``git_commit_create`` writes for the same tree,
  parents, signatures and message (no encoding header, message as given).
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import zlib
from pathlib import Path

import pygit2

from snapshotd.core import fsync_path, write_new

log = logging.getLogger("snapshotd.store")

# What ``git gc`` / ``git prune`` treats as a stale temporary object once past its grace.
_TMP_PREFIX = "tmp_obj_"
# A concurrent ``git gc`` may remove an empty fan-out directory between our mkdir and rename.
_TRIES = 5


class StoredObjects:
    """``write_stored`` into one object directory (the store's ``objects``)."""

    def __init__(self, objects: Path, fsync: bool) -> None:
        self.objects = objects
        self.fsync = fsync
        self._objects = os.fspath(objects)

    def write(self, kind: str, data: bytes) -> pygit2.Oid:
        return write_stored(self._objects, kind, data, self.fsync)


def write_stored(objects: Path | str, kind: str, data: bytes, fsync: bool) -> pygit2.Oid:
    """Write ``data`` as a loose object of ``kind`` ("tree", "blob", "commit") under the object
    directory ``objects``, its zlib stream uncompressed; return its id."""
    header = b"%s %d\0" % (kind.encode(), len(data))
    digest = hashlib.sha1(header, usedforsecurity=False)
    digest.update(data)
    hexid = digest.hexdigest()
    # Names as strings: this runs for every tree and commit of a capture, and pathlib's
    # joins cost more than the system calls.
    fan = os.path.join(objects, hexid[:2])
    final = os.path.join(fan, hexid[2:])
    if os.path.exists(final):
        return pygit2.Oid(hex=hexid)
    body = stored_zlib(header, data)
    for attempt in range(1, _TRIES + 1):
        try:
            _place(fan, final, hexid, body, fsync)
            break
        except FileNotFoundError:
            if attempt == _TRIES:
                raise
    return pygit2.Oid(hex=hexid)


def stored_zlib(header: bytes, data: bytes) -> bytes:
    """The zlib stream (RFC 1950) of ``header + data`` in stored deflate blocks (RFC 1951
    3.2.4: a byte for the final flag and type 00, the length and its complement, the bytes),
    ``header`` opening the first block, and the Adler-32 of all of it. ``header`` is shorter
    than a block."""
    view = memoryview(data)
    pieces: list[bytes | memoryview] = [_ZLIB_HEADER]
    at, lead = 0, header
    while True:
        chunk = view[at:at + _BLOCK - len(lead)]
        at += len(chunk)
        size = len(lead) + len(chunk)
        pieces += [struct.pack("<BHH", at >= len(data), size, size ^ 0xFFFF), lead, chunk]
        if at >= len(data):
            break
        lead = b""
    pieces.append(struct.pack(">I", zlib.adler32(data, zlib.adler32(header))))
    return b"".join(pieces)


# A zlib header: deflate with a 32 KB window, no dictionary, "fastest" level, check bits.
_ZLIB_HEADER = b"\x78\x01"
# The most a stored block holds.
_BLOCK = 0xFFFF


def commit_bytes(tree: str, parents: list[str], author: pygit2.Signature,
                 committer: pygit2.Signature, message: str) -> bytes:
    """The raw commit object ``git_commit_create`` writes for these fields."""
    lines = [f"tree {tree}"] + [f"parent {p}" for p in parents]
    lines.append(f"author {_signature(author)}")
    lines.append(f"committer {_signature(committer)}")
    return ("\n".join(lines) + "\n\n" + message).encode()


def _signature(sig: pygit2.Signature) -> str:
    sign = "-" if sig.offset < 0 else "+"
    hours, minutes = divmod(abs(sig.offset), 60)
    return f"{sig.name} <{sig.email}> {sig.time} {sign}{hours:02d}{minutes:02d}"


def _place(fan: str, final: str, hexid: str, body: bytes, fsync: bool) -> None:
    tmp = os.path.join(fan, f"{_TMP_PREFIX}{os.getpid()}_{hexid[2:10]}_{os.urandom(4).hex()}")
    created = False
    try:
        _write_tmp(tmp, body, fsync)
    except FileNotFoundError:
        # A new fan-out directory (or one a concurrent gc just removed, emptied): tried
        # first without it, as it is nearly always there. Never ``objects`` itself.
        try:
            os.mkdir(fan)
            created = True
        except FileExistsError:
            pass  # another capture made it meanwhile
        _write_tmp(tmp, body, fsync)
    try:
        os.replace(tmp, final)
    except BaseException:
        _remove(tmp)
        raise
    if fsync:
        fsync_path(fan)
        if created:
            fsync_path(os.path.dirname(fan))


def _write_tmp(tmp: str, body: bytes, fsync: bool) -> None:
    """Create the temporary object; a part written (a full disk) is removed again."""
    try:
        write_new(tmp, body, 0o444, sync=fsync)
    except FileNotFoundError:
        raise  # not created: no fan-out directory (the caller makes it)
    except BaseException:
        _remove(tmp)
        raise


def _remove(tmp: str) -> None:
    """Remove a temporary object a failed write left; the write's error is the one raised,
    and a file that cannot be removed is ``git gc``'s (its name is one gc expires)."""
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass  # never created
    except OSError as exc:
        log.warning("could not remove the temporary object %s: %s", tmp, exc)
