"""A verification's stat scan, run off the worktree's lock.

Owns ``Prescan``. A verification looks for changes no event announced (drift) with a stat scan
of the whole worktree. Under the worktree's lock that scan made every capture of the worktree
wait for it: about nine seconds at a million files, past the hook's five-second budget for a
tool call that came meanwhile. So a verification runs in three steps:

1. ``Prescan.run``, under the lock for a moment: the stat cache is written to its file if
   captures changed it since (``WorktreeIndex.persist``: 0.7 s at a million entries, 7 ms at
   10,000).
2. Still in ``run``, off the lock: a second libgit2 handle on the cache's git dir reads that
   file and diffs it against the worktree, under the same ignore rules, without
   ``UPDATE_INDEX`` (nothing is written; the live cache is never touched). libgit2 runs the
   diff with the interpreter's lock released, so captures go on beside it. The paths it lists
   differ from the cache as written: drift, or changes made since.
3. ``Prescan.verify``, inside the verification's capture under the lock: only those paths and
   the ones the watcher reported since the last capture are updated (``capture_changed``);
   drift is what that update changed among the paths found, with no event naming it.

Promises: a verification finds what the full scan finds, or is one: whenever this cannot stand
in for it, ``verify`` returns None before changing anything and the caller scans fully under
the lock as before (no cache loaded; nested repositories; a cache that could not be written; a
scan that failed or met a directory nested too deep; a nested repository or a path that
changed between file and directory among those found; more than ``DIRTY_LIMIT`` paths; a
per-path update the cache declines). Not looked for: a new FIFO, socket or device, or a
never-captured directory that cannot be listed, that came with no event (the full scan's
``list_unseen``); the watcher reports those as they appear.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import DeltaStatus, DiffOption

from snapshotd import faults
from snapshotd.fastpath import DIRTY_LIMIT, directories_of
from snapshotd.full_scan import DIFF_FLAGS, Capture
from snapshotd.scan_rules import unreadable_path

if TYPE_CHECKING:
    from snapshotd.service import ChangeSource, Service
    from snapshotd.worktree_index import WorktreeIndex

log = logging.getLogger("snapshotd.store")


def _glibc() -> ctypes.CDLL | None:
    """The C library when it is glibc (it has ``malloc_trim``), else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        return libc
    except (OSError, AttributeError):
        return None


_LIBC = _glibc()

# The full scan's diff, minus the write of the stat cache it refreshes.
_DETECT_FLAGS = int(DIFF_FLAGS) & ~int(DiffOption.UPDATE_INDEX)


@dataclass
class Prescan:
    """What one verification's off-lock scan found: the paths whose content differs from the
    stat cache as written at its start (None: the verification scans fully instead)."""

    found: set[str] | None = None
    held_s: float = 0.0  # how long step 1 held the worktree's lock
    scan_s: float = 0.0
    why_not: str = ""  # why ``found`` is None

    @classmethod
    def run(cls, service: Service, root: Path) -> Prescan:
        """Write ``root``'s stat cache if it changed (under the worktree's lock), then diff it
        against the worktree off the lock. Never raises: a scan that cannot run says why."""
        result = cls()
        started = time.monotonic()
        with service.worktree_lock(root):
            index = service.store.worktree(root)
            if index.workspace.caches:
                result.why_not = "nested repositories"
            elif not index.persist():
                result.why_not = "no stat cache loaded, or it could not be written"
            gitdir, unreadable = index.gitdir, set(index.unreadable)
        result.held_s = time.monotonic() - started
        if result.why_not:
            return result
        scan_started = time.monotonic()
        faults.delay("full-scan")  # tests: a scan as slow as a million files'
        try:
            result.found = _changed_paths(gitdir, root, unreadable)
        except _CannotStandIn as exc:
            result.why_not = str(exc)
        except (pygit2.GitError, OSError, ValueError) as exc:
            result.why_not = f"the scan failed: {type(exc).__name__}: {exc}"
        result.scan_s = time.monotonic() - scan_started
        _release_freed_memory()
        return result

    def verify(self, index: WorktreeIndex, source: ChangeSource, root: Path,
               reported: set[str]) -> Capture | None:
        """The verification's capture under the lock: the paths found and ``reported`` (taken
        from the watcher just now) updated, drift recorded; None, with nothing changed, when
        only a full scan can do (the reason is logged)."""
        if self.found is None:
            log.info("verification of %s scans fully under the lock: %s", root, self.why_not)
            return None
        wanted = self.found | reported
        if len(wanted) > DIRTY_LIMIT:
            log.info("verification of %s scans fully: %d paths changed", root, len(wanted))
            return None
        started = time.monotonic()
        unannounced = self.found - reported
        before = index.entry_ids(unannounced)
        capture = index.capture_changed(wanted)
        if capture is None:
            log.info("verification of %s scans fully: the per-path update declined", root)
            return None
        after = index.entry_ids(unannounced)
        # The whole scan's length, though the lock was held for little of it: a verification
        # still waits for a quiet worktree when its scan is long, so it spares the CPU too.
        source.scanned(root, self.held_s + self.scan_s + time.monotonic() - started)
        changed = {p for p in unannounced if before[p] != after[p]}
        if changed:
            source.drift(root, changed, reported)
        log.debug("verification of %s: %d path(s) found off the lock in %.2fs, %d changed "
                  "without an event", root, len(self.found), self.scan_s, len(changed))
        return capture


def _release_freed_memory() -> None:
    """Hand the scan's memory back to the system: the second copy of a million-entry cache and
    the diff's listing of the worktree (about 230 MB) are freed by now, but glibc's allocator
    keeps freed memory mapped (the daemon stayed 210 MB larger after each verification, at 530
    MB against a 600 MB budget). Elsewhere than glibc there is nothing to call."""
    if _LIBC is not None:
        _LIBC.malloc_trim(0)


class _CannotStandIn(Exception):
    """What the scan found needs the full scan (its message says why)."""


def _changed_paths(gitdir: Path, root: Path, unreadable: set[str]) -> set[str]:
    """The worktree-relative paths whose content differs from the stat cache file in
    ``gitdir``: libgit2's diff of that file against the worktree. Files known unreadable, or
    found so, are held out of the diff (it fails on them) and listed, to be tried again."""
    index = pygit2.Repository(str(gitdir)).index
    held = {p for p in unreadable if p in index}
    for path in held:
        index.remove(path)
    while True:
        try:
            deltas = index.diff_to_workdir(_DETECT_FLAGS).deltas
            break
        except pygit2.GitError as exc:
            if "nesting too deep" in str(exc):
                raise _CannotStandIn("directories nested deeper than libgit2 walks") from exc
            rel = unreadable_path(exc, root)
            if rel is None or rel in held or rel not in index:
                raise
            held.add(rel)
            index.remove(rel)
    found = set(held)
    for delta in deltas:
        if delta.status == DeltaStatus.TYPECHANGE:
            raise _CannotStandIn(f"{delta.new_file.path} changed type")
        path = (delta.old_file if delta.status == DeltaStatus.DELETED else delta.new_file).path
        if path.endswith("/"):
            raise _CannotStandIn(f"{path} is a nested repository or a directory it cannot list")
        found.add(path)
        if len(found) > DIRTY_LIMIT:
            raise _CannotStandIn(f"more than {DIRTY_LIMIT} paths changed")
    # A file where a directory was, or the reverse, shows as a deletion and an addition under
    # one name: the per-path update cannot express that.
    for path in found:
        for directory in directories_of(path):
            if directory in found:
                raise _CannotStandIn(f"{directory} changed between file and directory")
    return found
