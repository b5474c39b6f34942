"""Where the daemon sits: the listening control socket.

Owns the socket's directory and the socket itself, and the peer-uid check a connection gets
before anything is read from it (``snapshotd.daemon.server`` serves what comes in). The
one-daemon-per-home lock it sits beside is ``snapshotd.core.home_lock``.

Promises:
- A socket another daemon listens on is refused with ``DaemonLockError``.
- The socket lives in a 0700 directory this user owns (one another user could write to is
  refused, never used) and is created 0600; a stale socket nobody listens on is replaced, a
  live one is never taken over.
"""

from __future__ import annotations

import os
import socket
import stat
import struct
from pathlib import Path

from snapshotd.core import DaemonLockError
from snapshotd_client import socket_dir_problem


def prepare_socket_dir(path: Path) -> None:
    """Create the socket's directory 0700 (or check that an existing one is ours and private)."""
    directory = path.parent
    directory.mkdir(mode=0o700, parents=True, exist_ok=True)
    problem = socket_dir_problem(str(directory))
    if problem is not None:
        raise PermissionError(
            f"refusing to serve in {directory}: {problem}, so another local user may have "
            f"created it to intercept snapshotd's requests; remove it (as root if you cannot) "
            f"and start again, or set XDG_RUNTIME_DIR or SNAPSHOTD_SOCKET to a directory only "
            f"you can write to")
    st = directory.stat()
    if stat.S_IMODE(st.st_mode) & 0o077:
        os.chmod(directory, 0o700)


def bind_socket(path: Path) -> socket.socket:
    """Bind a fresh listening socket at ``path`` (mode 0600), replacing a stale one."""
    prepare_socket_dir(path)
    if path.exists() or path.is_symlink():
        probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        probe.settimeout(1.0)
        try:
            probe.connect(str(path))
        except OSError:
            path.unlink()  # stale: nobody listens
        else:
            raise DaemonLockError(f"a daemon already listens on {path}; stop it or pass --socket")
        finally:
            probe.close()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        sock.bind(str(path))
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    sock.listen(1024)
    return sock


def peer_uid(sock: socket.socket) -> int | None:
    """The connecting process's uid (SO_PEERCRED on Linux, getpeereid elsewhere)."""
    if hasattr(socket, "SO_PEERCRED"):
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", creds)
        return uid
    getpeereid = getattr(os, "getpeereid", None)
    if getpeereid is not None:  # pragma: no cover - macOS
        return getpeereid(sock.fileno())[0]
    return None
