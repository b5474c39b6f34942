"""The store's ``info/attributes``: every file is stored as its bytes, with no conversion.

Owns ``STORE_ATTRIBUTES`` (one line that unsets every converting attribute, which wins over
every other attributes source for libgit2 and the git CLI alike: see
``snapshotd.capture.raw_bytes`` for why), ``ensure_raw_attributes`` (writing it) and
``drop_stat_caches`` (removing the stat caches' index files under ``<home>/worktrees``, each
filled under the old rules).

Promises: the attributes file is written when the store is made, and rewritten at start-up
when missing or changed; rewriting it drops every stat cache, so the next capture of each
worktree reads its files again.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from snapshotd.core import make_dirs, write_file

log = logging.getLogger("snapshotd.store")

STORE_ATTRIBUTES = (b"# written by snapshotd: every file is stored as its bytes, whatever the\n"
                    b"# worktree's .gitattributes or core.autocrlf say (no line-ending, ident,\n"
                    b"# encoding or filter conversion)\n"
                    b"* -text -crlf -eol -ident -filter -working-tree-encoding\n")


def ensure_raw_attributes(store: Path, fsync: bool = True) -> bool:
    """Make ``store``'s ``info/attributes`` hold ``STORE_ATTRIBUTES``; whether it was written
    (a new store, one made before this rule, or a damaged file: whatever stands at that name,
    a directory included, is replaced). A failure to write it is logged at error and leaves
    captures converting as git would: the daemon still starts and captures."""
    path = store / "info" / "attributes"
    try:
        if path.read_bytes() == STORE_ATTRIBUTES:
            return False
    except OSError:
        pass
    try:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        make_dirs(path.parent)
        write_file(path, STORE_ATTRIBUTES, sync=fsync)
    except OSError as exc:
        log.error("cannot write %s (%s): files whose attributes or core.autocrlf convert them "
                  "are stored converted until it can be written (at the next start)", path, exc)
        return False
    return True


def drop_stat_caches(home: Path) -> list[str]:
    """Remove every worktree's stat cache file under ``home`` (filled under other attribute
    rules): each worktree's next capture starts its cache again. The ids of those dropped."""
    dropped = []
    try:
        ids = sorted(os.listdir(home / "worktrees"))
    except OSError:
        return []
    for wid in ids:
        try:
            os.unlink(home / "worktrees" / wid / "index")
        except FileNotFoundError:
            continue
        except OSError as exc:
            log.warning("cannot drop the stat cache of %s (%s): files captured before may keep "
                        "a converted form until they change", wid, exc)
            continue
        dropped.append(wid)
    if dropped:
        log.warning("the store now keeps every file as its bytes (no line-ending or filter "
                    "conversion): %d stat cache(s) dropped, their worktrees are read again at "
                    "their next capture", len(dropped))
    return dropped
