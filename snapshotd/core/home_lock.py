"""The one-daemon-per-home lock: ``<home>/daemon.lock``.

Owns ``HomeLock`` (an exclusive ``flock`` on the file, which holds the owner's pid) and
``DaemonLockError``. The daemon holds it while it serves (``snapshotd.daemon.listener`` binds the
socket beside it); ``snapshotd repair`` and the local backend take it to work on a home no
daemon serves.

Promises: only one holder per home at a time, across processes; a second ``acquire`` raises
``DaemonLockError`` naming the holder's pid. The lock goes with its holder's process (``flock``),
so a crashed daemon never leaves the home locked.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path


class DaemonLockError(Exception):
    """Another daemon already serves this home."""


class HomeLock:
    """An exclusive ``flock`` on ``<home>/daemon.lock`` holding the owner's pid."""

    def __init__(self, home: Path) -> None:
        self.path = home / "daemon.lock"
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            try:
                pid = os.read(fd, 32).decode().strip() or "unknown"
            finally:
                os.close(fd)
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise DaemonLockError(
                    f"another snapshotd (pid {pid}) already serves {self.path.parent}; stop it "
                    "first or use another --home") from None
            raise
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
