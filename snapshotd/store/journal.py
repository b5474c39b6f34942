"""Intent journals: the crash-safety record of a chain rewrite (gc's prune, purge).

Owns writing one journal whole (temporary file, fsync, rename) and reading it back at start-up.
A rewrite writes its new commits, then its journal, then the ledger transaction, then the ref;
a journal left by a crash names everything needed to finish the rewrite idempotently.

Promises: a journal is either whole or absent (never half-written); one that cannot be read
anyway is logged at warning with what is lost, and removed, never silently ignored.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

log = logging.getLogger("snapshotd.journal")


def write_journal(path: Path, journal: dict) -> None:
    """Write ``journal`` to ``path`` whole: a temporary file, fsynced, renamed into place."""
    tmp = path.with_suffix(".tmp")
    with open(tmp, "w") as f:
        json.dump(journal, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def read_journal(path: Path, what: str, lost: str) -> dict | None:
    """The journal at ``path``, or None when there is none. One that cannot be read (outside
    damage: journals are written whole) is logged with ``lost`` (what is not completed) and
    removed."""
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        log.warning("dropping an unreadable %s journal %s (%s): %s", what, path, exc, lost)
        path.unlink(missing_ok=True)
        return None
