"""Starting the daemon on a hook's first use, within the hook's deadline.

Owns ``start_daemon``: ``<this python> -m snapshotd serve`` as a detached process, then waiting
for its socket to accept connections. ``snapshotd_client.hook.try_autostart`` (the hook, and
``snapshotd exec``) calls it only once no daemon answered, so the hook's usual path never loads it.

Promises: off when ``SNAPSHOTD_AUTOSTART=0``; the daemon is never imported here; the child holds
neither the agent's terminal nor its pipes (own session, /dev/null for stdin/stdout/stderr) and
no project directory (cwd ``/``); returns before ``deadline``, keeping part of it for the capture;
gives up early on a daemon that failed to start, unless another hook's daemon is starting.
"""

from __future__ import annotations

import os
import sys
import time

# A lock file written this recently belongs to a daemon still starting up.
_LOCK_FRESH_S = 30.0


def start_daemon(socket_path: str, deadline: float, argv: list[str] | None = None) -> bool:
    """Start the daemon when none answers; True once its socket accepts connections.

    Off when ``SNAPSHOTD_AUTOSTART=0``. Runs ``<this python> -m snapshotd serve`` (``argv``
    overrides, for tests) as a separate process: the daemon is never imported here. The child
    gets its own session and /dev/null for stdin/stdout/stderr, so it holds neither the agent's
    terminal nor its pipes, and cwd ``/`` so it pins no project directory.
    """
    if os.environ.get("SNAPSHOTD_AUTOSTART") == "0":
        return False
    if argv is None:
        if not sys.executable:
            return False
        argv = [sys.executable, "-m", "snapshotd", "serve"]
    import subprocess

    env = dict(os.environ)
    # Pin the daemon to the socket this hook will poll, and make path settings survive cwd "/".
    env["SNAPSHOTD_SOCKET"] = socket_path
    for name in ("SNAPSHOTD_HOME", "SNAPSHOTD_GAPS", "SNAPSHOTD_CONFIG"):
        if env.get(name):
            env[name] = os.path.abspath(os.path.expanduser(env[name]))
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, cwd="/", env=env,
                                start_new_session=True, close_fds=True)
    except OSError:
        return False
    # Leave part of the budget for the capture itself once the daemon is up.
    margin = min(1.0, 0.25 * max(0.0, deadline - time.monotonic()))
    give_up = deadline - margin
    while time.monotonic() < give_up:
        if _accepts(socket_path, give_up):
            return True
        if proc.poll() is not None and proc.returncode != 0 and not _daemon_starting():
            # It failed (not installed, bad config): one last look, then stop burning the
            # agent's time. (One that lost the start race to another hook's daemon leaves that
            # winner starting up: we keep polling for it until the deadline.)
            return _accepts(socket_path, give_up)
        time.sleep(0.02)
    return False



def _daemon_starting() -> bool:
    """Whether another daemon for this home has just taken its lock (it writes its pid into
    ``<home>/daemon.lock`` once it holds it) and is alive: the winner of a start race, still
    opening its store. An old lock of a live daemon that does not answer on our socket does
    not count: waiting for it would only cost the agent its whole hook budget."""
    from .paths import home_dir_str

    lock = os.path.join(home_dir_str(), "daemon.lock")
    try:
        if time.time() - os.stat(lock).st_mtime > _LOCK_FRESH_S:
            return False
        with open(lock, "rb") as f:
            pid = int(f.read(32).split()[0])
        os.kill(pid, 0)
    except PermissionError:  # alive, under another uid: not a daemon of ours starting
        return False
    except (OSError, ValueError, IndexError):
        return False
    return True


def _accepts(socket_path: str, give_up: float) -> bool:
    import socket

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(max(0.01, min(0.2, give_up - time.monotonic())))
        sock.connect(socket_path)
        return True
    except OSError:
        return False
    finally:
        sock.close()
