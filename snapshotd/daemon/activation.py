"""Socket activation: adopting the listening sockets a supervisor passed us (sd_listen_fds).

Owns the reading of ``LISTEN_PID``/``LISTEN_FDS`` (systemd's protocol, also spoken by
``systemd-socket-activate`` and other supervisors): the sockets start at fd 3.

Promises: sockets are returned only when ``LISTEN_PID`` names this very process (a variable
inherited by accident from a parent is ignored); the variables are removed from the
environment afterwards so children never adopt the same fds; every adopted fd is close-on-exec.
Stdlib only.
"""

from __future__ import annotations

import fcntl
import logging
import os
import socket

log = logging.getLogger("snapshotd.activation")

SD_LISTEN_FDS_START = 3
_VARIABLES = ("LISTEN_PID", "LISTEN_FDS", "LISTEN_FDNAMES")


def listen_fds(unset_environment: bool = True) -> list[socket.socket]:
    """The sockets passed by the supervisor, in order; ``[]`` when none were passed to us."""
    try:
        return _adopt()
    finally:
        if unset_environment:
            for name in _VARIABLES:
                os.environ.pop(name, None)


def _adopt() -> list[socket.socket]:
    pid_text = os.environ.get("LISTEN_PID", "")
    count_text = os.environ.get("LISTEN_FDS", "")
    if not pid_text or not count_text:
        return []
    try:
        pid, count = int(pid_text), int(count_text)
    except ValueError:
        log.warning("ignoring malformed socket activation variables LISTEN_PID=%r "
                    "LISTEN_FDS=%r", pid_text, count_text)
        return []
    if pid != os.getpid():
        # Meant for another process (we inherited the environment): the fds are not ours.
        return []
    if count <= 0:
        return []
    sockets = []
    for fd in range(SD_LISTEN_FDS_START, SD_LISTEN_FDS_START + count):
        try:
            flags = fcntl.fcntl(fd, fcntl.F_GETFD)
        except OSError:
            log.warning("socket activation promised fd %d but it is not open", fd)
            continue
        fcntl.fcntl(fd, fcntl.F_SETFD, flags | fcntl.FD_CLOEXEC)
        try:
            # fileno= detects family and type from the fd itself.
            sockets.append(socket.socket(fileno=fd))
        except OSError as exc:
            log.warning("fd %d passed by socket activation is not a socket: %s", fd, exc)
    if sockets:
        log.info("adopted %d socket(s) from the supervisor: %s", len(sockets),
                 ", ".join(_describe(s) for s in sockets))
    return sockets


def _describe(sock: socket.socket) -> str:
    try:
        name = sock.getsockname()
    except OSError:
        name = "?"
    return f"fd {sock.fileno()} {name or '(unnamed)'}"
