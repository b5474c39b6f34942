"""Moving an attempt's loose ref to its next checkpoint without making or freeing a file.

libgit2 moves a loose ref by writing ``<ref>.lock`` and renaming it over the ref, holding the
interpreter lock throughout (0.15-0.2 ms of CPU here, every capture, under ``Store.lock``), and
each move makes one inode and frees another. On ext4 without a journal a freed inode is checked
again at every later inode allocation in its block group for one to five minutes (the kernel's
``recently_deleted`` skips inodes freed lately, reading each one's table entry): a daemon that
frees an inode per capture slows its own later file creations the busier it is.

How a move goes: each moved ref ``R`` keeps one spare file beside it, ``R.spare.lock`` (git and
libgit2 never take a name ending in ``.lock`` for a ref). To move R to commit C: write ``C\\n``
into the spare in place (41 bytes at offset 0, the size of every loose ref; fsynced in full
durability); hard-link R's file as ``R.old.lock`` (its inode stays linked); rename the spare
over R (atomic); rename ``R.old.lock`` to ``R.spare.lock``, the next move's spare; in full
durability fsync the directory. From a ref's second move on no inode is made or freed, and
every step is a plain system call that lets other threads run.

Promises:
- A reader (libgit2, the git CLI) finds R holding the old id or the new one; in full durability
  the new id and R's name are on disk before ``move`` returns, as with libgit2's own update.
- A spare's inode only ever holds ids of its own ref, and it is written only while it is linked
  once: after a power cut without fsync a ref may come back naming an older or a newer
  checkpoint of its own attempt (the cases start-up repairs, docs/durability.md), never another
  attempt's.
- Only a ref that exists as a loose file is moved here; otherwise ``move`` returns False and
  changes nothing (the caller creates the ref through libgit2, which makes its directories).
  git's ``R.lock`` is not taken, so only the daemon (holding the home's lock) moves refs this
  way, and nothing else writes attempt refs meanwhile (its ``gc`` leaves refs loose).
- A ref the store deletes takes its spare with it (``forget_spare``); at start-up
  ``recovery.remove_stale_locks`` removes, with every other stale lock file, what an
  interrupted move left (``.old.lock``) and a spare whose ref is gone (``spare_in_use``).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import stat
from pathlib import Path

from snapshotd.core.durable import fsync_path
from snapshotd.core.keys import OLD_SUFFIX, SPARE_SUFFIX

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
