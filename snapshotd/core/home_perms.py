"""The home's permissions at rest: readable by its owner only.

Owns ``secure_home``: at start-up the daemon sets its umask to 077 (every file and directory it,
libgit2 or git creates from then on is private) and walks the home once, taking group and other
permission bits off anything that has them, with a warning naming what it repaired.

Why bits off rather than exact modes: git keeps its objects read-only (0444 → 0400) and that is
worth keeping; what matters is that nobody but the owner can read checkpoints, the ledger or the
gap spool, which hold the user's files and commands.

Promises: after ``secure_home`` no file or directory under the home (symlinks aside: their mode
means nothing) grants any permission to group or others; a path that cannot be repaired is
logged at warning and counted, never fatal.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

log = logging.getLogger("snapshotd.home")

PRIVATE_UMASK = 0o077
_SHOWN = 5


def secure_home(home: Path) -> dict:
    """Make the daemon's new files private and repair the home's existing ones; what was
    repaired (``{"repaired": n, "failed": n}``)."""
    os.umask(PRIVATE_UMASK)
    repaired: list[str] = []
    failed: list[str] = []
    for dirpath, dirnames, filenames in os.walk(home):
        for name in (*dirnames, *filenames):
            _repair(os.path.join(dirpath, name), repaired, failed)
    _repair(str(home), repaired, failed)
    if repaired:
        log.warning("home %s: %d path(s) were readable by group or others and are now private "
                    "(e.g. %s)", home, len(repaired), ", ".join(repaired[:_SHOWN]))
    if failed:
        log.warning("home %s: %d path(s) stay readable by group or others: cannot change their "
                    "mode (e.g. %s)", home, len(failed), ", ".join(failed[:_SHOWN]))
    return {"repaired": len(repaired), "failed": len(failed)}


def _repair(path: str, repaired: list[str], failed: list[str]) -> None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return  # gone while walking (a lock file, a temporary): nothing left to protect
    except OSError as exc:
        failed.append(f"{path} ({exc.strerror})")
        return
    if stat.S_ISLNK(st.st_mode) or not st.st_mode & 0o077:
        return
    try:
        os.chmod(path, stat.S_IMODE(st.st_mode) & ~0o077)
    except OSError as exc:
        failed.append(f"{path} ({exc.strerror})")
        return
    repaired.append(path)
