"""Moving an attempt's loose ref to its next checkpoint without making or freeing a file.

Why: libgit2's move (``<ref>.lock`` renamed over the ref) holds the interpreter lock, and makes
an inode and frees one per capture, which ext4 without a journal makes costly (docs/durability.md,
"Loose refs moved in place"). Each moved ref ``R`` keeps a spare ``R.spare.lock``: a move writes
the new id into it in place, hard-links R as ``R.old.lock``, renames the spare over R and
``R.old.lock`` to the next spare (fsyncs in full durability).

Promises: a reader (libgit2, git) finds R holding the old id or the new one; in full durability
the new id and R's name are on disk before ``move`` returns. A spare only holds ids of its own
ref, written only while linked once: after a cut R may name an older or newer checkpoint of its
own attempt, never another's. Only a ref that is a loose file is moved (else ``move`` returns
False, changing nothing); git's ``R.lock`` is not taken, so only the daemon, under the home lock,
moves refs so. A deleted ref takes its spare (``forget_spare``); start-up's
``recovery.remove_stale_locks`` removes ``.old.lock`` leftovers and orphan spares (``spare_in_use``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from pathlib import Path

from snapshotd.core import OLD_SUFFIX, SPARE_SUFFIX, fsync_path

log = logging.getLogger("snapshotd.store")

# A loose ref: 40 hex digits and a newline (SHA-1 stores).
REF_BYTES = 41


class LooseRefMover:
    """Moves existing loose refs of one store, each through a spare file of its own."""

    def __init__(self, store_path: Path, *, fsync: bool) -> None:
        self.root = store_path
        self.fsync = fsync

    def move(self, ref: str, oid: str) -> bool:
        """Point the loose ref ``ref`` (``refs/…``, a file under the store) at ``oid``. False,
        with nothing changed, when ``ref`` is not a loose ref file. Raises ``OSError`` when the
        disk refuses a step before the ref moved (it then still holds its old id)."""
        data = f"{oid}\n".encode()
        if len(data) != REF_BYTES:
            raise ValueError(f"not a full object id: {oid!r}")
        target = self.root / ref
        spare = target.with_name(target.name + SPARE_SUFFIX)
        old = target.with_name(target.name + OLD_SUFFIX)
        try:
            _link_fresh(target, old)
        except FileNotFoundError:
            return False  # no loose ref (none yet, or only packed): libgit2 creates it
        try:
            _write_spare(spare, data, self.fsync)
            os.rename(spare, target)
        except OSError:
            # R still has its old inode, linked twice: dropping the second name frees nothing.
            with contextlib.suppress(FileNotFoundError):
                os.unlink(old)
            raise
        try:
            os.rename(old, spare)
        except OSError as exc:  # the ref moved; its next move makes a new spare
            log.warning("cannot keep %s as the spare of %s: %s", old.name, ref, exc)
        if self.fsync:
            fsync_path(target.parent)
        return True


def forget_spare(store_path: Path, ref: str) -> None:
    """Remove ``ref``'s spare (called as the store deletes the ref: nothing of it stays)."""
    target = store_path / ref
    for suffix in (SPARE_SUFFIX, OLD_SUFFIX):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(target.with_name(target.name + suffix))


def spare_in_use(name: str, siblings: set[str]) -> bool:
    """Whether ``name`` is the spare of a ref among ``siblings`` (the names in its directory):
    the one file of a move that outlives it. Anything else named ``*.lock`` under ``refs/`` is
    what an interrupted write left, an interrupted move's ``<ref>.old.lock`` included."""
    return name.endswith(SPARE_SUFFIX) and name[:-len(SPARE_SUFFIX)] in siblings


def _link_fresh(target: Path, name: Path) -> None:
    """Hard-link ``target`` as ``name``, replacing a ``name`` an interrupted move left."""
    try:
        os.link(target, name, follow_symlinks=False)
    except FileExistsError:
        os.unlink(name)
        os.link(target, name, follow_symlinks=False)


def _write_spare(spare: Path, data: bytes, fsync: bool) -> None:
    """``data`` into ``spare`` in place; a spare linked elsewhere or of another size than a
    loose ref (never expected: a crash's leftover) is replaced by a new file first."""
    try:
        fd = os.open(spare, os.O_WRONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
    except FileNotFoundError:
        fd = None
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.EISDIR):
            raise
        os.unlink(spare)  # a symlink put there (a directory makes unlink fail: raised)
        fd = None
    if fd is not None:
        st = os.fstat(fd)
        if st.st_nlink != 1 or st.st_size != REF_BYTES or not stat.S_ISREG(st.st_mode):
            os.close(fd)
            os.unlink(spare)
            fd = None
    if fd is None:
        fd = os.open(spare, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        if os.pwrite(fd, data, 0) != len(data):
            raise OSError(errno.EIO, f"short write to {spare}")
        if fsync:
            os.fdatasync(fd)
    finally:
        os.close(fd)
