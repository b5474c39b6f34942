"""Where snapshotd's files live (DESIGN §3), resolved the same way by daemon, CLI and hook.

Owns the precedence: explicit argument, then the ``SNAPSHOTD_*`` environment variable, then the
XDG default, then the fixed fallback. Promises: pure functions of their arguments and
``os.environ`` (nothing is created on disk), always returning an absolute path.
"""

from __future__ import annotations

import os

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
