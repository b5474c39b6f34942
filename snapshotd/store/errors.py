"""How writing to the store fails: ``StoreError``, and the retry of object writes that a
concurrent ``git gc`` interrupted.

Promises: every store operation that cannot be done raises ``StoreError`` whose ``reason`` is a
gap reason (docs/durability.md lists them); a write the disk refused (full, over quota,
read-only, failing) is ``store-write-failed`` whether the error carries an errno or only
libgit2's message (``is_write_failure``), and ``inodes-exhausted`` when no inode was left
(``disk_reason``); ``odb_retry`` retries only the one failure that is
not a failure (an object fan-out directory removed under libgit2 by ``git gc``);
``changed_while_read`` tells a source file that changed size while libgit2 read it (or whose
size is not its content: ``SizeMismatch``) from a store write that failed, though libgit2
words them alike.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pygit2

# A libgit2 call that writes loose objects is tried this many times when a concurrent ``git gc``
# (prune-packed, prune) removed an object fan-out directory between libgit2 creating it and
# renaming the new object into it; libgit2 creates it again on the next try.
ODB_TRIES = 5

T = TypeVar("T")

# The gap reason of a capture whose objects, tree or commit the store could not write.
STORE_WRITE_FAILED = "store-write-failed"
# ... when the disk refused because its file system has no inode left (bytes to spare): ``df``
# shows free space, ``df -i`` none.
INODES_EXHAUSTED = "inodes-exhausted"
# The reasons a full disk under the store can surface as (the stat caches live beside it).
_DISK_REASONS = frozenset({STORE_WRITE_FAILED, "capture-failed", "scan-failed", "commit-failed"})

# libgit2 reports a failed write with the C library's message and no errno (its GitError has
# none): "failed to read file into stream: No space left on device" is the store's disk filling,
# not the source file. These are the messages of ENOSPC, EDQUOT, EROFS and EIO.
WRITE_FAILURE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO)
WRITE_FAILURE_MESSAGES = ("No space left on device", "Disk quota exceeded",
                          "Read-only file system", "Input/output error")


# What libgit2 says when the bytes it streamed from a file into the store were not the size it
# saw (``write_file_stream``): with an OS reason after it when a read or the store's write
# failed, with none when the file changed size while it was read.
_STREAM_SHORT = "failed to read file into stream"


class FileChanging(OSError):
    """A worktree file kept changing size while it was read (tried again each time): it keeps
    its last captured content in this capture and is listed as ``changing``. An ``OSError``, so
    a caller that skips unreadable files skips this one too."""

    def __init__(self, path: str, tries: int) -> None:
        super().__init__(f"{path} changed size while it was read, {tries} times in a row")
        self.path = path
        self.tries = tries


def changed_while_read(exc: BaseException) -> bool:
    """Whether libgit2 failed hashing a file only because the file changed size while it read
    it: its stream message with no OS reason (a failed read, or a failed write into the store,
    always carries one: "failed to read file into stream: No space left on device")."""
    return isinstance(exc, (pygit2.GitError, OSError)) and \
        str(exc).strip().rstrip(":").strip() == _STREAM_SHORT


class SizeMismatch(OSError):
    """A worktree file whose content is not the size its stat reports, read after read while
    the stat stood still (a ``/sys`` file, a file system that reports sizes larger than it
    holds): not a regular file's content to capture, and not the store's failure. An
    ``OSError``, so it is listed ``unreadable`` as a file that cannot be read is."""

    def __init__(self, path: str, size: int, read: int | None) -> None:
        got = ("an error" if read is None else f"more than {size}" if read > size
               else f"{read}")
        super().__init__(f"{path} reports {size} bytes but reading it gives {got}")
        self.path = path


class InvalidPath(OSError):
    """A worktree path git refuses to hold in a tree (``.git`` in any case as a component,
    ``.git`` followed by dots or spaces): the file is fine and so is the store, but no
    checkpoint can hold it. Listed ``invalid-path``."""

    def __init__(self, path: str) -> None:
        super().__init__(f"git refuses the path {path!r} in a tree (a .git name in another "
                         "case or spelling)")
        self.path = path


def refused_path(exc: BaseException) -> bool:
    """Whether libgit2 refused a path as one a tree cannot hold ("invalid path: '...'")."""
    return isinstance(exc, pygit2.GitError) and str(exc).startswith("invalid path")


class StoreError(Exception):
    """A store operation failed; ``reason`` is a short gap reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def is_write_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a disk refusing a write (full, over quota, read-only, failing), told
    by its errno or, for libgit2's errors that carry none, by its message."""
    if isinstance(exc, OSError) and exc.errno in WRITE_FAILURE_ERRNOS:
        return True
    text = str(exc)
    return any(message in text for message in WRITE_FAILURE_MESSAGES)


def disk_reason(reason: str, detail: str, where: Path) -> tuple[str, str]:
    """The gap reason and detail of a failed capture, told apart: ``inodes-exhausted`` when
    the disk refused a write (``No space left on device``) and the file system holding
    ``where`` (the store) has no free inode; else ``reason`` and ``detail`` unchanged."""
    if reason not in _DISK_REASONS or "No space left on device" not in detail:
        return reason, detail
    try:
        st = os.statvfs(where)
    except OSError:
        return reason, detail
    if st.f_files == 0 or st.f_favail > 0:  # f_files 0: a file system without inode counts
        return reason, detail
    return INODES_EXHAUSTED, (f"{detail} (the file system of {where} has no free inode, "
                              f"{st.f_bavail * st.f_frsize} bytes free: `df -i`)")


def odb_retry(call: Callable[..., T], *args: object) -> T:
    """``call(*args)``, tried again (up to ``ODB_TRIES`` times) while it fails only because a
    concurrent ``git gc`` removed the object directory it was renaming a new object into.
    pygit2 raises that as ``OSError`` (libgit2's OS-class errors) or ``GitError``."""
    for attempt in range(1, ODB_TRIES + 1):
        try:
            return call(*args)
        except (pygit2.GitError, OSError) as exc:
            text = str(exc)
            vanished = "No such file or directory" in text and "/objects/" in text
            if not vanished or attempt == ODB_TRIES:
                raise
    raise AssertionError("unreachable")
