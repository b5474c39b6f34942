"""The fast path's change source: which paths of a watched worktree changed since its last capture.

Owns ``FastPath`` (``take`` / ``failed`` / ``drift``), the ``Service.change_source`` the watcher
installs, and when the watcher vouches for a worktree's changed paths (``Entry.changes``). Promises:
- ``take`` never vouches for a path set it cannot stand behind: not before a full scan under the
  current notifier (``baseline``), not after a queue overflow or drift, not when a path changed
  type (file <-> directory), not for a watch whose notifier reported an event through a
  symlinked directory, not for a lingering worktree gone ``QUIET_VERIFY_FACTOR`` verify intervals
  without a verification or a fresh baseline, and not unless a cookie round trip through every
  notifier that may hold one of its events came back in time. Then the caller scans fully.
- Drift (a verification found changes no event reported) is one ``watcher-drift`` gap and turns
  the fast path off for that worktree for ``FAST_OFF_S``; a file written during the scan, or under
  a directory an event reported whole, is not drift.
- ``take`` costs two short holds of the watcher's lock and the cookie round trip(s); nothing in
  it grows with the number of watched worktrees.
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from snapshotd.watch.state import Entry, WatchState

if TYPE_CHECKING:
    from snapshotd.watch.notifier_group import NotifierGroup

log = logging.getLogger("snapshotd.watcher")

# A tier-1 capture trusts the watcher's changed paths only after a cookie round trip proves
# every earlier event has arrived; it waits at most this long (s).
COOKIE_TIMEOUT_S = 0.25
# Past this many changed paths a full stat scan is cheaper than updating them one by one.
DIRTY_LIMIT = 4096
# A worktree with no event since its last verification is verified this many times less often.
QUIET_VERIFY_FACTOR = 10
# After drift, captures of that worktree use full scans for this long (s).
FAST_OFF_S = 300.0


class FastPath:
    """``Service.change_source``: the watched worktrees' changed paths, vouched for or not."""

    def __init__(self, state: WatchState) -> None:
        self.state = state

    def take(self, root: Path, mode: str) -> set[str] | None:
        """The paths changed in ``root`` since its last capture, after a cookie round trip
        proves every earlier event has been seen. None (and a full scan) when the watch cannot
        vouch: not watching, no full scan yet under this watch, too many changes, recent drift,
        or the cookie did not come back in time (``mode``: ``fast``, ``narrow`` or ``verify``, as
        ``ChangeSource.take``). Called under the worktree lock, so captures never interleave."""
        cond = self.state.cond
        with cond:
            entry = self.state.entries.get(str(root))
            if entry is None:
                return None
            group = entry.group
            if not self._vouches(entry, time.monotonic()):
                reset_dirty(entry)
                return None
            draining = list(entry.changes.draining)
        assert group is not None
        if not _round_trip(group, draining):
            with cond:
                reset_dirty(entry)
            return None
        changes = entry.changes
        with cond:
            # A merge may have moved the entry to a new notifier meanwhile: the one synced here
            # watched it all along (until it retires, when its sync fails), so its cookie still
            # proves the set complete. A new watch or a failure resets the baseline.
            if changes.overflow or not changes.baseline:
                reset_dirty(entry)
                return None
            changed, changes.dirty = changes.dirty, set()
            removed, changes.removed = changes.removed, set()
        if mode != "verify" and type_changed(entry.root, changed, removed):
            return None  # the full scan that follows sees everything; the baseline stays
        if mode == "fast":
            with cond:
                changes.fast_captures += 1
                changes.last_fast = time.monotonic()
        return changed

    def scanned(self, root: Path, seconds: float) -> None:
        """A stat scan of the whole of ``root`` took ``seconds``: what its next verification
        will cost (the settler waits for a quiet worktree when that is long)."""
        with self.state.cond:
            entry = self.state.entries.get(str(root))
            if entry is not None:
                entry.checks.verify_took = seconds

    def failed(self, root: Path) -> None:
        """The capture that took the changes failed: they are owed, so the next capture scans."""
        with self.state.cond:
            entry = self.state.entries.get(str(root))
            if entry is not None:
                entry.changes.baseline = False

    def drift(self, root: Path, found: set[str], reported: set[str]) -> None:
        """A verification took ``reported`` (the changed paths since the last capture), then
        its full scan found ``found`` changed besides: record drift for what no event names.
        Not drift: a file under a directory reported whole (a new directory's files are found
        by the crawl of it, not by events of their own), nor a path written while the scan ran
        (found by the scan, its event in the set since the take: a cookie round trip first, so
        every such event has arrived). When the watch cannot say what came meanwhile (overflow,
        no cookie back), nothing is recorded: it stops vouching, and captures scan fully."""
        missed = uncovered(found, reported)
        if not missed:
            return
        late = self._reported_since_take(root)
        if late is None:
            log.info("verification of %s: %d change(s) found beyond the events taken, and the "
                     "watch cannot say what came during the scan: not judged as drift",
                     root, len(missed))
            return
        missed = sorted(uncovered(missed, late))
        if not missed:
            return
        with self.state.cond:
            entry = self.state.entries.get(str(root))
        if entry is None:
            return
        shown = ", ".join(missed[:10]) + (f" and {len(missed) - 10} more" if len(missed) > 10
                                          else "")
        self.record_drift(entry, f"a verification scan found {len(missed)} change(s) no event "
                          f"reported ({shown})")

    def late(self, root: Path) -> set[str] | None:
        """The paths reported changed in ``root`` since its last ``take`` (left in place for
        the next one), after a cookie round trip: what changed while a capture read the tree
        (``snapshotd.service.settling``). ``{""}`` when the watch cannot say which paths (the
        queue overflowed, no cookie came back); None when ``root`` is not watched live."""
        cond = self.state.cond
        with cond:
            entry = self.state.entries.get(str(root))
            if entry is None or entry.state != "watching" or entry.group is None:
                return None
        found = self._reported_since_take(root)
        return {""} if found is None else found

    def record_drift(self, entry: Entry, found: str) -> None:
        """Record drift in ``entry`` (``found`` says what was found): the ``watcher-drift``
        gap, and full scans for ``FAST_OFF_S``."""
        with self.state.cond:
            now = time.monotonic()
            entry.changes.drifts += 1
            entry.changes.drift_at = now
            entry.changes.fast_off_until = now + FAST_OFF_S
        log.warning("watcher drift in %s: %s", entry.root, found)
        self.state.gap(entry, "watcher-drift", f"{found}; captures of this worktree use full "
                       f"stat scans for the next {FAST_OFF_S:g}s")

    def fast_path_on(self, entry: Entry, now: float) -> bool:
        """Whether ``status`` shows the fast path as on for ``entry``. Under the lock."""
        changes = entry.changes
        return (changes.baseline and entry.state == "watching" and now >= changes.fast_off_until
                and not changes.aliased
                and (entry.attempt is not None
                     or (entry.linger.lingering and not self.linger_stale(entry, now))))

    def linger_stale(self, entry: Entry, now: float) -> bool:
        """Whether a lingering entry has gone too long without a verification or a fresh
        baseline for its dirty set to be trusted (a quiet one is never scanned to renew it)."""
        every = self.state.config.verify_interval_s
        last = max(entry.checks.last_verify, entry.changes.baseline_at)
        return now - last >= every * QUIET_VERIFY_FACTOR

    def _reported_since_take(self, root: Path) -> set[str] | None:
        """The paths reported changed in ``root`` since its changes were last taken, once a
        cookie round trip proves every earlier event has arrived (left in place: the next
        capture still takes them). None when the watch cannot vouch for that set."""
        cond = self.state.cond
        with cond:
            entry = self.state.entries.get(str(root))
            if entry is None or entry.group is None or entry.group.retired:
                return None
            group = entry.group
            draining = list(entry.changes.draining)
        if not _round_trip(group, draining):
            return None
        with cond:
            changes = entry.changes
            if changes.overflow or not changes.baseline:
                return None
            return set(changes.dirty)

    def _vouches(self, entry: Entry, now: float) -> bool:
        """Whether the watch may vouch for ``entry``'s changed paths (cookie aside)."""
        group = entry.group
        changes = entry.changes
        return ((entry.attempt is not None
                 or (entry.linger.lingering and not self.linger_stale(entry, now)))
                and entry.state == "watching" and group is not None and not group.retired
                and changes.baseline and not changes.overflow and not changes.aliased
                and now >= changes.fast_off_until)


def reset_dirty(entry: Entry) -> None:
    """A full scan is about to run. Under the lock. Changes from now on are in ``dirty``; the
    scan sees everything before, so the set is complete again once the watch is live."""
    changes = entry.changes
    changes.dirty = set()
    changes.removed = set()
    changes.overflow = False
    changes.baseline = (entry.state == "watching" and entry.group is not None
                        and not entry.group.retired)
    if changes.baseline:
        changes.baseline_at = time.monotonic()


def _round_trip(group: NotifierGroup, draining: list[NotifierGroup]) -> bool:
    """A cookie round trip through ``group`` and the notifiers a merge is ``draining`` into
    it: True once every event queued before it has been dispatched. An old notifier the merge
    has drained meanwhile needs no cookie of ours: it then retires (its sync fails), and what
    came after the new watch began is in ``group``."""
    return (all(g.sync(COOKIE_TIMEOUT_S) or g.handed_over for g in draining)
            and group.sync(COOKIE_TIMEOUT_S))


def directories_of(path: str) -> Iterator[str]:
    """The directories holding worktree-relative ``path``, innermost first (``a/b/c``:
    ``a/b``, ``a``)."""
    parent = path.rpartition("/")[0]
    while parent:
        yield parent
        parent = parent.rpartition("/")[0]


def uncovered(paths: set[str], reported: set[str]) -> set[str]:
    """The paths of ``paths`` that neither ``reported`` nor a directory in it holding them
    names."""
    return {p for p in paths - reported
            if not any(d in reported for d in directories_of(p))}


def type_changed(root: str, changed: set[str], removed: set[str]) -> bool:
    """Whether a path changed type (file or link <-> directory) since the last capture: such a
    change always deletes the path first. The fast path's per-path update does not handle it
    (a directory holding only ignored files where a file was, or a file where a directory was,
    leaves stale entries), so the capture scans instead."""
    parents: set[str] | None = None
    for rel in removed:
        try:
            st = os.lstat(os.path.join(root, rel))
        except OSError:
            continue  # gone: a plain deletion
        if stat.S_ISDIR(st.st_mode):
            return True  # deleted, then a directory: perhaps a file before
        if parents is None:
            parents = {d for p in changed for d in directories_of(p)}
        if rel in parents:
            return True  # a file or link now, and paths below it changed: a directory before
    return False
