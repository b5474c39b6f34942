"""Restore's filesystem writer: carry a plan out, confined to its target and atomic per file.

Owns ``apply_in_place`` (a ``Plan`` applied to a worktree: deletions, emptied directories,
writes staged and renamed into place), ``materialize`` (a checkpoint into a new or empty
directory), their walk (``DirWalker``) and durability barriers; ``restore`` decides, this only
writes. Promises (in full: docs/restore.md, "Internals"):
- Directories are entered ``O_NOFOLLOW | O_DIRECTORY`` relative to their parent, files created
  ``O_EXCL | O_NOFOLLOW``, renames and unlinks relative to a directory descriptor, the target
  from ``/`` without following links (``open_confined``): nothing is written through a symlink
  or outside the target. A symlink where a directory belongs is replaced; a file: ``Obstacle``.
- In place, each file switches atomically (temp name, ``rename``); a failure removes the temp
  files. The exec bit follows the checkpoint; a replaced file keeps its other bits. Up to
  ``SMALL_PLAN`` writes each file and directory is fsynced, above it two ``syncfs`` barriers.
- ``materialize`` into a new directory renames it in after a ``syncfs`` (whole or not at all);
  into an empty one, a failure takes back its own. Modes: git's, user's umask (``Modes``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import itertools
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pygit2

from snapshotd.core import (
    DEFAULT_UMASK,
    crash_point,
    process_umask,
    worktree_dir_mode,
    worktree_file_mode,
    write_all,
)
from snapshotd.features.restore.plan import MODE_EXEC, MODE_LINK, Plan, Write

log = logging.getLogger("snapshotd.restore")

Progress = Callable[[int, int], None]

# Up to this many writes, each file and directory is fsynced on its own; above it, two
# filesystem-wide barriers (before and after the renames) cost less than one fsync per file.
SMALL_PLAN = 64
TMP_PREFIX = b".snapshotd-restore-"
# Threads writing a large materialization (file creation dominates; see materialize).
MATERIALIZE_WORKERS = 4

_tmp_counter = itertools.count()


class Obstacle(Exception):
    """Something that is not a directory stands where the restore needs one."""


class Modes:
    """The modes a restore gives what it creates: git's (a file 0666, an executable 0777, a
    directory 0777) less the user's ``umask``. Created with them, then set explicitly where
    this process's umask (the daemon's 077) took bits off."""

    def __init__(self, umask: int = DEFAULT_UMASK) -> None:
        self.file = worktree_file_mode(umask, False)
        self.exe = worktree_file_mode(umask, True)
        self.dir = worktree_dir_mode(umask)
        ours = process_umask()
        self.fix_files = bool((self.file | self.exe) & ours)
        self.fix_dirs = bool(self.dir & ours)

    def set_dir(self, fd: int) -> None:
        """Give the directory at ``fd``, just created, ``self.dir`` (an inherited setgid bit
        stays, as with mkdir under the user's own umask)."""
        if self.fix_dirs:
            os.fchmod(fd, self.dir | (os.fstat(fd).st_mode & stat.S_ISGID))


def apply_in_place(repo: pygit2.Repository, root: Path, plan: Plan,
                   progress: Progress | None, modes: Modes | None = None) -> None:
    """Apply ``plan`` to the worktree at ``root`` (the caller holds the worktree lock).

    Raises ``OSError`` or ``Obstacle`` when it stops part-way; the files renamed so far stay.
    """
    kept = {p for p, _ in plan.kept}
    writes = [w for w in plan.writes if w.path not in kept]
    run = _InPlace(repo, root, writes, progress, total=len(writes) + len(plan.deletes),
                   modes=modes or Modes())
    try:
        # Deletions first, so directories can replace files and links (and vice versa).
        emptied = run.delete(plan.deletes)
        run.remove_emptied(emptied)
        run.stage()
        run.rename_staged()
        run.sync_touched()
    finally:
        run.close()
    _tick(progress, run.total, run.total)


def materialize(reader: Callable[[], pygit2.Repository], target: Path, entries: list[Write],
                progress: Progress | None, timings: dict[str, float],
                modes: Modes | None = None) -> None:
    """Write every entry under ``target``, a new directory (made whole, by rename) or an existing
    empty one; ``reader`` opens a store handle for each writing thread.

    ``target`` is a resolved absolute path: it is entered from ``/`` without following links
    (``open_confined``), so a component that has become a link since raises ``OSError``."""
    modes = modes or Modes()
    try:
        root_fd = open_confined(target, create=False)
    except FileNotFoundError:
        _materialize_new(reader, target, entries, progress, timings, modes)
        return
    try:
        _write_all(reader, root_fd, entries, progress, timings, modes)
    except BaseException:
        # Into an existing empty directory: take back what we created, leave it empty.
        for top in sorted({w.path.partition(b"/")[0] for w in entries}):
            remove_entry(root_fd, top, target / os.fsdecode(top))
        raise
    finally:
        os.close(root_fd)


def open_confined(path: Path, *, create: bool, modes: Modes | None = None) -> int:
    """A descriptor on the directory at absolute ``path``, entered from ``/`` one component at a
    time with ``O_NOFOLLOW``: a component that is a link raises ``OSError`` (``ELOOP``), one that
    is a file ``NotADirectoryError``; a missing one is created when ``create`` (with
    ``modes.dir``), else ``FileNotFoundError``. The caller closes the descriptor."""
    raw = os.fsencode(path)
    if not raw.startswith(b"/"):
        raise ValueError(f"{path} is not an absolute path")
    fd = os.open(b"/", DirWalker.FLAGS)
    try:
        for part in raw.split(b"/"):
            if part in (b"", b"."):
                continue
            if part == b"..":
                raise ValueError(f"{path} is not a resolved path")
            try:
                child = os.open(part, DirWalker.FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                made = _mkdir(part, fd)
                child = os.open(part, DirWalker.FLAGS, dir_fd=fd)
                if made:
                    (modes or Modes()).set_dir(child)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def remove_entry(dir_fd: int, name: bytes, shown: Path) -> None:
    """Remove the file, link or directory tree ``name`` of ``dir_fd`` that a failed restore
    created (never following a link); what cannot be removed is logged at warning."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if stat.S_ISDIR(st.st_mode):
            shutil.rmtree(name, dir_fd=dir_fd)
        else:
            os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        return
    except OSError as exc:
        log.warning("restore: could not remove %s after a failed restore: %s", shown, exc)


class DirWalker:
    """Directory descriptors below a root, opened one component at a time with ``O_NOFOLLOW``.

    Keeps the chain of the last directory open, so paths processed in sorted order reuse it.
    """

    FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

    def __init__(self, root_fd: int, modes: Modes | None = None) -> None:
        self.root_fd = root_fd
        self.modes = modes or Modes()
        self.chain: list[tuple[bytes, int]] = []
        self.touched: set[bytes] = set()

    def open_dir(self, rel: bytes, *, create: bool) -> int | None:
        """A descriptor on directory ``rel`` (``b""`` is the root), or None when it is absent
        (or not a directory) and ``create`` is false. Owned by the walker: do not close it."""
        parts = rel.split(b"/") if rel else []
        n = 0
        while n < len(self.chain) and n < len(parts) and self.chain[n][0] == parts[n]:
            n += 1
        self._truncate(n)
        fd = self.chain[-1][1] if self.chain else self.root_fd
        for i in range(n, len(parts)):
            child = self._child(fd, parts[i], b"/".join(parts[:i + 1]), create)
            if child is None:
                return None
            self.chain.append((parts[i], child))
            fd = child
        return fd

    def close(self) -> None:
        self._truncate(0)

    def _truncate(self, n: int) -> None:
        while len(self.chain) > n:
            os.close(self.chain.pop()[1])

    def _child(self, parent: int, name: bytes, rel: bytes, create: bool) -> int | None:
        try:
            return os.open(name, self.FLAGS, dir_fd=parent)
        except FileNotFoundError:
            if not create:
                return None
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            if not create:
                return None
            st = os.stat(name, dir_fd=parent, follow_symlinks=False)
            if not stat.S_ISLNK(st.st_mode):
                raise Obstacle(f"{os.fsdecode(rel)!r} is a file where the checkpoint has a "
                               "directory") from None
            # A symlink where the checkpoint has a directory: replace the link itself.
            os.unlink(name, dir_fd=parent)
        made = _mkdir(name, parent)
        self.touched.add(rel.rpartition(b"/")[0])
        fd = os.open(name, self.FLAGS, dir_fd=parent)
        if made:
            try:
                self.modes.set_dir(fd)
            except OSError:
                os.close(fd)
                raise
        return fd


# -- in place ------------------------------------------------------------------------------------


class _InPlace:
    """One in-place application: its descriptors, progress and the temp files not yet renamed."""

    def __init__(self, repo: pygit2.Repository, root: Path, writes: list[Write],
                 progress: Progress | None, *, total: int, modes: Modes) -> None:
        self.repo = repo
        self.modes = modes
        self.writes = writes
        self.progress = progress
        self.total = total
        self.done = 0
        self.small = len(writes) <= SMALL_PLAN
        self.root_fd = open_confined(root, create=False)
        self.walker = DirWalker(self.root_fd, modes)
        self.staged: list[tuple[bytes, bytes, bytes]] = []  # (dir, temp name, final name)

    def delete(self, deletes: list[bytes]) -> set[bytes]:
        """Unlink the captured files the checkpoint lacks; returns every directory above them."""
        emptied: set[bytes] = set()
        for path in sorted(deletes, reverse=True):
            parent, _, name = path.rpartition(b"/")
            fd = self.walker.open_dir(parent, create=False)
            if fd is not None:
                try:
                    os.unlink(name, dir_fd=fd)
                    self.walker.touched.add(parent)
                except FileNotFoundError:
                    pass  # already gone: the state the plan wants
                except (IsADirectoryError, PermissionError) as exc:
                    if exc.errno not in (errno.EISDIR, errno.EPERM):
                        raise
                    # Captured as a file, a directory now: it is not ours to remove.
            emptied.update(_ancestors(path))
            self._step()
        self.walker.close()
        return emptied

    def remove_emptied(self, emptied: set[bytes]) -> None:
        """Directories the deletions emptied go too (what git does), deepest first; those the
        writes need stay."""
        needed = {p for w in self.writes for p in _ancestors(w.path)}
        for d in sorted(emptied - needed, key=lambda p: p.count(b"/"), reverse=True):
            parent, _, name = d.rpartition(b"/")
            fd = self.walker.open_dir(parent, create=False)
            if fd is None:
                continue
            try:
                os.rmdir(name, dir_fd=fd)
                self.walker.touched.add(parent)
            except OSError as exc:
                if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT, errno.ENOTDIR):
                    raise
        self.walker.close()

    def stage(self) -> None:
        """Write every file under a temporary name in its own directory."""
        for w in self.writes:
            parent, _, name = w.path.rpartition(b"/")
            fd = self.walker.open_dir(parent, create=True)
            assert fd is not None
            tmp = _temp_name()
            self.staged.append((parent, tmp, name))  # first: a half-written temp is removed
            _write_entry(self.repo, fd, tmp, w, self.modes, fsync=self.small, like=name)
            self._step()
        if self.staged and not self.small:
            _sync_fs(self.root_fd)  # the data of every temp file is durable before any rename

    def rename_staged(self) -> None:
        """Rename into place: each file switches from old to new content atomically."""
        for renamed, (parent, tmp, name) in enumerate(self.staged):
            if renamed == len(self.staged) // 2:
                crash_point("restore-mid")  # test seam: die half-way through the renames
            fd = self.walker.open_dir(parent, create=False)
            if fd is None:
                raise Obstacle(f"directory {os.fsdecode(parent)!r} vanished during the restore")
            try:
                os.rename(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
            except OSError as exc:
                if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                    raise
                raise Obstacle(f"{os.fsdecode(parent + b'/' + name if parent else name)!r} "
                               "became a directory during the restore") from exc
            self.walker.touched.add(parent)
        self.staged.clear()
        self.walker.close()

    def sync_touched(self) -> None:
        """Make the renames durable: every touched directory, or one filesystem barrier."""
        if self.small:
            for d in sorted(self.walker.touched):
                fd = self.walker.open_dir(d, create=False)
                if fd is not None:
                    os.fsync(fd)
        elif self.walker.touched:
            _sync_fs(self.root_fd)

    def close(self) -> None:
        """Remove the temp files of a failure part-way, close every descriptor."""
        for parent, tmp, _name in self.staged:
            where = os.fsdecode(parent + b"/" + tmp if parent else tmp)
            try:
                fd = self.walker.open_dir(parent, create=False)
                if fd is None:
                    log.warning("restore: the directory of the temporary file %s is gone or no "
                                "longer a directory; the file is left where it went", where)
                    continue
                os.unlink(tmp, dir_fd=fd)
            except FileNotFoundError:
                pass  # never created: the failure came before its write
            except (OSError, Obstacle) as exc:
                log.warning("restore: could not remove the temporary file %s: %s", where, exc)
        self.staged.clear()
        self.walker.close()
        os.close(self.root_fd)

    def _step(self) -> None:
        self.done += 1
        _tick(self.progress, self.done, self.total)


# -- into a directory ----------------------------------------------------------------------------


def _materialize_new(reader: Callable[[], pygit2.Repository], target: Path,
                     entries: list[Write], progress: Progress | None,
                     timings: dict[str, float], modes: Modes) -> None:
    """Build ``target`` under a hidden sibling name and rename it into place once durable."""
    parent_fd = open_confined(target.parent, create=True, modes=modes)
    try:
        name = os.fsencode(target.name)
        staging = b".%s.snapshotd-%d-%d" % (name, os.getpid(), next(_tmp_counter))
        os.mkdir(staging, 0o777, dir_fd=parent_fd)
        try:
            root_fd = os.open(staging, DirWalker.FLAGS, dir_fd=parent_fd)
            try:
                modes.set_dir(root_fd)
                _write_all(reader, root_fd, entries, progress, timings, modes)
            finally:
                os.close(root_fd)
            # The directory appears whole, or not at all.
            os.rename(staging, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
        except BaseException:
            remove_entry(parent_fd, staging, target.parent / os.fsdecode(staging))
            raise
        os.fsync(parent_fd)
    finally:
        os.close(parent_fd)


def _write_all(reader: Callable[[], pygit2.Repository], root_fd: int, entries: list[Write],
               progress: Progress | None, timings: dict[str, float], modes: Modes) -> None:
    """Write every entry straight to its name in the empty directory ``root_fd``, then one sync
    barrier.

    Large trees are written by several threads, each on its own contiguous run of the sorted
    entries (so mostly its own directories): file creation is the cost, and the kernel runs
    creations in different directories in parallel while the GIL is released."""
    total = len(entries)
    workers = min(MATERIALIZE_WORKERS, max(1, total // 1000))
    chunks = [entries[i * total // workers:(i + 1) * total // workers] for i in range(workers)]
    done = [0] * workers
    lock = threading.Lock()

    def write_chunk(k: int) -> None:
        # A repository object per thread: libgit2 objects are not shared across threads here.
        repo = reader()
        walker = DirWalker(root_fd, modes)
        try:
            for i, w in enumerate(chunks[k], 1):
                parent, _, name = w.path.rpartition(b"/")
                fd = walker.open_dir(parent, create=True)
                assert fd is not None
                _write_entry(repo, fd, name, w, modes, fsync=False)
                if progress is not None and i % 200 == 0:
                    with lock:
                        done[k] = i
                        _tick(progress, sum(done) // 200 * 200, total)
        finally:
            walker.close()

    if workers == 1:
        write_chunk(0)
    else:
        with ThreadPoolExecutor(workers, thread_name_prefix="snapshotd-restore") as pool:
            for future in [pool.submit(write_chunk, k) for k in range(workers)]:
                future.result()
    synced = time.perf_counter()
    _sync_fs(root_fd)
    timings["sync_ms"] = round((time.perf_counter() - synced) * 1000, 3)
    _tick(progress, total, total)


# -- helpers -------------------------------------------------------------------------------------


def _write_entry(repo: pygit2.Repository, dir_fd: int, name: bytes, w: Write, modes: Modes, *,
                 fsync: bool, like: bytes | None = None) -> None:
    """Create ``name`` in ``dir_fd`` as the checkpoint's blob or link (never following links):
    a new file gets ``modes``, one replacing a regular file keeps that file's bits."""
    data = w.data if w.data is not None else repo.odb.read(w.oid)[1]
    if w.mode == MODE_LINK:
        os.symlink(data, name, dir_fd=dir_fd)
        return
    mode = modes.exe if w.mode == MODE_EXEC else modes.file
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode, dir_fd=dir_fd)
    try:
        kept = like is not None and _keep_permissions(fd, dir_fd, like,
                                                      executable=w.mode == MODE_EXEC)
        if not kept and modes.fix_files:
            os.fchmod(fd, mode)
        write_all(fd, data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)


def _keep_permissions(fd: int, dir_fd: int, name: bytes, *, executable: bool) -> bool:
    """A file that replaces an existing regular file keeps its permission bits (as an editor
    would); only the exec bits follow the checkpoint, where read is allowed (as git does).
    False when there is no such file (the new one then gets the restore's ``Modes``)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False
    perms = stat.S_IMODE(st.st_mode) & 0o7777 & ~0o111
    if executable:
        perms |= (perms & 0o444) >> 2
    os.fchmod(fd, perms)
    return True


def _mkdir(name: bytes, parent: int) -> bool:
    """Create directory ``name`` in ``parent``; False when it was there already (made by
    someone else since the open: entering it checks what it is, and its mode is theirs)."""
    try:
        os.mkdir(name, 0o777, dir_fd=parent)
    except FileExistsError:
        return False
    return True


def _ancestors(path: bytes) -> Iterator[bytes]:
    parent = path.rpartition(b"/")[0]
    while parent:
        yield parent
        parent = parent.rpartition(b"/")[0]


def _temp_name() -> bytes:
    return TMP_PREFIX + f"{os.getpid()}-{next(_tmp_counter)}-{os.urandom(3).hex()}.tmp".encode()


def _tick(progress: Progress | None, done: int, total: int) -> None:
    if progress is not None and (done % 200 == 0 or done == total):
        progress(done, total)


_libc: ctypes.CDLL | bool | None = None


def _sync_fs(fd: int) -> None:
    """Flush the filesystem holding ``fd`` (``syncfs``), falling back to a global ``sync``."""
    global _libc
    if _libc is None:
        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        except OSError:
            _libc = False
    syncfs = getattr(_libc, "syncfs", None) if _libc else None
    if syncfs is None or syncfs(fd) != 0:
        os.sync()
