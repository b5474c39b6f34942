"""A directory kept equal to one checkpoint's tree, moved from tree to tree by their diff.

Owns ``ScratchTree`` (bisect's scratch directory, ``checkout``'s target) and ``remove_tree``.
Promises:
- ``move_to(tree)`` writes only the entries in which the two trees differ (a subtree whose id
  is unchanged is never entered): changed and added files written, removed ones deleted, modes
  set, symlinks created as symlinks; the cost follows the change, not the tree.
- ``sweep()`` first undoes what a command run in it did: files it changed or removed come back,
  files and directories it added go (one ``lstat`` per entry, no file read).
- Every directory is entered by a descriptor opened with ``O_NOFOLLOW`` from its parent's: no
  write follows a symlink, none leaves the root. Nothing here reads or writes the store but
  its objects (a read handle); ``.git``, gitlinks and names no file system should hold
  (``..``, ``/``, NUL) are never written and are listed in ``skipped`` with their reason.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import NamedTuple

import pygit2

DIR_MODE, FILE_MODE, EXEC_MODE, LINK_MODE, GITLINK_MODE = 0o040000, 0o100644, 0o100755, \
    0o120000, 0o160000
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CREATE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Modes(NamedTuple):
    """The permission bits of what is written: a file, an executable file, a directory."""

    file: int
    exe: int
    dir: int


# The scratch directory sits in a 0700 directory of its own: git's modes, unmasked.
SCRATCH_MODES = Modes(0o644, 0o755, 0o755)
# ``snapshotd checkout`` without ``--writable``.
CHECKOUT_MODES = Modes(0o444, 0o555, 0o555)


def writable_modes(umask: int) -> Modes:
    """``checkout --writable``: git's modes under the caller's umask."""
    return Modes(0o666 & ~umask, 0o777 & ~umask, 0o777 & ~umask)


class Entry(NamedTuple):
    """What the model holds for one written path: git mode, object id, its ``lstat`` signature
    when written (None for a directory)."""

    mode: int
    oid: pygit2.Oid
    sig: tuple | None


class ScratchTree:
    """``root`` (an existing, empty directory) kept equal to one tree of ``repo``."""

    def __init__(self, repo: pygit2.Repository, root: Path, modes: Modes = SCRATCH_MODES) -> None:
        self.repo = repo
        self.root = root
        self.modes = modes
        self.tree: pygit2.Tree | None = None
        self.model: dict[bytes, Entry] = {}
        self.skipped: dict[bytes, str] = {}
        self.counts = {"written": 0, "deleted": 0}
        self.root_fd = os.open(root, _OPEN_DIR)
        self.root_id = _ident(os.fstat(self.root_fd))
        self.root_mode = stat.S_IMODE(os.fstat(self.root_fd).st_mode)

    def close(self) -> None:
        if self.root_fd >= 0:
            os.close(self.root_fd)
            self.root_fd = -1

    def move_to(self, tree_id: str) -> dict:
        """Make the directory hold tree ``tree_id``: what was written and deleted."""
        new = self.repo[tree_id].peel(pygit2.Tree)
        self.counts = {"written": 0, "deleted": 0}
        self._apply(self.root_fd, b"", self.tree, new)
        self.tree = new
        return dict(self.counts)

    def finish_root(self) -> None:
        """Give the root directory itself the directory mode (a checkout's last step)."""
        os.fchmod(self.root_fd, self.modes.dir)

    # -- moving --------------------------------------------------------------------------------

    def _apply(self, fd: int, prefix: bytes, old: pygit2.Tree | None,
               new: pygit2.Tree | None) -> None:
        olds = {e.raw_name: e for e in old} if old is not None else {}
        news = {e.raw_name: e for e in new} if new is not None else {}
        for name, oe in olds.items():
            if name not in news:
                self._remove(fd, prefix + name, name, oe.filemode, oe.id)
        for name, ne in news.items():
            oe = olds.get(name)
            if oe is not None and oe.id == ne.id and oe.filemode == ne.filemode:
                continue
            path = prefix + name
            if oe is not None and oe.filemode == DIR_MODE == ne.filemode \
                    and path not in self.skipped:
                sub = os.open(name, _OPEN_DIR, dir_fd=fd)
                try:
                    self._apply(sub, path + b"/", self.repo[oe.id], self.repo[ne.id])
                finally:
                    os.close(sub)
                continue
            if oe is not None:
                self._remove(fd, path, name, oe.filemode, oe.id)
            self._create(fd, path, name, ne.filemode, ne.id)

    def _create(self, fd: int, path: bytes, name: bytes, mode: int, oid: pygit2.Oid) -> None:
        reason = _refused(name, mode)
        if reason:
            self.skipped[path] = reason
            return
        if mode == DIR_MODE:
            os.mkdir(name, 0o700, dir_fd=fd)
            sub = os.open(name, _OPEN_DIR, dir_fd=fd)
            try:
                self.model[path] = Entry(mode, oid, None)
                self._apply(sub, path + b"/", None, self.repo[oid])
                os.fchmod(sub, self.modes.dir)
            finally:
                os.close(sub)
            return
        data = self.repo[oid].data
        if mode == LINK_MODE:
            os.symlink(data, name, dir_fd=fd)
            st = os.lstat(name, dir_fd=fd)
        else:
            out = os.open(name, _CREATE, 0o600, dir_fd=fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(out, view):]
                os.fchmod(out, self.modes.exe if mode == EXEC_MODE else self.modes.file)
                st = os.fstat(out)
            finally:
                os.close(out)
        self.model[path] = Entry(mode, oid, _sig(st))
        self.counts["written"] += 1

    def _remove(self, fd: int, path: bytes, name: bytes, mode: int, oid: pygit2.Oid) -> None:
        if self.skipped.pop(path, None) is not None:
            return
        if mode == DIR_MODE:
            self._forget(path, self.repo[oid])
            remove_at(fd, name)
        else:
            self.model.pop(path, None)
            remove_at(fd, name)
        self.counts["deleted"] += 1

    def _forget(self, path: bytes, tree: pygit2.Tree) -> None:
        """Drop a removed subtree's paths from the model (its cost follows the subtree)."""
        self.model.pop(path, None)
        for e in tree:
            sub = path + b"/" + e.raw_name
            self.skipped.pop(sub, None)
            if e.filemode == DIR_MODE and sub in self.model:
                self._forget(sub, self.repo[e.id])
            else:
                self.model.pop(sub, None)

    # -- undoing a command's writes ------------------------------------------------------------

    def sweep(self) -> dict:
        """Bring the directory back to the tree after a command ran in it: what was repaired
        (changed or removed entries written again) and removed (entries it added)."""
        if self.tree is None:
            return {"repaired": 0, "removed": 0}
        if _ident(_lstat_or_none(self.root)) != self.root_id:
            return self._rebuild()
        if stat.S_IMODE(os.fstat(self.root_fd).st_mode) != self.root_mode:
            os.fchmod(self.root_fd, self.root_mode)
        present: set[bytes] = set()
        fixes: list[bytes] = []
        removed = self._sweep_dir(self.root_fd, b"", present, fixes)
        fixes.extend(p for p in self.model if p not in present)
        for path in sorted(set(fixes)):
            self._rewrite(path)
        return {"repaired": len(set(fixes)), "removed": removed}

    def _sweep_dir(self, fd: int, prefix: bytes, present: set[bytes], fixes: list[bytes]) -> int:
        removed = 0
        with os.scandir(fd) as entries:
            found = [(os.fsencode(e.name), e.stat(follow_symlinks=False)) for e in entries]
        for name, st in found:
            path = prefix + name
            want = self.model.get(path)
            if want is None:
                remove_at(fd, name)
                removed += 1
                continue
            if want.mode == DIR_MODE and stat.S_ISDIR(st.st_mode):
                present.add(path)
                sub = _open_dir_fixing(fd, name)
                try:
                    if stat.S_IMODE(st.st_mode) != self.modes.dir:
                        os.fchmod(sub, self.modes.dir)
                    removed += self._sweep_dir(sub, path + b"/", present, fixes)
                finally:
                    os.close(sub)
            elif want.mode != DIR_MODE and _sig(st) == want.sig:
                present.add(path)
            else:
                remove_at(fd, name)
        return removed

    def _rewrite(self, path: bytes) -> None:
        """Write the model's entry at ``path`` again (its parent directories are in place:
        ``sweep`` rewrites in path order, a directory before what it holds)."""
        entry = self.model[path]
        parent, _, name = path.rpartition(b"/")
        fd = self._open_parent(parent)
        try:
            if entry.mode == DIR_MODE:
                os.mkdir(name, 0o700, dir_fd=fd)
                sub = os.open(name, _OPEN_DIR, dir_fd=fd)
                os.fchmod(sub, self.modes.dir)
                os.close(sub)
            else:
                self._create(fd, path, name, entry.mode, entry.oid)
        finally:
            if fd != self.root_fd:
                os.close(fd)

    def _open_parent(self, parent: bytes) -> int:
        fd = self.root_fd
        for part in parent.split(b"/") if parent else []:
            sub = os.open(part, _OPEN_DIR, dir_fd=fd)
            if fd != self.root_fd:
                os.close(fd)
            fd = sub
        return fd

    def _rebuild(self) -> dict:
        """The command removed or replaced the root itself: make it again, whole."""
        tree = self.tree
        self.close()
        if os.path.lexists(self.root):
            remove_tree(self.root)
        os.mkdir(self.root, 0o700)
        self.root_fd = os.open(self.root, _OPEN_DIR)
        self.root_id = _ident(os.fstat(self.root_fd))
        self.model.clear()
        self.skipped.clear()
        self.tree = None
        assert tree is not None
        self.move_to(str(tree.id))
        return {"repaired": len(self.model), "removed": 0, "rebuilt": True}


def remove_tree(path: Path) -> None:
    """Remove ``path`` and everything under it without following a symlink, making read-only
    directories writable first (what a command or a checkout left)."""
    parent = os.open(path.parent, _OPEN_DIR)
    try:
        remove_at(parent, os.fsencode(path.name))
    finally:
        os.close(parent)


def remove_at(fd: int, name: bytes) -> None:
    """Remove the entry ``name`` of directory ``fd``, a directory recursively; never through a
    symlink. A missing entry is not an error."""
    try:
        sub = _open_dir_fixing(fd, name)
    except FileNotFoundError:
        return
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
            raise
        try:
            os.unlink(name, dir_fd=fd)
        except FileNotFoundError:
            pass
        return
    try:
        os.fchmod(sub, 0o700)
        with os.scandir(sub) as entries:
            names = [os.fsencode(e.name) for e in entries]
        for child in names:
            remove_at(sub, child)
    finally:
        os.close(sub)
    os.rmdir(name, dir_fd=fd)


def _open_dir_fixing(fd: int, name: bytes) -> int:
    """``name`` opened as a directory, never through a symlink; one a command made unreadable
    (mode 000) is given back its owner's bits first."""
    try:
        return os.open(name, _OPEN_DIR, dir_fd=fd)
    except PermissionError:
        if not stat.S_ISDIR(os.lstat(name, dir_fd=fd).st_mode):
            raise
        # A directory (checked just above, not a link): ours to open again.
        os.chmod(name, 0o700, dir_fd=fd)
        return os.open(name, _OPEN_DIR, dir_fd=fd)


def _refused(name: bytes, mode: int) -> str:
    """Why an entry is not written, or ''."""
    if name in (b"", b".", b"..") or b"/" in name or b"\0" in name:
        return "invalid-name"
    if name == b".git":
        return "git-dir"
    if mode == GITLINK_MODE:
        return "gitlink"
    if mode not in (DIR_MODE, FILE_MODE, EXEC_MODE, LINK_MODE):
        return "unknown-mode"
    return ""


def _sig(st: os.stat_result) -> tuple:
    return (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _ident(st: os.stat_result | None) -> tuple | None:
    return None if st is None or not stat.S_ISDIR(st.st_mode) else (st.st_dev, st.st_ino)


def _lstat_or_none(path: Path) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except FileNotFoundError:
        return None
