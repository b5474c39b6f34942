"""Where snapshotd's files live (README "Files"), resolved the same way by daemon, CLI and hook,
and whether the socket found there can be trusted.

Owns the precedence: explicit argument, then the ``SNAPSHOTD_*`` environment variable, then the
XDG default, then the fixed fallback; and the trust rule for the socket. Promises: the path
functions are pure functions of their arguments and ``os.environ`` (nothing is created on disk)
and always return an absolute path.

Trust rule (``socket_dir_problem``, ``socket_problem``): with no ``XDG_RUNTIME_DIR`` the socket
lives in ``/tmp/snapshotd-<uid>``, a name any local user can create first. A directory that is
not the current user's, or that group or others can write to, may hold another user's listener
(who would receive every request and could answer "ok" to all of them), and so may a socket
file owned by someone else. The client refuses to connect to such a socket (error and gap
reason ``socket-untrusted``) and the daemon refuses to serve in such a directory. Both checks
are ``stat`` calls: the client runs them before every connect.
"""

from __future__ import annotations

import os
import stat  # already loaded by os itself: free on the hook's path

# Annotations only (never evaluated): neither ``typing`` nor ``pathlib`` loads on the hook's path.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

StrPath = "str | os.PathLike[str]"


def home_dir(override: StrPath | None = None) -> Path:
    """The state home: ``override``, ``SNAPSHOTD_HOME``, ``$XDG_STATE_HOME/snapshotd``, else
    ``~/.local/state/snapshotd``."""
    return _path(home_dir_str(override))


def socket_path(override: StrPath | None = None) -> Path:
    """The daemon's socket: ``override``, ``SNAPSHOTD_SOCKET``,
    ``$XDG_RUNTIME_DIR/snapshotd/snapshotd.sock``, else ``/tmp/snapshotd-<uid>/snapshotd.sock``."""
    return _path(socket_path_str(override))


def gaps_path(home: StrPath | None = None, override: StrPath | None = None) -> Path:
    """The gap spool: ``override``, ``SNAPSHOTD_GAPS``, else ``<home>/gaps.ndjson`` (``home``
    defaults to ``home_dir()``)."""
    return _path(gaps_path_str(home, override))


# The ``*_str`` forms are what the hook uses: pathlib costs milliseconds to import, and the hook
# runs after every tool call.

def home_dir_str(override: StrPath | None = None) -> str:
    chosen = _first(override, os.environ.get("SNAPSHOTD_HOME"))
    if chosen is not None:
        return chosen
    state = _absolute_env("XDG_STATE_HOME")
    if state is not None:
        return os.path.join(state, "snapshotd")
    return os.path.join(os.path.expanduser("~"), ".local", "state", "snapshotd")


def socket_path_str(override: StrPath | None = None) -> str:
    chosen = _first(override, os.environ.get("SNAPSHOTD_SOCKET"))
    if chosen is not None:
        return chosen
    runtime = _absolute_env("XDG_RUNTIME_DIR")
    if runtime is not None:
        return os.path.join(runtime, "snapshotd", "snapshotd.sock")
    return os.path.join("/tmp", f"snapshotd-{os.getuid()}", "snapshotd.sock")


def gaps_path_str(home: StrPath | None = None, override: StrPath | None = None) -> str:
    chosen = _first(override, os.environ.get("SNAPSHOTD_GAPS"))
    if chosen is not None:
        return chosen
    return os.path.join(home_dir_str(home), "gaps.ndjson")


def socket_dir_problem(directory: str, uid: int | None = None) -> str | None:
    """Why ``directory`` cannot be trusted to hold the daemon's socket, or None when it can: it
    must be a directory owned by ``uid`` (default: the current user) that neither group nor
    others can write to; a symlink to it must be ``uid``'s or root's. ``OSError`` (for example
    ``FileNotFoundError``) when it cannot be looked at."""
    uid = os.getuid() if uid is None else uid
    link = os.lstat(directory)
    st = os.stat(directory) if stat.S_ISLNK(link.st_mode) else link
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (uid, 0):
        return f"{directory} is a symlink owned by uid {link.st_uid}, not by you (uid {uid})"
    if not stat.S_ISDIR(st.st_mode):
        return f"{directory} is not a directory"
    if st.st_uid != uid:
        return f"{directory} is owned by uid {st.st_uid}, not by you (uid {uid})"
    if st.st_mode & 0o022:
        return (f"{directory} can be written by group or others "
                f"(mode {st.st_mode & 0o7777:04o})")
    return None


def socket_problem(path: str, uid: int | None = None) -> str | None:
    """Why the socket at ``path`` cannot be trusted, or None: its directory fails
    ``socket_dir_problem``, or the socket file (followed through symlinks) is not owned by
    ``uid``. A directory or socket that does not exist is no problem here: connecting to it
    fails as ``daemon-unavailable``."""
    uid = os.getuid() if uid is None else uid
    try:
        problem = socket_dir_problem(os.path.dirname(path) or ".", uid)
        if problem is not None:
            return problem
        st = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:  # EACCES on the way, ELOOP...: what cannot be examined is not trusted
        return f"{path} cannot be examined ({exc.strerror or exc})"
    if st.st_uid != uid:
        return f"the socket {path} is owned by uid {st.st_uid}, not by you (uid {uid})"
    return None


def _path(value: str) -> Path:
    from pathlib import Path

    return Path(value)


def _first(*candidates: StrPath | None) -> str | None:
    # An empty variable counts as unset: `SNAPSHOTD_HOME= cmd` should not mean "the cwd".
    for candidate in candidates:
        if candidate is not None and os.fspath(candidate) != "":
            return os.path.abspath(os.path.expanduser(os.fspath(candidate)))
    return None


def _absolute_env(name: str) -> str | None:
    # The XDG base-directory spec says relative values are invalid and must be ignored.
    value = os.environ.get(name, "")
    return value if os.path.isabs(value) else None
