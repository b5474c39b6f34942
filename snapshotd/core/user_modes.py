"""The modes git would give what snapshotd writes for the user, whatever the daemon's umask.

Owns ``process_umask`` (this process's umask, read without changing it), ``umask_field`` (a
request's ``umask``), ``worktree_file_mode``/``worktree_dir_mode`` (git's checkout modes: 0666 or
0777 less the user's umask) and the ``core.sharedRepository`` rules of git's ``path.c``
(``shared_setting``, ``repo_mode``, ``share_paths``) for objects, refs and reflogs written into a
user's repository.

Promises: the daemon runs with umask 077 (docs/secrets.md, "At rest"); nothing written outside
the home keeps that mode: callers create with any mode and then set these explicitly. A path
is changed only when it is a regular file or a directory (never a link) owned by this user.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

from snapshotd.core.errors import BAD_REQUEST, ServiceError

log = logging.getLogger("snapshotd.modes")

# Where a request carries no umask (an older client, the engine's own resume): the common one.
DEFAULT_UMASK = 0o022
# git's PERM_GROUP and PERM_EVERYBODY (cache.h); an explicit 0xxx setting is kept negative.
_PERM_GROUP = 0o660
_PERM_EVERYBODY = 0o664


def process_umask() -> int:
    """This process's umask, from ``/proc/self/status`` (``os.umask`` would change it for
    every thread a moment); ``DEFAULT_UMASK`` where the kernel does not say."""
    try:
        # Bytes, not text: a codec not yet imported (ascii, say) cannot be loaded by a daemon
        # whose user cannot read the interpreter's library (one started as another user).
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8) & 0o777
    except (OSError, ValueError, IndexError):
        pass
    return DEFAULT_UMASK


def umask_field(fields: dict) -> int:
    """A request's ``umask`` (an integer 0..0o777, the client's), ``DEFAULT_UMASK`` when absent."""
    value = fields.get("umask")
    if value is None:
        return DEFAULT_UMASK
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 0o777:
        raise ServiceError(BAD_REQUEST, "umask must be an integer from 0 to 0o777 (511)")
    return value


def worktree_file_mode(umask: int, executable: bool) -> int:
    return (0o777 if executable else 0o666) & ~umask


def worktree_dir_mode(umask: int) -> int:
    return 0o777 & ~umask


def shared_setting(value: str | None) -> int:
    """git's ``git_config_perm``: 0 (``umask``/false), ``0o660`` (``group``/true/1),
    ``0o664`` (``all``/``world``/``everybody``/2), or minus the mode of an octal ``0xxx``."""
    value = (value or "").strip()
    if value in ("", "umask"):
        return 0
    if value == "group":
        return _PERM_GROUP
    if value in ("all", "world", "everybody"):
        return _PERM_EVERYBODY
    try:
        number = int(value, 8)
    except ValueError:
        return _PERM_GROUP if value.lower() in ("true", "yes", "on") else 0
    if number in (0, 1, 2):
        return (0, _PERM_GROUP, _PERM_EVERYBODY)[number]
    return -(number & 0o666)


def repo_mode(base: int, umask: int, shared: int, is_dir: bool) -> int:
    """The mode git gives a path it creates with ``base`` (0444 an object, 0666 a ref or
    reflog, 0777 a directory) under ``umask``, then ``adjust_shared_perm``."""
    mode = base & ~umask
    if shared == 0:
        return mode
    tweak = -shared if shared < 0 else shared
    if not mode & stat.S_IWUSR:
        tweak &= ~0o222
    if mode & stat.S_IXUSR:
        tweak |= (tweak & 0o444) >> 2
    mode = (mode & ~0o777) | tweak if shared < 0 else mode | tweak
    if is_dir:
        mode |= (mode & 0o444) >> 2
        mode |= stat.S_ISGID
    return mode


def share_paths(paths: list[tuple[Path, int]], umask: int, shared: int) -> int:
    """Give each ``(path, base)`` its ``repo_mode`` (a directory when base is 0777); the number
    that could not be changed (each logged at warning: a group member may lack access)."""
    failed = 0
    for path, base in paths:
        try:
            st = os.lstat(path)
            if st.st_uid != os.geteuid() or not (stat.S_ISREG(st.st_mode)
                                                 or stat.S_ISDIR(st.st_mode)):
                continue  # another member's (git made it theirs), or a link: not ours to set
            want = repo_mode(base, umask, shared, stat.S_ISDIR(st.st_mode))
            if stat.S_ISDIR(st.st_mode) and shared == 0:
                want |= stat.S_IMODE(st.st_mode) & stat.S_ISGID  # inherited: git keeps it
            if stat.S_IMODE(st.st_mode) != want:
                os.chmod(path, want)
        except FileNotFoundError:
            continue
        except OSError as exc:
            failed += 1
            log.warning("could not give %s the mode git would (%o): %s", path, base, exc)
    return failed
