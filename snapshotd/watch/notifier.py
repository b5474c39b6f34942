"""Where the watcher's events come from: a lossless inotify reader on Linux, watchfiles elsewhere.

Owns the kernel watches of one notifier (a set of root directories) and the translation of
events into ``(change, path)``: ``ADDED``, ``MODIFIED``, ``DELETED`` with an absolute path, and
``OVERFLOW`` naming each root when events were lost. Why our own reader (``watchfiles`` can drop
an event without a sign): docs/watcher.md. Promises of ``InotifyNotifier``, in full there:
- ``read()`` returns every event the kernel queued for these watches, in queue order, once (an
  overflow: every root as ``OVERFLOW``). Symlinks are never followed, ``.git`` never watched; a
  new directory is watched when its ``ADDED`` (the signal to crawl it) is read, one whose
  attributes change is watched again and reported ``ADDED``, a gone root is ``DELETED``; names
  that are not UTF-8 come back with surrogate escapes.
- Watching fails loudly: an unwatchable root or the watch limit raises ``OSError``
  (``WatchLimitError`` names the limit and what to set; all notifiers share ``set_max_watches``);
  a vanished subdirectory is skipped. ``WatchfilesNotifier`` (macOS) follows symlinks, can drop
  events (the verification catches them) and raises from ``close`` when it cannot close.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import select
import struct
import sys
import threading
from typing import Protocol

from snapshotd.core import check_fault

OVERFLOW = 0
ADDED = 1  # the codes of watchfiles' Change
MODIFIED = 2
DELETED = 3

Event = tuple[int, str]


class Notifier(Protocol):
    """What the watcher needs from a notifier."""

    follows_symlinks: bool
    polled: bool  # True: ``wait`` only sleeps (it cannot tell whether events are queued)

    def read(self, block_ms: int) -> list[Event]:
        """What is queued now; with ``block_ms`` > 0, first wait that long for something."""

    def wait(self, timeout_s: float) -> None:
        """Sleep until events may be queued, ``interrupt()`` is called, or the timeout."""

    def interrupt(self) -> None:
        """End a ``wait`` at once (from another thread)."""

    def close(self) -> None:
        """Drop every watch; nothing can be read after."""


def open_notifier(roots: list[str], kind: str = "auto") -> Notifier:
    """A notifier over ``roots`` (absolute real directories): inotify on Linux unless ``kind``
    says ``watchfiles``. Raises ``OSError`` (or the native watcher's error) when a root cannot
    be watched."""
    if kind == "watchfiles" or (kind == "auto" and not sys.platform.startswith("linux")):
        return WatchfilesNotifier(roots)
    return InotifyNotifier(roots)


def set_max_watches(limit: int) -> None:
    """Cap the inotify watches every notifier of this process adds together (0: no cap of
    ours, only the host's)."""
    _BUDGET.limit = max(0, int(limit))


def watches_in_use() -> int:
    """How many inotify watches the notifiers of this process hold."""
    return _BUDGET.used


def watch_headroom() -> int | None:
    """How many more watches the notifiers of this process may add, below ``max_watches`` and
    the host's ``fs.inotify.max_user_watches`` (whose count also holds other processes' watches
    of the same user, unseen here); None when neither limit is known."""
    limits = [limit for limit in (_BUDGET.limit, _host_limit()) if limit]
    return max(0, min(limits) - _BUDGET.used) if limits else None


class WatchLimitError(OSError):
    """A watch limit was reached: ``setting`` (``max_watches`` or
    ``fs.inotify.max_user_watches``) is ``limit``; the tree being watched needs ``needed``
    watches more than were in use elsewhere. ``str()`` says what to set."""

    def __init__(self, setting: str, limit: int | None, needed: int, in_use: int,
                 directory: bytes) -> None:
        want = in_use + needed
        shown = "unknown" if limit is None else str(limit)
        if setting == "max_watches":
            advice = f"set max_watches = {want} or more in the daemon's config (0: no cap)"
        else:
            advice = (f"raise it to at least {want}: sudo sysctl {setting}={want} (and in "
                      f"/etc/sysctl.d/ to keep it)")
        super().__init__(errno.ENOSPC, f"the inotify watch limit {setting} = {shown} was "
                         f"reached watching {os.fsdecode(directory)!r}: this tree needs {needed} "
                         f"watch(es), {in_use} are in use; {advice}")
        self.setting, self.limit, self.needed, self.in_use = setting, limit, needed, in_use


class _WatchBudget:
    """The watches held by every notifier of the process, against ``limit`` (0: none)."""

    def __init__(self) -> None:
        self.limit = 0
        self.used = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.limit and self.used >= self.limit:
                return False
            self.used += 1
            return True

    def give(self, count: int = 1) -> None:
        with self._lock:
            self.used = max(0, self.used - count)


_BUDGET = _WatchBudget()


# -- inotify ---------------------------------------------------------------------------------

IN_MODIFY = 0x00000002
IN_ATTRIB = 0x00000004
IN_MOVED_FROM = 0x00000040
IN_MOVED_TO = 0x00000080
IN_CREATE = 0x00000100
IN_DELETE = 0x00000200
IN_DELETE_SELF = 0x00000400
IN_MOVE_SELF = 0x00000800
IN_UNMOUNT = 0x00002000
IN_Q_OVERFLOW = 0x00004000
IN_IGNORED = 0x00008000
IN_ONLYDIR = 0x01000000
IN_DONT_FOLLOW = 0x02000000
IN_EXCL_UNLINK = 0x04000000
IN_ISDIR = 0x40000000
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC

WATCH_MASK = (IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_CREATE | IN_DELETE
              | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR | IN_DONT_FOLLOW | IN_EXCL_UNLINK)
_HEADER = struct.Struct("iIII")
# One read takes at most this much; a call reads at most READS_PER_CALL of them (the rest stays
# queued in the kernel for the next call, so a burst never starves the caller).
READ_BYTES = 64 * 1024
READS_PER_CALL = 16
# Errors of inotify_add_watch on a subdirectory that mean "nothing to watch there".
_SKIP_ERRNOS = (errno.ENOENT, errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.ELOOP)

HOST_WATCH_LIMIT = "/proc/sys/fs/inotify/max_user_watches"

_libc: ctypes.CDLL | None = None
_libc_lock = threading.Lock()


class InotifyNotifier:
    """One inotify instance watching some directory trees (see the module docstring)."""

    follows_symlinks = False
    polled = False

    def __init__(self, roots: list[str]) -> None:
        libc = _load_libc()
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"inotify_init1: {os.strerror(code)}")
        self._libc = libc
        self._fd = fd
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        # One poller for ``read`` (its caller's lock serializes it) and one for ``wait`` (the
        # reader thread's only): a poll object refuses concurrent use.
        self._read_poller = select.poll()
        self._read_poller.register(fd, select.POLLIN)
        self._wait_poller = select.poll()
        self._wait_poller.register(fd, select.POLLIN)
        self._wait_poller.register(self._wake_r, select.POLLIN)
        self._roots = [os.fsencode(r.rstrip("/") or "/") for r in roots]
        self._root_set = set(self._roots)
        self._dirs: dict[int, bytes] = {}  # watch descriptor -> directory
        self._wds: dict[bytes, int] = {}  # directory -> watch descriptor
        self._failure: OSError | None = None
        self._closed = False
        try:
            for root in self._roots:
                self._watch_tree(root, root=True)
        except BaseException:
            self.close()
            raise

    def read(self, block_ms: int) -> list[Event]:
        if self._closed:
            raise OSError(errno.EBADF, "the notifier is closed")
        if self._failure is not None:
            raise self._failure
        if block_ms > 0:
            self._read_poller.poll(block_ms)
        out: list[Event] = []
        for _ in range(READS_PER_CALL):
            try:
                data = os.read(self._fd, READ_BYTES)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            self._parse(data, out)
            if self._failure is not None:
                break  # what was read is handed over; the next read raises
            if len(data) < READ_BYTES // 2:
                break  # the queue is (nearly) empty: do not pay for a read that finds nothing
        return out

    def wait(self, timeout_s: float) -> None:
        if self._closed:
            return
        try:
            ready = self._wait_poller.poll(max(0, int(timeout_s * 1000)))
        except InterruptedError:
            return
        if any(fd == self._wake_r for fd, _ in ready):
            try:
                while os.read(self._wake_r, 64):
                    pass
            except BlockingIOError:
                pass

    def interrupt(self) -> None:
        try:
            os.write(self._wake_w, b"x")
        except OSError:
            pass  # closed, or the pipe is full: a wake-up is already pending

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for fd in (self._fd, self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass
        _BUDGET.give(len(self._dirs))
        self._dirs.clear()
        self._wds.clear()

    @property
    def watch_count(self) -> int:
        """How many kernel watches this notifier holds (one per directory)."""
        return len(self._dirs)

    # -- helpers ---------------------------------------------------------------------------

    def _parse(self, data: bytes, out: list[Event]) -> None:
        offset = 0
        size = _HEADER.size
        while offset + size <= len(data):
            wd, mask, _cookie, length = _HEADER.unpack_from(data, offset)
            name = data[offset + size:offset + size + length].rstrip(b"\0")
            offset += size + length
            if mask & IN_Q_OVERFLOW:
                out.extend((OVERFLOW, os.fsdecode(root)) for root in self._roots)
                continue
            directory = self._dirs.get(wd)
            if directory is None:
                continue  # a watch already dropped (a directory moved away)
            if mask & IN_IGNORED:
                self._forget(wd)
                continue
            if mask & (IN_DELETE_SELF | IN_MOVE_SELF | IN_UNMOUNT):
                # A subdirectory's parent reports it; a root has no watched parent.
                if directory in self._root_set:
                    out.append((DELETED, os.fsdecode(directory)))
                continue
            if not name:
                continue
            path = directory + b"/" + name
            if mask & IN_ISDIR:
                if mask & (IN_CREATE | IN_MOVED_TO):
                    out.append((ADDED, os.fsdecode(path)))
                    if name != b".git":
                        self._watch_tree(path)
                elif mask & (IN_DELETE | IN_MOVED_FROM):
                    out.append((DELETED, os.fsdecode(path)))
                    if mask & IN_MOVED_FROM:
                        self._unwatch_tree(path)  # its watches would name the old path
                elif mask & IN_ATTRIB and name != b".git":
                    # Its mode may have changed: what a capture could not see in it while it
                    # was unreadable (a deletion, say) has had its event already, and one that
                    # could not be watched gets none of its own. Watch it if it is not, and
                    # report it whole (a crawl).
                    if path not in self._wds:
                        self._watch_tree(path)
                    out.append((ADDED, os.fsdecode(path)))
                continue
            if mask & (IN_CREATE | IN_MOVED_TO):
                out.append((ADDED, os.fsdecode(path)))
            elif mask & (IN_DELETE | IN_MOVED_FROM):
                out.append((DELETED, os.fsdecode(path)))
            elif mask & (IN_MODIFY | IN_ATTRIB):
                out.append((MODIFIED, os.fsdecode(path)))

    def _watch_tree(self, top: bytes, *, root: bool = False) -> None:
        """Watch ``top`` and every directory below it (not through symlinks, not ``.git``).
        Runtime failures other than "nothing there" are kept for the next ``read``."""
        stack = [top]
        while stack:
            directory = stack.pop()
            try:
                self._add_watch(directory)
            except OSError as exc:
                if exc.errno == errno.ENOSPC and not isinstance(exc, WatchLimitError):
                    exc = self._limit_error(exc, directory, stack)
                if root and directory == top:
                    raise exc from None
                if exc.errno in _SKIP_ERRNOS:
                    continue
                if root:
                    raise exc from None
                self._failure = exc
                return
            try:
                with os.scandir(directory) as entries:
                    for entry in entries:
                        if entry.name == b".git":
                            continue
                        try:
                            if entry.is_dir(follow_symlinks=False):
                                stack.append(entry.path)
                        except OSError:
                            continue
            except OSError:
                continue  # vanished or unreadable meanwhile: its own events say so

    def _add_watch(self, directory: bytes) -> None:
        check_fault("watch")
        new = directory not in self._wds
        if new and not _BUDGET.take():
            raise OSError(errno.ENOSPC, "max_watches", os.fsdecode(directory))
        wd = self._libc.inotify_add_watch(self._fd, directory, WATCH_MASK)
        if wd < 0:
            code = ctypes.get_errno()
            if new:
                _BUDGET.give()
            raise OSError(code, f"inotify_add_watch: {os.strerror(code)}", os.fsdecode(directory))
        old = self._dirs.get(wd)
        if old is not None:
            if new:
                _BUDGET.give()  # the kernel's existing watch: no new one was added
            if old != directory:
                self._wds.pop(old, None)  # one inode, a new name (a move we read late)
        self._dirs[wd] = directory
        self._wds[directory] = wd

    def _limit_error(self, exc: OSError, directory: bytes, stack: list[bytes]
                     ) -> WatchLimitError:
        """The limit ``exc`` hit, with how many watches the rest of the tree needs."""
        ours = exc.strerror == "max_watches"
        needed = len(self._dirs) + _count_dirs([directory, *stack])
        in_use = max(0, _BUDGET.used - len(self._dirs))
        return WatchLimitError("max_watches" if ours else "fs.inotify.max_user_watches",
                               _BUDGET.limit if ours else _host_limit(), needed, in_use,
                               directory)

    def _unwatch_tree(self, top: bytes) -> None:
        prefix = top + b"/"
        doomed = [d for d in self._wds if d == top or d.startswith(prefix)]
        for directory in doomed:
            wd = self._wds.pop(directory)
            if self._dirs.pop(wd, None) is not None:
                _BUDGET.give()
            self._libc.inotify_rm_watch(self._fd, wd)

    def _forget(self, wd: int) -> None:
        directory = self._dirs.pop(wd, None)
        if directory is not None:
            _BUDGET.give()
            if self._wds.get(directory) == wd:
                del self._wds[directory]


def _count_dirs(stack: list[bytes]) -> int:
    """Directories in and below ``stack`` that a watch would cover (no symlinks, no .git)."""
    count = 0
    pending = list(stack)
    while pending:
        directory = pending.pop()
        count += 1
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    try:
                        if entry.name != b".git" and entry.is_dir(follow_symlinks=False):
                            pending.append(entry.path)
                    except OSError:
                        continue
        except OSError:
            continue
    return count


def _host_limit() -> int | None:
    try:
        with open(HOST_WATCH_LIMIT) as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _load_libc() -> ctypes.CDLL:
    global _libc
    with _libc_lock:
        if _libc is None:
            libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
            if not hasattr(libc, "inotify_init1"):
                raise OSError(errno.ENOSYS, "this C library has no inotify")
            libc.inotify_init1.argtypes = [ctypes.c_int]
            libc.inotify_init1.restype = ctypes.c_int
            libc.inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
            libc.inotify_add_watch.restype = ctypes.c_int
            libc.inotify_rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
            libc.inotify_rm_watch.restype = ctypes.c_int
            _libc = libc
        return _libc


# -- watchfiles (no inotify) -----------------------------------------------------------------

class WatchfilesNotifier:
    """``watchfiles``' native notifier (FSEvents, kqueue, inotify) behind the same interface."""

    follows_symlinks = True
    polled = True

    def __init__(self, roots: list[str]) -> None:
        from watchfiles._rust_notify import RustNotify

        # Recursive, no debounce of its own, no polling fallback; raises if a root fails.
        self._notify = RustNotify(list(roots), False, False, 300, True, False)
        self._woken = threading.Event()

    def read(self, block_ms: int) -> list[Event]:
        # watch(debounce, step, timeout): step 0 polls without sleeping; a timeout returns.
        changes = self._notify.watch(0, 1 if block_ms > 0 else 0, max(1, block_ms), None)
        return list(changes) if isinstance(changes, set) else []

    def wait(self, timeout_s: float) -> None:
        # RustNotify cannot say whether something is queued without taking it: sleep.
        self._woken.wait(timeout_s)
        self._woken.clear()

    def interrupt(self) -> None:
        self._woken.set()

    def close(self) -> None:
        """Raises what the native watcher raised when it could not be closed (the caller
        reports it: its kernel watches may be left behind)."""
        check_fault("notifier-close")
        self._notify.close()
