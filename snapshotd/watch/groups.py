"""Groups of watched worktrees sharing a notifier: starting them, merging them, routing events.

Owns the list of live ``NotifierGroup``s, the start of a notifier for newly watched worktrees
(and the classification of a failure down to the worktree that causes it), the background
merge of small notifiers into one, and ``dispatch``: turning a batch of a notifier's events into
changed paths (``Entry.changes``) and settle windows (``Entry.window``). Promises:
- Routing is by path: an event reaches every live watched worktree of its notifier whose root
  is the event's path or one of its ancestors (nested worktrees each see the events below them),
  found through an index of the notifier's roots, so its cost does not grow with the group.
- Changes inside any ``.git`` never reach a worktree; ignored paths go to the changed-path set
  but open no window. A path the ignore rules cannot be applied to is treated as not ignored,
  logged once per watch and counted (``ignore_errors``).
- A merge starts the new notifier before the old ones retire, and a capture of a moved worktree
  sends its cookie through the old notifier too until one cookie has gone through each old one
  (``Changes.draining``), so no event falls between them.
"""

from __future__ import annotations

import errno
import logging
import os
import threading
import time
from collections.abc import Iterable
from pathlib import Path

from snapshotd.watch.fastpath import COOKIE_TIMEOUT_S, DIRTY_LIMIT
from snapshotd.watch.notifier import DELETED, OVERFLOW, Event, watch_headroom
from snapshotd.watch.notifier_group import STEP_MS, CookieDirLost, NotifierGroup
from snapshotd.watch.state import Entry, Host, WatchState, describe_watch_error

log = logging.getLogger("snapshotd.watcher")

# Notifiers are merged only once no new one was started for this long (s).
MERGE_QUIET_S = 3.0
# Groups of fewer live worktrees than this are merged together.
MERGE_SMALL = 8
# When a merge failed, the next try waits this long; at the watch limit, longer.
MERGE_RETRY_S = 60.0
MERGE_RETRY_AT_LIMIT_S = 900.0
# A merge takes at most this share of the watches still free (other processes of the user may
# take some meanwhile); what does not fit is merged in a later round, beside the first.
MERGE_HEADROOM_SHARE = 0.9
# Never trust a ctime further than this from when the event arrived (s): clocks and touch -d.
MAX_EVENT_AGE_S = 5 * STEP_MS / 1000
# At most this many paths of one batch per worktree are stat'ed for the settle clock.
STAMP_PATHS = 64


class Groups:
    """The live notifiers and the worktrees each carries."""

    def __init__(self, state: WatchState, host: Host) -> None:
        self.state = state
        self.host = host
        self.groups: list[NotifierGroup] = []
        self.last_group_start = 0.0
        self.merge_not_before = 0.0
        self.merging = False

    def watch(self, entries: list[Entry], *, record: bool = True) -> None:
        """Start one notifier for ``entries``; on failure find out which worktree fails and put
        only those in degraded mode (``record``: with a gap)."""
        entries = [e for e in entries if e.watched()]
        if not entries:
            return
        try:
            group = self._new_group([e.root for e in entries])
        except Exception as exc:  # noqa: BLE001 - classified below
            if len(entries) == 1:
                self.host.watch_failed(entries[0], exc, record=record)
                return
            for entry in entries:
                self.watch([entry], record=record)
            return
        with self.state.cond:
            if self.state.stopping:
                group.close()
                return
            for entry in entries:
                entry.group = group
                # Events before this watch existed are unknown: a full scan comes first.
                entry.changes.baseline = False
                entry.changes.dirty = set()
                entry.changes.aliased = False
            self.groups.append(group)
            self.last_group_start = time.monotonic()
            self.state.counters["groups_started"] += 1
        group.start()

    def forget(self, group: NotifierGroup) -> bool:
        """Remove ``group`` if no entry uses it any more (True: the caller retires it). Under
        the lock."""
        if any(e.group is group for e in self.state.entries.values()):
            return False
        self.groups = [g for g in self.groups if g is not group]
        return True

    def group_failed(self, group: NotifierGroup, exc: BaseException) -> None:
        """A notifier died (its queue is lost): degrade the worktree it names, rewatch the
        others and rescan them all. One that lost its cookie directory (``CookieDirLost``)
        dispatched its queue first: all its worktrees are rewatched and rescanned."""
        message = str(exc)
        with self.state.cond:
            self.groups = [g for g in self.groups if g is not group]
            victims = [e for e in self.state.entries.values() if e.group is group]
            for entry in victims:
                entry.group = None
        named = [e for e in victims if f'"{e.root}/' in message or f'"{e.root}"' in message]
        # A notifier whose cookie directory was removed dispatched its queue first: nothing of
        # its worktrees was missed; they are watched again and rescanned, no gap.
        intact = isinstance(exc, CookieDirLost)
        log.warning("notifier for %d worktree(s) failed: %s", len(victims), message)
        for entry in [e for e in victims if e.attempt is None]:
            # Nothing is owed to an ended attempt: a lingering watch just ends (its captures
            # scan fully again), with no gap.
            self.host.drop(entry)
        victims = [e for e in victims if e.attempt is not None]
        for entry in victims:
            if intact or (named and entry not in named):
                # Its events in the failed batch are lost: rescan, no gap (nothing was missed).
                with self.state.cond:
                    entry.checks.verify_at = time.monotonic()
                    entry.checks.verify_since = time.monotonic()
                continue
            self.host.degrade(entry, "watch-failed", describe_watch_error(exc))
        rest = [e for e in victims if e not in named and e.attempt is not None]
        if rest and not self.state.stopping:
            self.watch(rest)

    # -- merging ---------------------------------------------------------------------------

    def merge_plan(self, now: float) -> bool | float | None:
        """True when small notifiers should be merged now, a time to look again, or None.
        Under the lock."""
        if self.merging:
            return None
        live = self._live_counts()
        small = [g for g in self.groups if not g.retired and live.get(g, 0) < MERGE_SMALL]
        dead = [g for g in self.groups
                if not g.retired and len(g.roots) - live.get(g, 0) > live.get(g, 0)]
        if len(small) < 2 and not dead:
            return None
        at = max(self.last_group_start + MERGE_QUIET_S, self.merge_not_before)
        return True if now >= at else at

    def start_merge(self) -> None:
        """Merge in a thread of its own: walking big trees must not hold up settle windows.
        Under the lock."""
        self.merging = True
        threading.Thread(target=self._merge, daemon=True, name="snapshotd-watch-merge").start()

    def _live_counts(self) -> dict[NotifierGroup, int]:
        counts: dict[NotifierGroup, int] = {}
        for entry in self.state.entries.values():
            if entry.group is not None:
                counts[entry.group] = counts.get(entry.group, 0) + 1
        return counts

    def _merge(self) -> None:
        """Replace small (or mostly dead) notifiers by one. The new one runs before the old ones
        retire, and retiring ones drain their queues, so no event falls between them."""
        try:
            self._merge_now()
        finally:
            with self.state.cond:
                self.merging = False
                self.state.cond.notify_all()

    def _merge_now(self) -> None:
        cond = self.state.cond
        with cond:
            if self.state.stopping:
                return
            live = self._live_counts()
            old = [g for g in self.groups if not g.retired and
                   (live.get(g, 0) < MERGE_SMALL or len(g.roots) - live.get(g, 0)
                    > live.get(g, 0))]
            fitting = _fitting(old, live, watch_headroom())
            if fitting is None:
                # The merged notifier holds its watches beside the old ones' until they retire:
                # not even two of them fit under the watch limit now.
                self.merge_not_before = time.monotonic() + MERGE_RETRY_AT_LIMIT_S
                log.info("not merging %d notifiers: their watches do not fit twice under the "
                         "watch limit (next try in %.0f s)", len(old), MERGE_RETRY_AT_LIMIT_S)
                return
            old = fitting
            entries = [e for e in self.state.entries.values()
                       if e.group in old and e.watched()]
            started_at = self.last_group_start
        if not old:
            return
        if not entries:
            with cond:
                self.groups = [g for g in self.groups if g not in old]
            for group in old:
                group.retire()
            return
        try:
            group = self._new_group([e.root for e in entries])
        except Exception as exc:  # noqa: BLE001 - keep the working notifiers
            # At the watch limit the merged notifier cannot exist beside the ones it would
            # replace (it needs their watches again): trying each minute walked every tree
            # again for nothing (100 worktrees of 10,000 files: 82,575 watches added and
            # dropped a minute), so wait longer.
            retry = MERGE_RETRY_AT_LIMIT_S if getattr(exc, "errno", None) == errno.ENOSPC \
                else MERGE_RETRY_S
            log.warning("could not merge %d notifiers (next try in %.0f s): %s", len(old),
                        retry, exc)
            with cond:
                self.merge_not_before = time.monotonic() + retry
            return
        moved = self._move(entries, old, group, started_at)
        if moved is None:
            return
        group.start()
        # One cookie through each old notifier: every event it queued before the new watch
        # existed is then in the worktrees' changed paths, and the new notifier alone vouches.
        handed_over = all(g.sync(COOKIE_TIMEOUT_S * 4) for g in old)
        for g in old:
            g.handed_over = handed_over
        with cond:
            for entry in moved:
                entry.changes.draining = []
                if not handed_over:
                    entry.changes.baseline = False  # the next capture scans, once
        for g in old:
            g.retire()
        log.info("merged %d notifiers into one for %d worktrees", len(old), len(entries))

    def _move(self, entries: list[Entry], old: list[NotifierGroup], group: NotifierGroup,
              started_at: float) -> list[Entry] | None:
        """Put ``entries`` on the merged ``group``; None when the watcher is stopping."""
        moved: list[Entry] = []
        with self.state.cond:
            if self.state.stopping:
                group.close()
                return None
            for entry in entries:
                if entry.group in old:
                    # A write made before the new watch existed is queued only in the old
                    # notifier, which a cookie on the new one proves nothing about: until the
                    # old one is drained, a capture syncs it too (``FastPath.take``).
                    entry.changes.draining = [entry.group]
                    entry.group = group
                    moved.append(entry)
            self.groups = [g for g in self.groups if g not in old] + [group]
            self.state.counters["merges"] += 1
            self.last_group_start = max(started_at, self.last_group_start)
            self.merge_not_before = time.monotonic() + MERGE_QUIET_S
        return moved

    def _new_group(self, roots: list[str]) -> NotifierGroup:
        state = self.state
        return NotifierGroup(Path(state.service.home), roots, state.config.notifier,
                             self.dispatch, self.group_failed, state.count_error)

    # -- events ----------------------------------------------------------------------------

    def dispatch(self, group: NotifierGroup, changes: Iterable[Event]) -> None:
        """Turn one batch of events into changed paths and open or extended windows (called
        by notifier threads and cookie round trips)."""
        arrived = time.monotonic()
        wall = time.time()
        router = _Router(self.state, group)
        with self.state.cond:
            router.route(changes)
        for root in router.root_events:
            self.host.check_root(root)
        if router.buckets:
            self._settle_clock(router.buckets, arrived, wall)

    def _settle_clock(self, buckets: dict[str, list[str]], arrived: float, wall: float) -> None:
        """Open or extend the windows of the worktrees that saw relevant events."""
        stamps = {root: latest_change(paths, arrived, wall) for root, paths in buckets.items()}
        state = self.state
        with state.cond:
            for root, when in stamps.items():
                entry = state.entries.get(root)
                if entry is None or not entry.watched():
                    continue
                if entry.attempt is None:
                    if entry.linger.lingering:
                        # Passive: no settle window, no tier-2 capture. The event keeps the
                        # watch alive and asks for a verification.
                        entry.checks.last_event = max(entry.checks.last_event, when)
                        entry.linger.mark = max(entry.linger.mark, arrived)
                    continue
                entry.checks.last_event = max(entry.checks.last_event, when)
                entry.checks.verify_at = None
                window = entry.window
                if window.first is None:
                    window.first = when
                    window.wall = wall - (arrived - when)
                    state.markers.write(entry)
                window.last = max(window.last or when, when)
            state.cond.notify_all()


class _Router:
    """One batch of one notifier's events on its way to the worktrees (under the lock)."""

    def __init__(self, state: WatchState, group: NotifierGroup) -> None:
        self.state = state
        self.group = group
        # By the group's roots, not the entries' current group: a retiring notifier's last
        # events may predate its successor.
        self.roots = group.roots
        self.cookie_prefix = group.cookie_prefix
        self.follows_links = group.follows_symlinks
        self.buckets: dict[str, list[str]] = {}  # root -> relevant paths (for the clock)
        self.root_events: set[str] = set()
        self._real_dirs: dict[str, str] = {}  # this batch's realpath of each event's directory
        self._under: dict[str, list[Entry]] = {}  # directory -> live entries at or above it

    def route(self, changes: Iterable[Event]) -> None:
        """Route a batch (one loop with everything it needs in locals: this runs for every
        event, and on a capture's path when a cookie round trip drains the queue)."""
        prefix = self.cookie_prefix
        roots = self.roots
        under = self._under
        deliver = self._deliver
        for change, path in changes:
            if path.startswith(prefix):
                self.group.cookie_seen(path[len(prefix):])
                continue
            if change == OVERFLOW:
                self._overflow()
                continue
            if path in roots:
                entry = self._live(path)
                if entry is not None:
                    self.root_events.add(path)
                    entry.changes.overflow = True  # the root itself changed: only a scan can tell
            parent = path.rpartition("/")[0]
            entries = under.get(parent)
            if entries is None:
                entries = self._containing(parent)
            for entry in entries:
                deliver(entry, change, path, parent)

    def _overflow(self) -> None:
        """The kernel dropped events: every worktree of this notifier is owed a full scan, and
        a capture (something changed that nobody saw)."""
        self.state.counters["overflows"] += 1
        self.group.overflowed()
        for root in self.roots:
            entry = self._live(root)
            if entry is None:
                continue
            entry.changes.overflow = True
            entry.changes.dirty, entry.changes.removed = set(), set()
            self.buckets.setdefault(root, [])
            self.root_events.add(root)

    def _live(self, root: str) -> Entry | None:
        entry = self.state.entries.get(root)
        if entry is None or not entry.live() or not entry.watched():
            return None
        return entry

    def _containing(self, directory: str) -> list[Entry]:
        """The live entries whose root is ``directory`` or one of its ancestors."""
        found = self._under.get(directory)
        if found is None:
            if not directory:
                found = []
            else:
                found = list(self._containing(directory.rpartition("/")[0]))
                entry = self._live(directory) if directory in self.roots else None
                if entry is not None:
                    found.append(entry)
            self._under[directory] = found
        return found

    def _deliver(self, entry: Entry, change: int, path: str, parent: str) -> None:
        root = entry.root
        rel = path[len(root) + 1:]
        changes = entry.changes
        if self.follows_links and parent != root:
            rel = self._unaliased(entry, path, parent)
            if rel is None:
                return
        if _inside_git(rel):
            return
        # Every path goes to the fast path's set (a tracked file may match an ignore rule);
        # only relevant ones open a settle window.
        if not changes.overflow:
            changes.dirty.add(rel)
            if change == DELETED:
                changes.removed.add(rel)
            if len(changes.dirty) > DIRTY_LIMIT:
                changes.overflow = True
                changes.dirty, changes.removed = set(), set()
        if entry.matcher is not None and self._ignored(entry, rel):
            return
        bucket = self.buckets.setdefault(root, [])
        if len(bucket) < STAMP_PATHS:
            bucket.append(path)

    def _unaliased(self, entry: Entry, path: str, parent: str) -> str | None:
        """``path``'s worktree-relative name as the notifier may have reported it through a
        symlinked directory (watchfiles follows them); None when it lies outside the tree."""
        root = entry.root
        real_dirs = self._real_dirs
        real = real_dirs.get(parent)
        if real is None:
            real = real_dirs[parent] = os.path.realpath(parent)
        real_root = real_dirs.get(root)
        if real_root is None:
            real_root = real_dirs[root] = os.path.realpath(root)
        if real == real_root + parent[len(root):]:
            return path[len(root) + 1:]
        # Reported through a symlinked directory: which path really changed is a guess, so the
        # next capture scans.
        changes = entry.changes
        if not changes.aliased:
            log.info("%s has a symlinked directory the notifier follows; its captures use "
                     "full stat scans", root)
        changes.aliased = changes.overflow = True
        changes.dirty = set()
        if not real.startswith(real_root + "/"):
            return None  # a change outside the worktree: not its content
        return real[len(real_root) + 1:] + "/" + path.rpartition("/")[2]

    def _ignored(self, entry: Entry, rel: str) -> bool:
        try:
            return bool(entry.matcher.path_is_ignored(rel))  # type: ignore[attr-defined]
        except Exception as exc:  # noqa: BLE001 - when in doubt, look (and say so)
            self.state.count_error("ignore_errors", "cannot apply the ignore rules of %s to "
                                   "%r (treated as not ignored: it arms a capture): %s: %s",
                                   entry.root, rel, type(exc).__name__, exc,
                                   warn=not entry.ignore_warned)
            entry.ignore_warned = True
            return False


def _inside_git(rel: str) -> bool:
    return rel == ".git" or rel.startswith(".git/") or "/.git/" in f"/{rel}/"


def latest_change(paths: list[str], arrived: float, wall: float) -> float:
    """Monotonic estimate of the latest change among ``paths``: their ctimes (or, for a deleted
    path, its directory's), bounded by when the batch arrived. The settle clock runs from here,
    so the notifier's polling step does not delay captures."""
    newest = None
    for path in paths:
        for candidate in (path, os.path.dirname(path)):
            try:
                ctime = os.lstat(candidate).st_ctime
            except OSError:
                continue
            newest = ctime if newest is None else max(newest, ctime)
            break
    if newest is None:
        return arrived - STEP_MS / 1000
    age = min(max(wall - newest, 0.0), MAX_EVENT_AGE_S)
    return arrived - age


def _fitting(groups: list[NotifierGroup], live: dict[NotifierGroup, int],
             headroom: int | None) -> list[NotifierGroup] | None:
    """Which of ``groups`` (in order) to merge now: those whose live worktrees' watches a
    merged notifier can add beside the watches they hold (all of them with no known limit);
    a group with no live worktree needs none and always goes. None when fewer than two groups
    with live worktrees fit and no group is only to be retired."""
    if headroom is None:
        return groups
    budget = int(headroom * MERGE_HEADROOM_SHARE)
    chosen: list[NotifierGroup] = []
    for group in groups:
        needed = getattr(group.notify, "watch_count", 0) if live.get(group, 0) else 0
        if needed <= budget:
            chosen.append(group)
            budget -= needed
    with_live = [g for g in chosen if live.get(g, 0)]
    if len(with_live) < 2 and len(with_live) == len(chosen):
        return None
    return chosen
