"""Where snapshotd's files live (DESIGN §3), resolved the same way by daemon, CLI and hook.

Owns the precedence: explicit argument, then the ``SNAPSHOTD_*`` environment variable, then the
XDG default, then the fixed fallback. Promises: pure functions of their arguments and
``os.environ`` (nothing is created on disk), always returning an absolute path.
"""

from __future__ import annotations

import os
from pathlib import Path

StrPath = str | os.PathLike[str]


def home_dir(override: StrPath | None = None) -> Path:
    """The state home: ``override``, ``SNAPSHOTD_HOME``, ``$XDG_STATE_HOME/snapshotd``, else
    ``~/.local/state/snapshotd``."""
    chosen = _first(override, os.environ.get("SNAPSHOTD_HOME"))
    if chosen is not None:
        return chosen
    state = _absolute_env("XDG_STATE_HOME")
    if state is not None:
        return state / "snapshotd"
    return Path.home() / ".local" / "state" / "snapshotd"


def socket_path(override: StrPath | None = None) -> Path:
    """The daemon's socket: ``override``, ``SNAPSHOTD_SOCKET``,
    ``$XDG_RUNTIME_DIR/snapshotd/snapshotd.sock``, else ``/tmp/snapshotd-<uid>/snapshotd.sock``."""
    chosen = _first(override, os.environ.get("SNAPSHOTD_SOCKET"))
    if chosen is not None:
        return chosen
    runtime = _absolute_env("XDG_RUNTIME_DIR")
    if runtime is not None:
        return runtime / "snapshotd" / "snapshotd.sock"
    return Path("/tmp") / f"snapshotd-{os.getuid()}" / "snapshotd.sock"


def gaps_path(home: StrPath | None = None, override: StrPath | None = None) -> Path:
    """The gap spool: ``override``, ``SNAPSHOTD_GAPS``, else ``<home>/gaps.ndjson`` (``home``
    defaults to ``home_dir()``)."""
    chosen = _first(override, os.environ.get("SNAPSHOTD_GAPS"))
    if chosen is not None:
        return chosen
    return home_dir(home) / "gaps.ndjson"


def _first(*candidates: StrPath | None) -> Path | None:
    # An empty variable counts as unset: `SNAPSHOTD_HOME= cmd` should not mean "the cwd".
    for candidate in candidates:
        if candidate is not None and os.fspath(candidate) != "":
            return Path(os.path.abspath(os.path.expanduser(os.fspath(candidate))))
    return None


def _absolute_env(name: str) -> Path | None:
    # The XDG base-directory spec says relative values are invalid and must be ignored.
    value = os.environ.get(name, "")
    return Path(value) if os.path.isabs(value) else None
