"""Tier 2: the daemon's own watcher, turning quiet moments into checkpoints (DESIGN §1, §8).

Owns the watching of every active attempt's worktree, the settle windows, ``<home>/watch/``
(one small marker per worktree while a window is open), the ``flush`` hook, the capture of
pending windows at shutdown, and the ``watched`` rows of ``status``.

Promises:
- A worktree is watched from the moment its attempt becomes active (``attempt_begin``, a zero-setup
  session's first hook, or daemon start for attempts the ledger has as active) until it ends, is
  superseded or abandoned. Changes inside any ``.git`` and ignored paths never arm a capture.
- Linger: then, for ``linger_s`` (config; 0 = off) after its last event, the worktree stays
  watched passively: no settle window, no tier-2 capture, no gap owed to the ended attempt; only
  the changed-path set and the fast path's baseline live on, so its next capture (a restore's
  safety checkpoint, a resumed attempt taking the watch over) can be O(changes). A lingering
  worktree that saw events is verified (full scan, recording nothing, drift is a gap); a quiet one
  is never scanned: after ``QUIET_VERIFY_FACTOR`` verify intervals without a verification or
  a fresh baseline, ``take`` stops vouching for it. It ends when the worktree goes or is replaced.
- Settle: a tier-2 capture (source ``watch``) once no change has been seen for ``settle_ms``, and at
  the latest ``max_wait_ms`` after the first change not yet in a checkpoint. Both come from the
  daemon's config unless the attempt row overrides them. Captures go through
  ``Service.capture_attempt`` (worktree lock, dedup); an ended or fenced attempt is never captured.
- Events say only *when* to look: every capture is a full stat scan through the stat cache, so files
  in directories created a moment before, or events the kernel dropped, still reach the checkpoint.
  After a burst's last capture, one verification scan checks that nothing was missed; changes it
  finds that no event announced are a ``watch-events-lost`` gap.
- The fast path (``take``) never vouches for a path set it cannot stand behind: not before a full
  scan under the current notifier, not after the kernel's event queue overflowed (the inotify
  reader reports it) or drift, not when a path changed type (file <-> directory: the per-path
  update cannot express it), and, with the ``watchfiles`` notifier (systems without inotify),
  never for a watch that reported an event through a symlinked directory (it follows such links
  when it walks and then names the real directory's changes after the link).
- ``flush(root)`` returns once every change made before it was called is in a checkpoint (it waits
  for a running capture, then captures; an unchanged tree records nothing).
- SIGTERM: pending windows are captured before exit. A crash leaves the window's marker behind; at
  start-up each marker of a still-active attempt becomes a ``settle-window-missed`` gap (naming when
  the window opened) and an immediate capture.
- A watcher that fails (watch limit, permission denied, the worktree deleted or replaced)
  records a gap, shows the worktree as degraded in ``status`` and falls back to a periodic stat
  scan every ``scan_interval_s``, retrying the watch now and then; a deleted worktree ends its
  watch without a traceback and the daemon keeps serving the others.
- Idle costs nearly nothing: worktrees share a few notifiers (``snapshotd.notifier``: our own
  inotify reader on Linux, ``watchfiles`` elsewhere; new ones are merged into one once things are
  quiet), each read by one thread that sleeps in ``poll(2)`` until events come (a ``watchfiles``
  notifier is polled every ``STEP_MS``); nothing else wakes more often than ``scan_interval_s``.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import json
import logging
import os
import shutil
import stat
import threading
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from snapshotd import faults
from snapshotd.config import Config
from snapshotd.ledger import ACTIVE, Attempt
from snapshotd.notifier import DELETED, OVERFLOW, open_notifier
from snapshotd.service import Service, ServiceError
from snapshotd.store import worktree_id

log = logging.getLogger("snapshotd.watcher")

# How often a polled notifier's thread (watchfiles) looks at its queue (ms), and how long an
# inotify notifier's thread lets a burst gather before it takes it. It bounds how late a change
# is *noticed*; the settle clock runs from the files' ctimes, so it does not add to the delay.
STEP_MS = 50
# An inotify notifier's thread sleeps in poll(2) until events come; this much after the first
# one it takes what has gathered (s), so a burst is one batch, not thousands.
GATHER_S = 0.005
# ... and wakes at least this often anyway (s) to see whether it was retired.
IDLE_WAKE_S = 5.0
# Notifiers are merged only once no new one was started for this long (s).
MERGE_QUIET_S = 3.0
# Groups of fewer live worktrees than this are merged together.
MERGE_SMALL = 8
# After a burst's last capture, one verification scan this long after it (s, at least settle).
VERIFY_DELAY_S = 1.0
# How long to wait for late events before calling a verification's find "events lost" (s).
JUDGE_DELAY_S = 0.4
# A worktree whose attempt ended keeps its entry this long, so a superseding attempt on the same
# directory takes the watch over without a rebuild (s).
IDLE_GRACE_S = 5.0
# Retry a failed watch after this many scan intervals.
RETRY_SCANS = 15
# The fast path (issue 8): a tier-1 capture trusts the watcher's changed paths only after a
# cookie round trip proves every earlier event has arrived; it waits at most this long (s).
COOKIE_TIMEOUT_S = 0.25
# ... and polls for it without sleeping for this long first (s): a capture is waiting.
SYNC_SPIN_S = 0.001
# Past this many changed paths a full stat scan is cheaper than updating them one by one.
DIRTY_LIMIT = 4096
# A watched, quiet worktree is verified by a full stat scan this often (s; config
# ``verify_interval_s``): watchfiles does not report a kernel event-queue overflow, and even the
# inotify reader cannot see a bug of ours, so drift is looked for, not waited for.
PERIODIC_VERIFY_S = 60.0
# A worktree with no event since its last verification is verified this many times less often.
QUIET_VERIFY_FACTOR = 10
# After drift, captures of that worktree use full scans for this long (s).
FAST_OFF_S = 300.0
# Never trust a ctime further than this from when the event arrived (s): clocks and touch -d.
MAX_EVENT_AGE_S = 5 * STEP_MS / 1000


def attach(service: Service, server, config: Config) -> None:
    """Wire the watcher into a daemon: attempt listeners, flush, shutdown, status."""
    watcher = Watcher(service, config)
    service.on_attempt_active.append(watcher.attempt_active)
    service.on_attempt_inactive.append(watcher.attempt_inactive)
    server.flush_hook = watcher.flush
    server.shutdown_hooks.append(watcher.shutdown)
    server.status_extras.append(watcher.status)
    service.change_source = watcher
    watcher.start()


@dataclass
class _Entry:
    """One watched worktree and the attempt its captures belong to."""

    root: str
    attempt: Attempt | None
    identity: tuple[int, int] | None = None
    matcher: object | None = None  # pygit2.Repository whose path_is_ignored filters events
    group: _Group | None = None
    state: str = "watching"  # watching | degraded | missing
    reason: str | None = None  # why degraded / missing (a gap reason)
    detail: str | None = None
    window_first: float | None = None  # monotonic estimate of the first unsaved change
    window_last: float | None = None  # ... and of the latest one
    window_wall: float | None = None  # wall-clock time the window opened (marker, status)
    capturing: bool = False
    not_before: float = 0.0  # capture backoff after a failure
    failures: int = 0
    last_event: float = 0.0  # monotonic estimate of the latest relevant change seen
    verify_at: float | None = None
    verify_since: float = 0.0
    judge_at: float | None = None
    judge_since: float = 0.0
    judge_seq: int | None = None
    next_scan: float | None = None  # periodic stat scan while degraded
    retry_at: float | None = None  # next attempt to watch again / recover
    next_health: float = 0.0
    idle_since: float | None = None
    captures: int = 0
    # Fast path: paths changed since the last capture, trusted once a full scan has run under
    # the current watch (``baseline``) and no event may have been lost since.
    dirty: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)  # those of ``dirty`` with a delete event
    overflow: bool = False
    baseline: bool = False
    fast_off_until: float = 0.0
    next_verify: float = 0.0
    fast_captures: int = 0
    drifts: int = 0
    drift_at: float = 0.0  # a verification's drift is already on record: no second gap
    verified_mark: float = 0.0  # ``last_event`` when the last periodic verification started
    last_verify: float = 0.0
    baseline_at: float = 0.0  # when the current fast-path baseline was (re)established
    # Linger: the attempt ended, but the watch stays on (passively) so captures of the worktree
    # (a restore's safety checkpoint, a resumed attempt) keep the fast path.
    lingering: bool = False
    last_attempt: Attempt | None = None  # the ended attempt (gaps and status name it)
    linger_mark: float = 0.0  # monotonic: linger start or the latest relevant event since
    # The watchfiles notifier follows symlinks to directories when it walks the tree, and then
    # reports the real directory's events under the link's path (one inotify watch per inode).
    # Seen once, its paths cannot be trusted: the fast path stays off until the next watch.
    # (Our inotify reader never follows a link: never set with it.)
    aliased: bool = False
    # Notifiers this worktree was just merged away from, not yet drained: a capture's cookie
    # must go through them too before the changed paths can be trusted.
    draining: list[_Group] = field(default_factory=list)

    def watched(self) -> bool:
        """Whether a notifier should carry this worktree."""
        return self.state == "watching" or self.reason == "watch-events-lost"


class Watcher:
    """Every watched worktree, its settle window, and the threads that serve them."""

    def __init__(self, service: Service, config: Config) -> None:
        self.service = service
        self.config = config
        self.dir = Path(service.home) / "watch"
        self._cond = threading.Condition(threading.Lock())
        self._entries: dict[str, _Entry] = {}
        self._groups: list[_Group] = []
        self._last_group_start = 0.0
        self._merge_not_before = 0.0
        self._merging = False
        self._stopping = False
        self._captures = ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2)),
                                            thread_name_prefix="snapshotd-watch-capture")
        self._scheduler = threading.Thread(target=self._schedule_loop, name="snapshotd-settle",
                                           daemon=True)
        self.counters = {"captures": 0, "deduped": 0, "verifications": 0, "failures": 0,
                         "groups_started": 0, "merges": 0, "overflows": 0}

    # -- public entry points ---------------------------------------------------------------

    def start(self) -> None:
        """Resume watching the ledger's active attempts, then deal with windows a crash left."""
        self.dir.mkdir(mode=0o700, exist_ok=True)
        shutil.rmtree(Path(self.service.home) / "cookies", ignore_errors=True)
        attempts = self.service.ledger.active_attempts()
        newest: dict[str, Attempt] = {}
        for attempt in attempts:  # ordered by pk: the newest attempt of a worktree wins
            newest[attempt.worktree] = attempt
        fresh = [self._new_entry(a) for a in newest.values()]
        self._watch_entries([e for e in fresh if e.state == "watching"])
        self._scheduler.start()
        self._recover_markers()

    def attempt_active(self, attempt: Attempt) -> None:
        root = attempt.worktree
        with self._cond:
            entry = self._entries.get(root)
            if entry is not None:
                # A superseding (or resumed) attempt on the same directory takes the watch over
                # as it is, lingering or not: its dirty set and baseline stay valid.
                entry.attempt = attempt
                entry.idle_since = None
                entry.lingering = False
                entry.last_attempt = None
                missing = entry.state == "missing"
                self._cond.notify_all()
                if not missing:
                    return
                del self._entries[root]
        entry = self._new_entry(attempt)
        if entry.state == "watching":
            self._watch_entries([entry])

    def attempt_inactive(self, attempt: Attempt) -> None:
        with self._cond:
            entry = self._entries.get(attempt.worktree)
            if entry is None or entry.attempt is None or entry.attempt.key != attempt.key:
                return
            entry.attempt = None
            entry.idle_since = time.monotonic()
            self._close_window(entry)
            entry.verify_at = entry.judge_at = None
            if (self._linger_s() > 0 and entry.state == "watching" and entry.group is not None
                    and not entry.group.retired and not self._stopping):
                entry.lingering = True
                entry.last_attempt = attempt
                entry.linger_mark = time.monotonic()
            self._cond.notify_all()

    def flush(self, root: Path) -> None:
        """Return once every change made before the call is in a checkpoint of the attempt
        watching ``root`` (or its nearest watched ancestor); nothing to do when none is, or when
        the worktree is gone. A failed capture raises its ``ServiceError`` (its gap is written)."""
        entry = self._entry_for(str(root))
        if entry is None:
            return
        with self._cond:
            # A deleted worktree has nothing left to capture and its gap is on record; failing
            # here would only stop its attempt from ending.
            claim = self._claim(entry, wait=True)
        if claim is not None:
            self._run_capture(entry, claim, "flush", raise_errors=True)

    def take(self, root: Path, mode: str) -> set[str] | None:
        """The fast path's change source (``Service.change_source``): the paths changed in
        ``root`` since its last capture, after a cookie round trip proves every earlier event
        has been seen. None (and a full scan) when the watch cannot vouch: not watching, no full
        scan yet under this watch, too many changes, recent drift, or the cookie did not come
        back in time. Called under the worktree lock, so captures never interleave here."""
        with self._cond:
            entry = self._entries.get(str(root))
            group = entry.group if entry is not None else None
            now = time.monotonic()
            vouch = (entry is not None
                     and (entry.attempt is not None
                          or (entry.lingering and not self._linger_stale(entry, now)))
                     and entry.state == "watching" and group is not None and not group.retired
                     and entry.baseline and not entry.overflow and not entry.aliased
                     and now >= entry.fast_off_until)
            if entry is not None and not vouch:
                self._reset_dirty(entry)
            draining = list(entry.draining) if entry is not None else []
        if entry is None:
            return None
        if not vouch:
            return None
        assert group is not None
        # An old notifier the merge has drained meanwhile needs no cookie of ours: it then
        # retires (its sync fails), and what came after the new watch began is in ``group``.
        if not (all(g.sync(COOKIE_TIMEOUT_S) or g.handed_over for g in draining)
                and group.sync(COOKIE_TIMEOUT_S)):
            with self._cond:
                self._reset_dirty(entry)
            return None
        with self._cond:
            # A merge may have moved the entry to a new notifier meanwhile: the one synced here
            # watched it all along (until it retires, when its sync fails), so its cookie still
            # proves the set complete. A new watch or a failure resets the baseline.
            if entry.overflow or not entry.baseline:
                self._reset_dirty(entry)
                return None
            changed, entry.dirty = entry.dirty, set()
            removed, entry.removed = entry.removed, set()
        if mode == "fast" and _type_changed(entry.root, changed, removed):
            return None  # the full scan that follows sees everything; the baseline stays
        if mode == "fast":
            with self._cond:
                entry.fast_captures += 1
        return changed

    def failed(self, root: Path) -> None:
        """The capture that took the changes failed: they are owed, so the next capture scans."""
        with self._cond:
            entry = self._entries.get(str(root))
            if entry is not None:
                entry.baseline = False

    def drift(self, root: Path, missed: list[str]) -> None:
        """A full scan found changes no event reported: record it, and scan for a while."""
        with self._cond:
            entry = self._entries.get(str(root))
            if entry is None:
                return
            entry.drifts += 1
            entry.drift_at = time.monotonic()
            entry.fast_off_until = time.monotonic() + FAST_OFF_S
        shown = ", ".join(missed[:10]) + (f" and {len(missed) - 10} more" if len(missed) > 10
                                          else "")
        log.warning("watcher drift in %s: %s", root, shown)
        self._gap(entry, "watcher-drift", f"a verification scan found {len(missed)} change(s) "
                  f"no event reported ({shown}); captures of this worktree use full stat scans "
                  f"for the next {FAST_OFF_S:g}s")

    def _reset_dirty(self, entry: _Entry) -> None:
        """A full scan is about to run. Under the lock. Changes from now on are in ``dirty``; the
        scan sees everything before, so the set is complete again once the watch is live."""
        entry.dirty = set()
        entry.removed = set()
        entry.overflow = False
        entry.baseline = (entry.state == "watching" and entry.group is not None
                          and not entry.group.retired)
        if entry.baseline:
            entry.baseline_at = time.monotonic()

    def shutdown(self) -> None:
        """Stop watching, then capture every window still open (SIGTERM path)."""
        with self._cond:
            self._stopping = True
            groups = list(self._groups)
            self._cond.notify_all()
        for group in groups:
            group.retire()
        for group in groups:
            group.join()  # each drains its notifier into the windows before it ends
        self._scheduler.join(timeout=10)
        self._captures.shutdown(wait=True)
        with self._cond:
            pending = [e for e in self._entries.values()
                       if e.attempt is not None and e.window_first is not None]
        for entry in pending:
            with self._cond:
                claim = self._claim(entry, wait=True)
            if claim is not None:
                self._run_capture(entry, claim, "shutdown")

    def status(self) -> dict:
        now = time.monotonic()
        rows = []
        with self._cond:
            entries = list(self._entries.values())
            groups = len([g for g in self._groups if not g.retired])
        for e in entries:
            attempt = e.attempt
            age = None
            if attempt is not None:
                last = self.service.ledger.last_checkpoint(attempt.pk)
                if last is not None:
                    age = round(max(0.0, time.time() - float(last["created_at"])), 3)
            settle, max_wait = self._timing(e)
            lingering = attempt is None and e.lingering
            rows.append({
                "path": e.root,
                "attempt": _fmt(attempt) if attempt else None,
                "state": (e.state if attempt is not None
                          else "lingering" if lingering else "idle"),
                "ended_attempt": (_fmt(e.last_attempt) if lingering and e.last_attempt
                                  else None),
                "linger_left_s": (round(max(0.0, e.linger_mark + self._linger_s() - now), 1)
                                  if lingering else None),
                "degraded_reason": e.reason if e.state != "watching" else None,
                "detail": e.detail if e.state != "watching" else None,
                "window_open_s": round(now - e.window_first, 3) if e.window_first else None,
                "capturing": e.capturing,
                "last_checkpoint_age_s": age,
                "settle_ms": int(settle * 1000), "max_wait_ms": int(max_wait * 1000),
                "captures": e.captures,
                "fast_path": ("on" if e.baseline and e.state == "watching"
                              and now >= e.fast_off_until and not e.aliased
                              and (attempt is not None
                                   or (lingering and not self._linger_stale(e, now)))
                              else "off"),
                "fast_captures": e.fast_captures, "drifts": e.drifts,
                "symlinked_dirs": e.aliased,
            })
        return {"watched": rows,
                "watcher": {"notifiers": groups, "step_ms": STEP_MS, **self.counters}}

    # -- entries and notifiers -------------------------------------------------------------

    def _new_entry(self, attempt: Attempt) -> _Entry:
        """An entry for ``attempt``'s worktree with its ignore matcher, registered."""
        entry = _Entry(root=attempt.worktree, attempt=attempt)
        identity = _identity(entry.root)
        if identity is None:
            entry.state, entry.reason = "missing", "worktree-missing"
            entry.detail = f"{entry.root} does not exist or is not a directory"
            entry.next_health = time.monotonic() + self.config.scan_interval_s
        else:
            entry.identity = identity
            entry.matcher = self._matcher(entry.root)
        with self._cond:
            self._entries[entry.root] = entry
            self._cond.notify_all()
        return entry

    def _matcher(self, root: str) -> object | None:
        lock = self.service.worktree_lock(Path(root))
        # A listener must never deadlock a caller that (against the rules) holds the lock.
        locked = lock.acquire(timeout=10)
        try:
            return self.service.store.worktree(Path(root)).ignore_matcher()
        except Exception as exc:  # noqa: BLE001 - no filter is better than no watch
            log.warning("cannot read the ignore rules of %s (%s); every change arms a capture",
                        root, exc)
            return None
        finally:
            if locked:
                lock.release()

    def _watch_entries(self, entries: list[_Entry], *, record: bool = True) -> None:
        """Start one notifier for ``entries``; on failure find out which worktree fails and put
        only those in degraded mode (``record``: with a gap)."""
        entries = [e for e in entries if e.watched()]
        if not entries:
            return
        try:
            group = _Group(self, [e.root for e in entries])
        except Exception as exc:  # noqa: BLE001 - classified below
            if len(entries) == 1:
                self._watch_failed(entries[0], exc, record=record)
                return
            for entry in entries:
                self._watch_entries([entry], record=record)
            return
        with self._cond:
            if self._stopping:
                group.close()
                return
            for entry in entries:
                entry.group = group
                # Events before this watch existed are unknown: a full scan comes first.
                entry.baseline = False
                entry.dirty = set()
                entry.aliased = False
            self._groups.append(group)
            self._last_group_start = time.monotonic()
            self.counters["groups_started"] += 1
        group.start()

    def _watch_failed(self, entry: _Entry, exc: BaseException, *, record: bool = True) -> None:
        if isinstance(exc, FileNotFoundError) or _identity(entry.root) is None:
            self._mark_missing(entry, record=True)
            return
        self._degrade(entry, "watch-failed", _describe_watch_error(exc), record=record)

    def _degrade(self, entry: _Entry, reason: str, detail: str, *, record: bool = True) -> None:
        now = time.monotonic()
        with self._cond:
            was = (entry.state, entry.reason)
            entry.state, entry.reason, entry.detail = "degraded", reason, detail
            entry.baseline = False
            if reason != "watch-events-lost":
                entry.group = None
            entry.next_scan = now  # look at once: changes may have gone unseen
            entry.retry_at = now + RETRY_SCANS * self.config.scan_interval_s
            self._cond.notify_all()
        if record and was != ("degraded", reason):
            self._gap(entry, reason, detail + f"; falling back to a stat scan every "
                      f"{self.config.scan_interval_s:g}s")

    def _mark_missing(self, entry: _Entry, *, record: bool) -> None:
        with self._cond:
            if entry.state == "missing":
                return
            entry.state, entry.reason = "missing", "worktree-missing"
            entry.detail = f"{entry.root} no longer exists; its watch ended"
            entry.group = None
            entry.baseline = False
            entry.identity = None
            self._close_window(entry)
            entry.verify_at = entry.judge_at = entry.next_scan = entry.retry_at = None
            entry.next_health = time.monotonic() + self.config.scan_interval_s
            self._cond.notify_all()
        log.warning("worktree %s disappeared; its watch ended", entry.root)
        if record:
            self._gap(entry, "worktree-missing", f"worktree {entry.root} was deleted while "
                      "watched; its watch ended (it resumes if the directory comes back)")

    def _replaced(self, entry: _Entry, identity: tuple[int, int]) -> None:
        """The path now names another directory: watch that one, and capture it at once."""
        self._gap(entry, "worktree-replaced", f"worktree {entry.root} was replaced by another "
                  "directory while watched; watching the new one and capturing it now")
        with self._cond:
            entry.identity = identity
            entry.group = None
            entry.state, entry.reason, entry.detail = "watching", None, None
            entry.window_first = entry.window_first or time.monotonic()
            entry.window_last = time.monotonic() - 3600  # due at once
            self._open_marker(entry)
            self._cond.notify_all()
        entry.matcher = self._matcher(entry.root)
        self._watch_entries([entry])

    def _entry_for(self, path: str) -> _Entry | None:
        with self._cond:
            best = None
            for root, entry in self._entries.items():
                if entry.attempt is None:
                    continue
                if path == root or path.startswith(root.rstrip("/") + "/"):
                    if best is None or len(root) > len(best.root):
                        best = entry
            return best

    # -- events ----------------------------------------------------------------------------

    def dispatch(self, group: _Group, changes: Iterable[tuple[int, str]]) -> None:
        """Turn one batch of events into open or extended windows (called by notifier threads)."""
        arrived = time.monotonic()
        wall = time.time()
        roots: dict[str, list[str]] = {}
        root_events: set[str] = set()
        cookie_prefix = group.cookie_prefix
        real_dirs: dict[str, str] = {}  # this batch's realpath of each event's directory
        follows_links = group.notify.follows_symlinks
        with self._cond:
            # By the group's roots, not the entry's current group: a retiring notifier's last
            # events may predate its successor.
            entries = [e for e in self._entries.values()
                       if (e.attempt is not None or e.lingering) and e.root in group.roots
                       and e.watched()]
            for change, path in changes:
                if path.startswith(cookie_prefix):
                    group.cookie_seen(path[len(cookie_prefix):])
                    continue
                if change == OVERFLOW:
                    # The kernel dropped events: every worktree of this notifier is owed a
                    # full scan, and a capture (something changed that nobody saw).
                    self.counters["overflows"] += 1
                    group.overflowed()
                    for entry in entries:
                        entry.overflow = True
                        entry.dirty, entry.removed = set(), set()
                        roots.setdefault(entry.root, [])
                        root_events.add(entry.root)
                    continue
                for entry in entries:
                    root = entry.root
                    if path == root:
                        root_events.add(root)
                        entry.overflow = True  # the root itself changed: only a scan can tell
                        continue
                    if not path.startswith(root + "/"):
                        continue
                    rel = path[len(root) + 1:]
                    parent = path.rpartition("/")[0]
                    if follows_links and parent != root:
                        real = real_dirs.get(parent)
                        if real is None:
                            real = real_dirs[parent] = os.path.realpath(parent)
                        real_root = real_dirs.get(root)
                        if real_root is None:
                            real_root = real_dirs[root] = os.path.realpath(root)
                        if real != real_root + parent[len(root):]:
                            # Reported through a symlinked directory: which path really
                            # changed is a guess, so the next capture scans.
                            if not entry.aliased:
                                log.info("%s has a symlinked directory the notifier follows; "
                                         "its captures use full stat scans", root)
                            entry.aliased = entry.overflow = True
                            entry.dirty = set()
                            if not real.startswith(real_root + "/"):
                                continue  # a change outside the worktree: not its content
                            rel = real[len(real_root) + 1:] + "/" + path.rpartition("/")[2]
                    if _inside_git(rel):
                        continue
                    # Every path goes to the fast path's set (a tracked file may match an
                    # ignore rule); only relevant ones open a settle window.
                    if not entry.overflow:
                        entry.dirty.add(rel)
                        if change == DELETED:
                            entry.removed.add(rel)
                        if len(entry.dirty) > DIRTY_LIMIT:
                            entry.overflow = True
                            entry.dirty, entry.removed = set(), set()
                    if _ignored(entry.matcher, rel):
                        continue
                    bucket = roots.setdefault(root, [])
                    if len(bucket) < 64:
                        bucket.append(path)
        for root in root_events:
            self._check_root(root)
        if not roots:
            return
        stamps = {root: _latest_change(paths, arrived, wall) for root, paths in roots.items()}
        with self._cond:
            for root, when in stamps.items():
                entry = self._entries.get(root)
                if entry is None or not entry.watched():
                    continue
                if entry.attempt is None:
                    if entry.lingering:
                        # Passive: no settle window, no tier-2 capture. The event keeps the
                        # watch alive and asks for a verification (``_due_lingering``).
                        entry.last_event = max(entry.last_event, when)
                        entry.linger_mark = max(entry.linger_mark, arrived)
                    continue
                entry.last_event = max(entry.last_event, when)
                entry.verify_at = None
                if entry.window_first is None:
                    entry.window_first = when
                    entry.window_wall = wall - (arrived - when)
                    self._open_marker(entry)
                entry.window_last = max(entry.window_last or when, when)
            self._cond.notify_all()

    def group_failed(self, group: _Group, exc: BaseException) -> None:
        """A notifier died (its queue is lost): degrade the worktree it names, rewatch the
        others and rescan them all."""
        message = str(exc)
        with self._cond:
            self._groups = [g for g in self._groups if g is not group]
            victims = [e for e in self._entries.values() if e.group is group]
            for entry in victims:
                entry.group = None
        named = [e for e in victims if f'"{e.root}/' in message or f'"{e.root}"' in message]
        log.warning("notifier for %d worktree(s) failed: %s", len(victims), message)
        for entry in [e for e in victims if e.attempt is None]:
            # Nothing is owed to an ended attempt: a lingering watch just ends (its captures
            # scan fully again), with no gap.
            self._drop(entry)
        victims = [e for e in victims if e.attempt is not None]
        for entry in victims:
            if named and entry not in named:
                # Its events in the failed batch are lost: rescan, no gap (nothing was missed).
                with self._cond:
                    entry.verify_at = time.monotonic()
                    entry.verify_since = time.monotonic()
                continue
            self._degrade(entry, "watch-failed", _describe_watch_error(exc))
        rest = [e for e in victims if e not in named and e.attempt is not None]
        if rest and not self._stopping:
            self._watch_entries(rest)

    def _check_root(self, root: str) -> None:
        with self._cond:
            entry = self._entries.get(root)
        if entry is not None and entry.attempt is None and entry.lingering:
            if _identity(root) != entry.identity:
                self._drop(entry)  # deleted or replaced: the lingering watch ends, no gap
            return
        if entry is None or entry.attempt is None or entry.state == "missing":
            return
        identity = _identity(root)
        if identity is None:
            self._mark_missing(entry, record=True)
        elif identity != entry.identity:
            self._replaced(entry, identity)

    # -- settle scheduling -----------------------------------------------------------------

    def _schedule_loop(self) -> None:
        while True:
            with self._cond:
                if self._stopping:
                    return
                actions, wake = self._due(time.monotonic())
                if not actions:
                    self._cond.wait(timeout=None if wake is None else max(0.0, wake))
                    continue
            for action in actions:
                try:
                    action()
                except Exception:  # noqa: BLE001 - the scheduler must outlive any one action
                    log.exception("watcher action failed")

    def _due(self, now: float) -> tuple[list, float | None]:
        """What is due now (callables) and how long until the next thing is. Under the lock."""
        actions: list = []
        wake: float | None = None

        def later(at: float) -> None:
            nonlocal wake
            delay = at - now
            wake = delay if wake is None else min(wake, delay)

        scan_every = self.config.scan_interval_s
        for entry in list(self._entries.values()):
            if entry.attempt is None and entry.lingering:
                self._due_lingering(entry, now, actions, later)
                continue
            if entry.attempt is None:
                if entry.idle_since is not None and now - entry.idle_since >= IDLE_GRACE_S:
                    actions.append(lambda e=entry: self._drop(e))
                elif entry.idle_since is not None:
                    later(entry.idle_since + IDLE_GRACE_S)
                continue
            if entry.state == "missing":
                if now >= entry.next_health:
                    entry.next_health = now + scan_every
                    actions.append(lambda e=entry: self._probe_missing(e))
                later(entry.next_health)
                continue
            if now >= entry.next_health:
                entry.next_health = now + scan_every
                actions.append(lambda e=entry: self._check_root(e.root))
            later(entry.next_health)
            if entry.capturing:
                continue
            settle, max_wait = self._timing(entry)
            kind = None
            if entry.window_first is not None:
                due = max(min(entry.window_last + settle, entry.window_first + max_wait),
                          entry.not_before)
                if now >= due:
                    kind = "window"
                else:
                    later(due)
            elif entry.next_scan is not None and entry.state == "degraded":
                if now >= entry.next_scan:
                    kind = "scan"
                    entry.next_scan = now + scan_every
                later(entry.next_scan)
            if (entry.state == "watching" and entry.window_first is None
                    and entry.verify_at is None and entry.baseline):
                # Look for drift now and then (an overflowed kernel queue is never reported).
                # A worktree that saw no event since its last verification is only re-verified
                # every QUIET_VERIFY_FACTOR intervals: idle worktrees must cost no CPU.
                if self._verify_due(entry, now, later, when_quiet=True):
                    entry.verify_at = now
                    entry.verify_since = now
            if kind is None and entry.verify_at is not None and entry.window_first is None:
                if now >= entry.verify_at:
                    kind = "verify"
                    entry.verify_at = None
                else:
                    later(entry.verify_at)
            if kind is not None:
                claim = self._claim(entry, wait=False)
                if claim is not None:
                    self._captures.submit(self._run_capture, entry, claim, kind)
            if entry.judge_at is not None:
                if now >= entry.judge_at:
                    entry.judge_at = None
                    actions.append(lambda e=entry: self._judge(e))
                else:
                    later(entry.judge_at)
            if entry.retry_at is not None and entry.state == "degraded":
                if now >= entry.retry_at:
                    entry.retry_at = None
                    actions.append(lambda e=entry: self._retry(e))
                else:
                    later(entry.retry_at)
        merge = self._merge_plan(now)
        if merge is True:
            self._merging = True
            actions.append(lambda: threading.Thread(target=self._merge, daemon=True,
                                                    name="snapshotd-watch-merge").start())
        elif merge is not None:
            later(merge)
        return actions, wake

    def _due_lingering(self, entry: _Entry, now: float, actions: list, later) -> None:
        """A lingering worktree: ends after ``linger_s`` without events; its root is stat'ed
        every ``scan_interval_s``; a verification (a full scan compared with the dirty set,
        recording nothing) follows events, at most every ``verify_interval_s``. A quiet one is
        never scanned: past ``QUIET_VERIFY_FACTOR`` intervals without a verification or a
        fresh baseline, ``take`` just stops vouching (``_linger_stale``). Under the lock."""
        expires = entry.linger_mark + self._linger_s()
        if now >= expires:
            actions.append(lambda e=entry: self._drop(e, expired=True))
            return
        later(expires)
        if now >= entry.next_health:
            entry.next_health = now + self.config.scan_interval_s
            actions.append(lambda e=entry: self._check_root(e.root))
        later(entry.next_health)
        if entry.capturing or not entry.baseline or entry.state != "watching":
            return
        if self._verify_due(entry, now, later, when_quiet=False):
            entry.capturing = True  # no capture may start on it meanwhile
            self._captures.submit(self._verify_lingering, entry)

    def _verify_due(self, entry: _Entry, now: float, later, *, when_quiet: bool) -> bool:
        """The clock of periodic drift verification (under the lock): True when one should
        start now — events were seen since the last one, or (``when_quiet``) none ran for
        ``QUIET_VERIFY_FACTOR`` intervals."""
        every = getattr(self.config, "verify_interval_s", PERIODIC_VERIFY_S)
        due = False
        if entry.next_verify == 0.0:
            entry.next_verify = now + every
            entry.verified_mark = entry.last_event
            entry.last_verify = now
        elif now >= entry.next_verify:
            entry.next_verify = now + every
            if entry.last_event != entry.verified_mark or (
                    when_quiet and now - entry.last_verify >= every * QUIET_VERIFY_FACTOR):
                entry.verified_mark = entry.last_event
                entry.last_verify = now
                due = True
        later(entry.next_verify)
        return due

    def _verify_lingering(self, entry: _Entry) -> None:
        """Verify a lingering worktree without recording anything: under the worktree lock,
        take the dirty set, bring the stat cache up to date with a full scan, and call anything
        the scan found that no event reported drift (gap, fast path off)."""
        root = Path(entry.root)
        try:
            with self.service.worktree_lock(root):
                with self._cond:
                    if not entry.lingering or self._entries.get(entry.root) is not entry:
                        return
                try:
                    self.service.read_worktree(root, verify=True)
                except Exception as exc:  # noqa: BLE001 - the watch just stops vouching
                    log.warning("verification of lingering %s failed: %s", root, exc)
                    if _identity(entry.root) != entry.identity:
                        self._drop(entry)
                    return
            with self._cond:
                self.counters["verifications"] += 1
        finally:
            with self._cond:
                entry.capturing = False
                self._cond.notify_all()

    def _linger_s(self) -> float:
        return float(getattr(self.config, "linger_s", 0.0) or 0.0)

    def _linger_stale(self, entry: _Entry, now: float) -> bool:
        """Whether a lingering entry has gone too long without a verification or a fresh
        baseline for its dirty set to be trusted (a quiet one is never scanned to renew it)."""
        every = getattr(self.config, "verify_interval_s", PERIODIC_VERIFY_S)
        return now - max(entry.last_verify, entry.baseline_at) >= every * QUIET_VERIFY_FACTOR

    def _timing(self, entry: _Entry) -> tuple[float, float]:
        attempt = entry.attempt
        settle = (attempt.settle_ms if attempt and attempt.settle_ms else self.config.settle_ms)
        max_wait = (attempt.max_wait_ms if attempt and attempt.max_wait_ms
                    else self.config.max_wait_ms)
        return settle / 1000, max(settle, max_wait) / 1000

    def _claim(self, entry: _Entry, *, wait: bool) -> dict | None:
        """Take the entry's window for a capture (under the lock); None if there is nothing to
        capture for or, with ``wait=False``, a capture already runs."""
        while entry.capturing:
            if not wait:
                return None
            self._cond.wait()
        if entry.attempt is None or entry.state == "missing":
            return None
        entry.capturing = True
        claim = {"attempt": entry.attempt, "first": entry.window_first,
                 "wall": entry.window_wall, "started": time.monotonic()}
        entry.window_first = entry.window_last = entry.window_wall = None
        return claim

    def _run_capture(self, entry: _Entry, claim: dict, kind: str, *,
                     raise_errors: bool = False) -> dict | None:
        """Capture a claimed entry; settles its window and marker whatever happens."""
        attempt: Attempt = claim["attempt"]
        result: dict | None = None
        error: ServiceError | None = None
        problem: str | None = None
        try:
            identity = _identity(entry.root)
            if identity is None:
                problem = "missing"
            elif entry.identity is not None and identity != entry.identity:
                problem = "replaced"
            else:
                result = self.service.capture_attempt(attempt, tier=2, source="watch",
                                                      require_active=True,
                                                      full=kind in ("verify", "scan"))
        except ServiceError as exc:
            error = exc
        except Exception as exc:  # noqa: BLE001 - a capture never takes the watcher down
            log.exception("tier-2 capture of %s failed", entry.root)
            error = ServiceError("capture-failed", f"{type(exc).__name__}: {exc}")
        now = time.monotonic()
        with self._cond:
            entry.capturing = False
            self._cond.notify_all()
            if result is not None:
                entry.failures = 0
                entry.not_before = 0.0
                entry.captures += 1
                self.counters["captures"] += 1
                self.counters["deduped"] += bool(result.get("deduped"))
                if kind in ("window", "flush", "crash") and not result.get("deduped"):
                    entry.verify_at = now + max(VERIFY_DELAY_S, self._timing(entry)[0])
                    entry.verify_since = claim["started"]
                if kind == "verify":
                    self.counters["verifications"] += 1
                    if not result.get("deduped"):
                        entry.judge_at = now + JUDGE_DELAY_S
                        entry.judge_since = entry.verify_since
                        entry.judge_seq = result.get("seq")
            elif error is not None and error.code not in ("fenced", "worktree-missing",
                                                          "worktree-replaced"):
                # The changes are still owed: reopen the window and retry, backing off.
                self.counters["failures"] += 1
                entry.failures += 1
                if claim["first"] is not None or kind != "verify":
                    entry.window_first = entry.window_first or claim["first"] or now
                    entry.window_last = entry.window_last or now
                    entry.window_wall = entry.window_wall or claim["wall"] or time.time()
                entry.not_before = now + min(30.0, self.config.scan_interval_s
                                             * 2 ** min(entry.failures, 5))
            if entry.window_first is None:
                self._remove_marker(entry)
        if problem == "missing" or (error is not None and error.code in ("worktree-missing",
                                                                         "worktree-replaced")):
            # A gap was written by the service when it was the one to find out.
            self._mark_missing(entry, record=error is None)
        elif problem == "replaced":
            identity = _identity(entry.root)
            if identity is not None:
                self._replaced(entry, identity)
        if error is not None and raise_errors and error.code != "fenced":
            raise error
        return result

    def _judge(self, entry: _Entry) -> None:
        """A verification scan found changes: were they announced by any event?"""
        with self._cond:
            announced = entry.last_event >= entry.judge_since - STEP_MS / 1000
            seq = entry.judge_seq
            drift_recorded = entry.drift_at >= entry.judge_since
        if announced or drift_recorded or entry.attempt is None:
            return
        self._degrade(entry, "watch-events-lost",
                      f"a verification scan found changes no event announced (captured as seq "
                      f"{seq}); the watcher may have dropped events")

    def _retry(self, entry: _Entry) -> None:
        """Try to leave degraded mode: watch again (or, after lost events, just trust it)."""
        if entry.attempt is None:
            return
        if entry.reason == "watch-events-lost":
            with self._cond:
                entry.state, entry.reason, entry.detail, entry.next_scan = (
                    "watching", None, None, None)
            return
        with self._cond:
            entry.state, entry.reason, entry.detail = "watching", None, None
            entry.next_scan = None
        entry.matcher = entry.matcher or self._matcher(entry.root)
        self._watch_entries([entry], record=False)  # a failure is no news: no second gap
        with self._cond:
            if entry.group is not None:
                entry.verify_at = time.monotonic()  # catch up with what the scans may lack
                entry.verify_since = time.monotonic()
                log.info("watching %s again", entry.root)

    def _probe_missing(self, entry: _Entry) -> None:
        identity = _identity(entry.root)
        if identity is None or entry.attempt is None:
            return
        log.warning("worktree %s is back; watching it again", entry.root)
        with self._cond:
            entry.state, entry.reason, entry.detail = "watching", None, None
            entry.identity = identity
            entry.window_first = time.monotonic()
            entry.window_last = time.monotonic() - 3600  # capture at once
            entry.window_wall = time.time()
            self._open_marker(entry)
        entry.matcher = self._matcher(entry.root)
        self._watch_entries([entry])

    def _drop(self, entry: _Entry, *, expired: bool = False) -> None:
        with self._cond:
            if entry.attempt is not None or self._entries.get(entry.root) is not entry:
                return
            if expired and time.monotonic() < entry.linger_mark + self._linger_s():
                return  # an event arrived since the scheduler looked: it lingers on
            entry.lingering = False
            del self._entries[entry.root]
            group = entry.group
            entry.group = None
            if group is not None and not any(e.group is group for e in self._entries.values()):
                self._groups = [g for g in self._groups if g is not group]
            else:
                group = None
        if group is not None:
            group.retire()

    # -- merging notifiers -----------------------------------------------------------------

    def _merge_plan(self, now: float) -> bool | float | None:
        """True when small notifiers should be merged now, a time to look again, or None."""
        if self._merging:
            return None
        small = [g for g in self._groups if not g.retired and self._live(g) < MERGE_SMALL]
        dead = [g for g in self._groups if not g.retired and g.dead_roots(self) > self._live(g)]
        if len(small) < 2 and not dead:
            return None
        at = max(self._last_group_start + MERGE_QUIET_S, self._merge_not_before)
        return True if now >= at else at

    def _live(self, group: _Group) -> int:
        return sum(1 for e in self._entries.values() if e.group is group)

    def _merge(self) -> None:
        """Replace small (or mostly dead) notifiers by one. The new one runs before the old ones
        retire, and retiring ones drain their queues, so no event falls between them. Runs in a
        thread of its own: walking big trees must not hold up settle windows."""
        try:
            self._merge_now()
        finally:
            with self._cond:
                self._merging = False
                self._cond.notify_all()

    def _merge_now(self) -> None:
        with self._cond:
            if self._stopping:
                return
            old = [g for g in self._groups if not g.retired and
                   (self._live(g) < MERGE_SMALL or g.dead_roots(self) > self._live(g))]
            entries = [e for e in self._entries.values() if e.group in old and e.watched()]
            started_at = self._last_group_start
        if not old:
            return
        if not entries:
            with self._cond:
                self._groups = [g for g in self._groups if g not in old]
            for group in old:
                group.retire()
            return
        try:
            group = _Group(self, [e.root for e in entries])
        except Exception as exc:  # noqa: BLE001 - keep the working notifiers
            log.warning("could not merge %d notifiers: %s", len(old), exc)
            with self._cond:
                self._merge_not_before = time.monotonic() + 60.0
            return
        moved: list[_Entry] = []
        with self._cond:
            if self._stopping:
                group.close()
                return
            for entry in entries:
                if entry.group in old:
                    # A write made before the new watch existed is queued only in the old
                    # notifier, which a cookie on the new one proves nothing about: until the
                    # old one is drained, a capture syncs it too (``take``).
                    entry.draining = [entry.group]
                    entry.group = group
                    moved.append(entry)
            self._groups = [g for g in self._groups if g not in old] + [group]
            self.counters["merges"] += 1
            self._last_group_start = max(started_at, self._last_group_start)
            self._merge_not_before = time.monotonic() + MERGE_QUIET_S
        group.start()
        # One cookie through each old notifier: every event it queued before the new watch
        # existed is then in the worktrees' changed paths, and the new notifier alone vouches.
        handed_over = all(g.sync(COOKIE_TIMEOUT_S * 4) for g in old)
        for g in old:
            g.handed_over = handed_over
        with self._cond:
            for entry in moved:
                entry.draining = []
                if not handed_over:
                    entry.baseline = False  # the next capture scans, once
        for g in old:
            g.retire()
        log.info("merged %d notifiers into one for %d worktrees", len(old), len(entries))

    # -- crash markers ---------------------------------------------------------------------

    def _marker_path(self, entry: _Entry) -> Path:
        return self.dir / f"{worktree_id(Path(entry.root))}.json"

    def _open_marker(self, entry: _Entry) -> None:
        """Note durably (for a process crash) that a window is open. Under the lock."""
        attempt = entry.attempt
        if attempt is None:
            return
        record = {"worktree": entry.root, **attempt.key.as_dict(),
                  "opened_at": entry.window_wall or time.time()}
        path = self._marker_path(entry)
        tmp = path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(record))
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("cannot write window marker %s: %s", path, exc)

    def _remove_marker(self, entry: _Entry) -> None:
        with contextlib.suppress(OSError):
            self._marker_path(entry).unlink()

    def _close_window(self, entry: _Entry) -> None:
        entry.window_first = entry.window_last = entry.window_wall = None
        self._remove_marker(entry)

    def _recover_markers(self) -> None:
        """Windows a crash left open: a gap each, and a capture at once (still-active only)."""
        for path in sorted(self.dir.glob("*.json")):
            try:
                record = json.loads(path.read_text())
                worktree = str(record["worktree"])
                opened = float(record["opened_at"])
            except (OSError, ValueError, KeyError, TypeError):
                path.unlink(missing_ok=True)
                continue
            with self._cond:
                entry = self._entries.get(worktree)
            attempt = entry.attempt if entry else None
            if (entry is None or attempt is None or attempt.state != ACTIVE
                    or attempt.key.as_dict() != {k: record.get(k) for k in
                                                 ("run_id", "node_id", "iteration", "attempt")}):
                path.unlink(missing_ok=True)
                continue
            when = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(opened))
            then = ("capturing the current state now" if entry.state != "missing"
                    else "the worktree no longer exists, so nothing could be captured")
            self._gap(entry, "settle-window-missed",
                      f"a settle window opened at {when} (unix {opened:.3f}) was still open when "
                      f"the daemon stopped without capturing it; {then}")
            with self._cond:
                entry.window_first = time.monotonic()
                entry.window_last = time.monotonic() - 3600  # due at once
                entry.window_wall = opened
                claim = self._claim(entry, wait=True)
            if claim is not None:
                self._captures.submit(self._run_capture, entry, claim, "crash")
            else:
                with self._cond:
                    self._close_window(entry)

    # -- helpers ---------------------------------------------------------------------------

    def _gap(self, entry: _Entry, reason: str, detail: str) -> None:
        attempt = entry.attempt or (entry.last_attempt if entry.lingering else None)
        key = attempt.key if attempt else None
        self.service.gaps.record(
            reason=reason, detail=detail, run_id=key.run_id if key else None,
            node_id=key.node_id if key else None, iteration=key.iteration if key else None,
            attempt=key.attempt if key else None, worktree=entry.root, tier=2, source="watch")


class _Group:
    """One notifier over some worktrees, and the thread that reads it."""

    _ids = itertools.count()

    def __init__(self, watcher: Watcher, roots: list[str]) -> None:
        self.watcher = watcher
        self.roots = frozenset(roots)
        # Cookies live in a directory of the daemon's own, watched by the same notifier (one
        # kernel queue), so a cookie's event arriving proves every earlier event has arrived.
        self.cookie_dir = Path(watcher.service.home) / "cookies" / f"{os.getpid()}-{next(self._ids)}"
        self.cookie_dir.mkdir(parents=True, exist_ok=True)
        self.cookie_prefix = str(self.cookie_dir) + "/"
        self._waiters: dict[str, threading.Event] = {}
        self._cookie_count = itertools.count()
        # Held from taking a batch off the notifier's queue until it is dispatched. A cookie
        # seen by ``sync`` proves every earlier event has left the queue; only with this lock
        # does it also prove they have been dispatched (the reader thread may hold an earlier
        # batch it has taken but not yet handed over).
        self._drain = threading.Lock()
        # Recursive; a root that cannot be watched raises here.
        try:
            self.notify = open_notifier([*roots, str(self.cookie_dir)], watcher.config.notifier)
        except BaseException:
            shutil.rmtree(self.cookie_dir, ignore_errors=True)
            raise
        self.retired = False
        # Set by a merge once every event this notifier queued before its successor began is
        # dispatched: from then on the successor alone vouches for its worktrees.
        self.handed_over = False
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"snapshotd-watch-{len(roots)}")

    def sync(self, timeout: float) -> bool:
        """Write a cookie and drain events until it shows up: then every event queued before
        it has been dispatched. False if it did not within ``timeout``."""
        if self.retired:
            return False
        name = f"c{next(self._cookie_count)}"
        seen = threading.Event()
        self._waiters[name] = seen
        path = self.cookie_dir / name
        deadline = time.monotonic() + timeout
        try:
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600))
            if not self._drain.acquire(timeout=max(0.0, deadline - time.monotonic())):
                return False
            try:
                # A capture waits on this: for its first millisecond, poll without sleeping
                # (the cookie's event usually lands within ~0.1 ms), then wait a millisecond
                # at a time.
                spin_until = time.monotonic() + SYNC_SPIN_S
                while not seen.is_set():
                    if time.monotonic() > deadline or self.retired:
                        return False
                    self._take_and_dispatch(0 if time.monotonic() < spin_until else 1)
            finally:
                self._drain.release()
            return True
        except Exception:  # noqa: BLE001 - a closed or failed notifier cannot vouch
            return False
        finally:
            self._waiters.pop(name, None)
            with contextlib.suppress(OSError):
                path.unlink()

    def _take_and_dispatch(self, block_ms: int = 0) -> None:
        """Take what the notifier has queued and dispatch it (caller holds ``_drain``), first
        waiting up to ``block_ms`` for something to come."""
        changes = self.notify.read(block_ms)
        if changes:
            faults.delay("dispatch")
            self.watcher.dispatch(self, changes)

    def cookie_seen(self, name: str) -> None:
        waiter = self._waiters.get(name)
        if waiter is not None:
            waiter.set()

    def overflowed(self) -> None:
        """Events were lost, cookies perhaps among them: no waiter gets to vouch (each sees its
        worktree's overflow and scans), and none waits for a cookie that will never come."""
        for waiter in list(self._waiters.values()):
            waiter.set()

    def start(self) -> None:
        self._thread.start()

    def retire(self) -> None:
        self.retired = True
        self.notify.interrupt()

    def join(self) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def close(self) -> None:
        # Under the drain lock: a ``sync`` reading the notifier's descriptor must never see it
        # closed (or, worse, its number reused by another file) in the middle of a read.
        with self._drain:
            self.notify.close()
        shutil.rmtree(self.cookie_dir, ignore_errors=True)

    def dead_roots(self, watcher: Watcher) -> int:
        live = {e.root for e in watcher._entries.values() if e.group is self}
        return len(self.roots - live)

    def _loop(self) -> None:
        failed: BaseException | None = None
        polled = self.notify.polled
        try:
            # A batch is taken and dispatched under ``_drain`` only, so a concurrent ``sync``
            # never overtakes a batch in hand.
            while not self.retired:
                if polled:
                    self.notify.wait(STEP_MS / 1000)
                    block = 1
                else:
                    self.notify.wait(IDLE_WAKE_S)
                    time.sleep(GATHER_S)
                    block = 0
                with self._drain:
                    self._take_and_dispatch(block)
            # Hand over what is still queued: a successor notifier already runs.
            with self._drain:
                self._take_and_dispatch()
        except Exception as exc:  # noqa: BLE001 - reported below, never a traceback
            failed = exc
        finally:
            self.close()
        if failed is not None and not self.retired:
            self.watcher.group_failed(self, failed)


def _identity(root: str) -> tuple[int, int] | None:
    """(device, inode) of a real directory at ``root``, None if there is none."""
    try:
        st = os.lstat(root)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    return st.st_dev, st.st_ino


def _type_changed(root: str, changed: set[str], removed: set[str]) -> bool:
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
            parents = {p[:i] for p in changed for i, c in enumerate(p) if c == "/"}
        if rel in parents:
            return True  # a file or link now, and paths below it changed: a directory before
    return False


def _inside_git(rel: str) -> bool:
    return rel == ".git" or rel.startswith(".git/") or "/.git/" in f"/{rel}/"


def _ignored(matcher: object | None, rel: str) -> bool:
    if matcher is None:
        return False
    try:
        return bool(matcher.path_is_ignored(rel))  # type: ignore[attr-defined]
    except Exception:  # noqa: BLE001 - when in doubt, look
        return False


def _latest_change(paths: list[str], arrived: float, wall: float) -> float:
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


def _describe_watch_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    code = getattr(exc, "errno", None)
    if code in (errno.ENOSPC, errno.EMFILE) or "No space left" in text or "Too many" in text:
        return (f"the inotify watch limit was reached ({text}); raise fs.inotify.max_user_watches "
                "or fs.inotify.max_user_instances")
    if isinstance(exc, PermissionError) or "ermission denied" in text:
        return f"permission denied while watching ({text})"
    return f"the file watcher failed ({text})"


def _fmt(attempt: Attempt) -> str:
    k = attempt.key
    return f"{k.run_id}/{k.node_id}/{k.iteration}/{k.attempt}"
