"""Letting go of a FIFO that the daemon's reading of a user's tree waits on.

Owns the guards. libgit2 and git open the rules files they read from a worktree (``.gitignore``,
``.gitattributes``, ...) with a blocking ``open``, so a planted FIFO would hold the daemon (libgit2
keeps the interpreter lock) or a git child for good. Too many paths to check before each read,
so the guards watch what the daemon waits on (``wchan`` ``wait_for_partner``) and open that FIFO
from the other end without blocking: the rules file reads as empty and the capture goes on. A
process of its own (``python -m snapshotd.daemon.fifo_guard <pid>``) watches the daemon's threads,
a thread watches its git children, and also kills (pidfd) a child holding a device open from
outside ``/dev``; ``guarding`` runs them around an op without a daemon. In full: docs/durability.md.

Promises: nothing is written into a FIFO and no other file is opened (reopened through an
``O_PATH`` descriptor checked to be a FIFO); only the daemon's tasks and descendants are looked
at; each release is logged at warning and counted (``status``: ``fifo_guard``); a guard that
cannot run is off, logged and shown; the guards end with the daemon (or the op).
"""

from __future__ import annotations

import ctypes
import errno
import json
import logging
import os
import platform
import signal
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass

log = logging.getLogger("snapshotd.fifo_guard")

# How often each guard looks: the daemon's own threads more often, since one of them stuck
# holding the interpreter lock stops the whole daemon; a child holds one worktree's capture.
THREADS_INTERVAL_S = 0.5
CHILDREN_INTERVAL_S = 1.0
# open, openat, openat2 by machine: the calls a FIFO's open waits in.
_OPEN_CALLS = {"x86_64": {2: "open", 257: "openat", 437: "openat2"},
               "aarch64": {56: "openat", 437: "openat2"}}
_AT_FDCWD = -100
_PATH_MAX = 4096
_PR_SET_PDEATHSIG = 1
_PR_SET_PTRACER = 0x59616D61
_YAMA_SCOPE = "/proc/sys/kernel/yama/ptrace_scope"


def attach(service, server, config) -> None:  # noqa: ARG001 - the attach signature is fixed
    guards = Guards()
    # Never stopped: a capture of the stop itself (the pending tier-2 windows) may meet a FIFO
    # too. The thread ends with the process, the guard process on the daemon's death.
    server.on_ready.append(guards.start)
    server.status_extras.append(lambda: {"fifo_guard": guards.summary()})


@contextmanager
def guarding() -> Iterator[Guards]:
    """Both guards over this process for the block's length: a command running an op without a
    daemon. A guard that cannot run is logged at info only (a command on another system stays
    quiet); releases are logged at warning."""
    guards = Guards(off_level=logging.INFO)
    guards.start()
    try:
        yield guards
    finally:
        guards.stop()


@dataclass(frozen=True)
class Waiter:
    """A task waiting in a FIFO's open: process ``pid``, thread ``tid``, the path the open
    names (resolved) and whether it opens for writing."""

    pid: int
    tid: int
    path: str
    for_writing: bool


class Guards:
    """Both guards of a process (a daemon, or a command running an op itself), and what they
    did (``summary``); a guard turned off is logged at ``off_level``."""

    def __init__(self, *, off_level: int = logging.WARNING) -> None:
        self.off_level = off_level
        self.releases = 0
        self.stopped = 0
        self.last: dict | None = None
        self.off: dict[str, str] = {}
        self._lock = threading.Lock()  # the two guards' reports arrive on two threads
        self._stopping = threading.Event()
        self._process: subprocess.Popen | None = None

    def start(self) -> None:
        if open_calls() is None:
            reason = f"no open system calls known for {platform.machine()}"
            self._turn_off("threads", reason)
            self._turn_off("children", reason)
            return
        threading.Thread(target=self._watch_children, name="fifo-guard", daemon=True).start()
        self._start_process()

    def stop(self) -> None:
        """Both guards end: the thread at its next tick, the guard process now."""
        self._stopping.set()
        if self._process is not None:
            self._process.terminate()
            self._process.wait()

    def summary(self) -> dict:
        with self._lock:
            return {"releases": self.releases, "stopped": self.stopped, "last": self.last,
                    "off": dict(self.off)}

    def _watch_children(self) -> None:
        own = os.getpid()
        while not self._stopping.wait(CHILDREN_INTERVAL_S):
            try:
                tasks = descendant_tasks(own)
                for waiter in waiters(tasks):
                    if release(waiter):
                        self._count(asdict(waiter))
                for pid, path in device_readers({pid for pid, _tid in tasks}):
                    if stop_reader(pid, path):
                        self._count_stopped(pid, path)
            except Exception:  # noqa: BLE001 - a guard that dies must say so; the daemon goes on
                log.exception("the FIFO guard of this process's children failed; off")
                self._turn_off("children", "failed (see the log)")
                return

    def _start_process(self) -> None:
        try:
            process = subprocess.Popen(
                [sys.executable, "-m", "snapshotd.daemon.fifo_guard", str(os.getpid()),
                 str(THREADS_INTERVAL_S)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                close_fds=True)
        except OSError as exc:
            self._turn_off("threads", f"could not start the guard process: {exc}")
            return
        self._process = process
        allow_reading(process.pid)
        threading.Thread(target=self._read_reports, args=(process,),
                         name="fifo-guard-reports", daemon=True).start()

    def _read_reports(self, process: subprocess.Popen) -> None:
        assert process.stdout is not None
        for line in process.stdout:
            try:
                report = json.loads(line)
            except ValueError:
                continue
            if report.get("off"):
                self._turn_off("threads", str(report["off"]))
            elif report.get("released"):
                self._count(report["released"])
        code = process.wait()
        with self._lock:
            reported = "threads" in self.off
        if not reported and not self._stopping.is_set():
            self._turn_off("threads", f"the guard process ended ({code})")

    def _count(self, waiter: dict) -> None:
        with self._lock:
            self.releases += 1
            self.last = {"path": waiter["path"], "pid": waiter["pid"], "at": time.time()}
        log.warning("released a wait on the FIFO %s (process %d, thread %d): a file git reads "
                    "was a FIFO; it reads as empty", waiter["path"], waiter["pid"],
                    waiter["tid"])

    def _count_stopped(self, pid: int, path: str) -> None:
        with self._lock:
            self.stopped += 1
            self.last = {"path": path, "pid": pid, "at": time.time()}
        log.warning("stopped process %d, which read the device %s in a user's tree (a device "
                    "where git reads rules, read without end); what it was doing fails and "
                    "is done without it", pid, path)

    def _turn_off(self, guard: str, reason: str) -> None:
        with self._lock:
            self.off[guard] = reason
        log.log(self.off_level, "the FIFO guard of this process's %s is off (%s): a FIFO "
                "planted where git reads a worktree can hold its captures", guard, reason)


def main(argv: list[str]) -> int:
    """The guard process: watches process ``argv[0]``'s threads every ``argv[1]`` seconds until
    that process ends, and writes a JSON line on its standard output for each release."""
    daemon, interval = int(argv[0]), float(argv[1])
    _die_with_parent()
    readable = _wait_readable(daemon)
    if readable is not None:
        _report({"off": readable})
        return 0
    while os.getppid() == daemon:
        for waiter in waiters((daemon, tid) for tid in _tasks(daemon)):
            if release(waiter):
                _report({"released": asdict(waiter)})
        time.sleep(interval)
    return 0


def open_calls() -> dict[int, str] | None:
    """The system call numbers of ``open`` and its kin on this machine, or None."""
    return _OPEN_CALLS.get(platform.machine())


def waiters(tasks: Iterable[tuple[int, int]]) -> list[Waiter]:
    """The ``(pid, tid)`` tasks waiting in a FIFO's open, with the path it names."""
    found = []
    for pid, tid in tasks:
        waiter = _waiter(pid, tid)
        if waiter is not None:
            found.append(waiter)
    return found


def release(waiter: Waiter) -> bool:
    """Open ``waiter``'s FIFO from the other end without blocking and close it: its open
    returns. True when a wait was released."""
    try:
        held = os.open(waiter.path, os.O_PATH | os.O_CLOEXEC)
    except OSError:
        return False  # gone: whatever replaced it is opened by the waiter, not by us
    try:
        if not stat.S_ISFIFO(os.fstat(held).st_mode):
            return False
        mode = os.O_RDONLY if waiter.for_writing else os.O_WRONLY
        try:
            os.close(os.open(f"/proc/self/fd/{held}", mode | os.O_NONBLOCK | os.O_CLOEXEC))
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: nobody waits any more
                log.warning("could not release a wait on the FIFO %s: %s", waiter.path, exc)
            return False
        return True
    finally:
        os.close(held)


def device_readers(pids: Iterable[int]) -> list[tuple[int, str]]:
    """``(pid, path)`` for each of ``pids`` holding a device open whose path is outside
    ``/dev``: a device node in a user's tree. git and our children open no device but
    ``/dev/null`` on purpose; one in the tree is a rules file read without end."""
    found = []
    for pid in pids:
        path = _device_outside_dev(pid)
        if path is not None:
            found.append((pid, path))
    return found


def stop_reader(pid: int, path: str) -> bool:
    """Kill process ``pid`` if it still holds the device ``path`` open (checked through a
    pidfd, so a process that ended and whose id was taken again is never hit)."""
    try:
        handle = os.pidfd_open(pid)
    except OSError:
        return False  # ended meanwhile
    try:
        if _device_outside_dev(pid) != path:
            return False
        signal.pidfd_send_signal(handle, signal.SIGKILL)
        return True
    except OSError:
        return False
    finally:
        os.close(handle)


def _device_outside_dev(pid: int) -> str | None:
    fds = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fds)
    except OSError:
        return None
    for name in names:
        try:
            mode = os.stat(f"{fds}/{name}").st_mode
            if not (stat.S_ISCHR(mode) or stat.S_ISBLK(mode)):
                continue
            path = os.readlink(f"{fds}/{name}")
        except OSError:
            continue
        if not path.startswith("/dev/"):
            return path
    return None


def descendant_tasks(pid: int) -> list[tuple[int, int]]:
    """Every ``(pid, tid)`` of the processes below ``pid``."""
    return [(child, tid) for child in _descendants(pid) for tid in _tasks(child)]


def allow_reading(pid: int) -> None:
    """Let process ``pid`` read this one's tasks where Yama allows only ancestors to (scope
    1): ``PR_SET_PTRACER``. Other scopes need nothing (0) or cannot be helped (2, 3)."""
    try:
        with open(_YAMA_SCOPE) as f:
            if f.read().strip() != "1":
                return
    except OSError:
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PTRACER, pid, 0, 0, 0) != 0:
        log.warning("could not let the FIFO guard process read the daemon's threads: %s",
                    os.strerror(ctypes.get_errno()))


def _waiter(pid: int, tid: int) -> Waiter | None:
    task = f"/proc/{pid}/task/{tid}"
    try:
        if _read_small(f"{task}/wchan") != b"wait_for_partner":
            return None
        fields = _read_small(f"{task}/syscall").split()
    except OSError:
        return None  # gone meanwhile, or not ours to read
    calls = open_calls() or {}
    try:
        call = calls.get(int(fields[0]))
        args = [int(x, 16) for x in fields[1:7]]
    except (ValueError, IndexError):
        return None  # "running": it moved on
    if call is None:
        return None
    if call == "open":
        dirfd, address, flags = _AT_FDCWD, args[0], args[1]
    else:
        dirfd, address = _signed32(args[0]), args[1]
        flags = args[2] if call == "openat" else _read_u64(pid, args[2])
    name = _read_string(pid, address)
    if name is None or flags is None:
        return None
    path = _resolve(pid, dirfd, name)
    if path is None:
        return None
    return Waiter(pid, tid, path, (flags & os.O_ACCMODE) == os.O_WRONLY)


def _wait_readable(pid: int) -> str | None:
    """None once this process may read ``pid``'s system calls (the daemon allows it just after
    starting us), else why not after a few tries."""
    problem = "unknown"
    for _ in range(20):
        try:
            with open(f"/proc/{pid}/task/{pid}/syscall", "rb") as f:
                f.read()
            with open(f"/proc/{pid}/task/{pid}/wchan", "rb") as f:
                f.read()
            return None
        except OSError as exc:
            problem = f"cannot read /proc/{pid}: {exc.strerror}"
        time.sleep(0.1)
    return problem


def _die_with_parent() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # the loop's parent check ends it within a tick


def _report(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def _tasks(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return []


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (its threads' children, theirs, ...)."""
    out: list[int] = []
    stack = [pid]
    while stack:
        parent = stack.pop()
        for tid in _tasks(parent):
            try:
                children = [int(c) for c in _read_small(f"/proc/{parent}/task/{tid}/children")
                            .split()]
            except (OSError, ValueError):
                continue
            out.extend(children)
            stack.extend(children)
    return out


def _read_small(path: str) -> bytes:
    """A small /proc file's bytes, without a file object's cost (the guards read two per
    thread a tick)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, 512)
    finally:
        os.close(fd)


def _read_string(pid: int, address: int) -> str | None:
    """The NUL-ended string at ``address`` in process ``pid``'s memory, or None."""
    data = _read_memory(pid, address, _PATH_MAX)
    if data is None or b"\0" not in data:
        return None
    return os.fsdecode(data.split(b"\0", 1)[0])


def _read_u64(pid: int, address: int) -> int | None:
    data = _read_memory(pid, address, 8)
    return int.from_bytes(data, sys.byteorder) if data is not None and len(data) == 8 else None


def _read_memory(pid: int, address: int, size: int) -> bytes | None:
    """Up to ``size`` bytes at ``address``, stopping at the first page that cannot be read."""
    try:
        fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        out = b""
        while len(out) < size:
            at = address + len(out)
            chunk = min(size - len(out), 4096 - at % 4096)
            try:
                part = os.pread(fd, chunk, at)
            except OSError:
                break
            if not part:
                break
            out += part
            if b"\0" in part:
                break
        return out or None
    finally:
        os.close(fd)


def _resolve(pid: int, dirfd: int, name: str) -> str | None:
    if os.path.isabs(name):
        return name
    base = f"/proc/{pid}/cwd" if dirfd == _AT_FDCWD else f"/proc/{pid}/fd/{dirfd}"
    try:
        return os.path.join(os.readlink(base), name)
    except OSError:
        return None


def _signed32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
