"""Tier 2: the daemon's own watcher, turning quiet moments into checkpoints.

Owns the registry of watched worktrees (one ``Entry`` per root, see ``state``) and its lifecycle:
which worktrees are watched and for how long, degraded and missing worktrees, ``flush``, the
capture of pending windows at shutdown, and ``status``'s ``watched`` rows and ``watcher``
counters. Its parts: ``fastpath``, ``groups``, ``notifier_group``, ``settle``. Promises (each in
full in docs/watcher.md):
- A worktree is watched while its attempt is active, then lingers passively for ``linger_s``
  after its last event (no window, no capture, no gap; only the fast path's state lives on).
- Events say only *when* to look: every capture is a stat scan (or the changed paths the watch
  vouches for); changes no event announced are a ``watcher-drift`` gap. ``.git`` and ignored
  paths never arm a capture. ``flush(root)`` returns once every earlier change is in a checkpoint.
- SIGTERM captures pending windows; a crash's markers become ``settle-window-missed`` gaps. A
  failed watch is a gap, shows degraded and falls back to a periodic stat scan; a deleted
  worktree ends its watch quietly. Idle costs nearly nothing (shared notifiers, sleeping threads).
"""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

from snapshotd.core import Config, Registry
from snapshotd.ledger import Attempt
from snapshotd.service import Service
from snapshotd.watch.fastpath import FastPath
from snapshotd.watch.groups import Groups
from snapshotd.watch.notifier import set_max_watches, watches_in_use
from snapshotd.watch.notifier_group import STEP_MS
from snapshotd.watch.settle import Settler
from snapshotd.watch.state import Entry, WatchState, describe_watch_error, identity

log = logging.getLogger("snapshotd.watcher")

# Retry a failed watch after this many scan intervals.
RETRY_SCANS = 15


def attach(service: Service, server: Registry, config: Config) -> None:
    """Wire the watcher into a daemon: attempt listeners, flush, shutdown, status."""
    set_max_watches(config.max_watches)
    watcher = Watcher(service, config)
    service.on_attempt_active.append(watcher.attempt_active)
    service.on_attempt_inactive.append(watcher.attempt_inactive)
    server.flush_hook = watcher.flush
    server.shutdown_hooks.append(watcher.shutdown)
    server.status_extras.append(watcher.status)
    service.change_source = watcher.fastpath
    watcher.start()


class Watcher:
    """Every watched worktree, its lifecycle, and the parts that serve it (``Host`` of the
    notifier groups and the settle scheduler)."""

    def __init__(self, service: Service, config: Config) -> None:
        self.service = service
        self.config = config
        self.state = WatchState(service, config)
        self.fastpath = FastPath(self.state)
        self.groups = Groups(self.state, self)
        self.settler = Settler(self.state, self, self.groups, self.fastpath)

    # -- public entry points ---------------------------------------------------------------

    def start(self) -> None:
        """Resume watching the ledger's active attempts, then deal with windows a crash left."""
        self.state.markers.dir.mkdir(mode=0o700, exist_ok=True)
        shutil.rmtree(Path(self.service.home) / "cookies", ignore_errors=True)
        attempts = self.service.ledger.active_attempts()
        newest: dict[str, Attempt] = {}
        for attempt in attempts:  # ordered by pk: the newest attempt of a worktree wins
            newest[attempt.worktree] = attempt
        fresh = [self._new_entry(a) for a in newest.values()]
        self.groups.watch([e for e in fresh if e.state == "watching"])
        self.settler.start()
        self.settler.recover_markers()

    def attempt_active(self, attempt: Attempt) -> None:
        root = attempt.worktree
        with self.state.cond:
            entry = self.state.entries.get(root)
            if entry is not None:
                # A superseding (or resumed) attempt on the same directory takes the watch over
                # as it is, lingering or not: its dirty set and baseline stay valid.
                entry.attempt = attempt
                entry.linger.idle_since = None
                entry.linger.lingering = False
                entry.linger.last_attempt = None
                missing = entry.state == "missing"
                self.state.cond.notify_all()
                if not missing:
                    return
                del self.state.entries[root]
        entry = self._new_entry(attempt)
        if entry.state == "watching":
            self.groups.watch([entry])

    def attempt_inactive(self, attempt: Attempt) -> None:
        state = self.state
        with state.cond:
            entry = state.entries.get(attempt.worktree)
            if entry is None or entry.attempt is None or entry.attempt.key != attempt.key:
                return
            entry.attempt = None
            entry.linger.idle_since = time.monotonic()
            state.close_window(entry)
            entry.checks.verify_at = entry.checks.judge_at = None
            if (self.config.linger_s > 0 and entry.state == "watching"
                    and entry.group is not None and not entry.group.retired
                    and not state.stopping):
                entry.linger.lingering = True
                entry.linger.last_attempt = attempt
                entry.linger.mark = time.monotonic()
            state.cond.notify_all()

    def flush(self, root: Path) -> None:
        """Return once every change made before the call is in a checkpoint of the attempt
        watching ``root`` (or its nearest watched ancestor); nothing to do when none is, or when
        the worktree is gone. A failed capture raises its ``ServiceError`` (its gap is written)."""
        entry = self._entry_for(str(root))
        if entry is None:
            return
        with self.state.cond:
            # A deleted worktree has nothing left to capture and its gap is on record; failing
            # here would only stop its attempt from ending.
            claim = self.settler.claim(entry, wait=True)
        if claim is not None:
            self.settler.run_capture(entry, claim, "flush", raise_errors=True)

    def shutdown(self) -> None:
        """Stop watching, then capture every window still open (SIGTERM path)."""
        state = self.state
        with state.cond:
            state.stopping = True
            groups = list(self.groups.groups)
            state.cond.notify_all()
        for group in groups:
            group.retire()
        for group in groups:
            group.join()  # each drains its notifier into the windows before it ends
        self.settler.stop()
        with state.cond:
            pending = [e for e in state.entries.values()
                       if e.attempt is not None and e.window.first is not None]
        for entry in pending:
            with state.cond:
                claim = self.settler.claim(entry, wait=True)
            if claim is not None:
                self.settler.run_capture(entry, claim, "shutdown")
        with state.cond:  # a window still open (its capture failed) keeps its marker
            for entry in state.entries.values():
                if entry.window.first is None:
                    state.markers.drop(entry)

    def status(self) -> dict:
        now = time.monotonic()
        with self.state.cond:
            entries = list(self.state.entries.values())
            groups = len([g for g in self.groups.groups if not g.retired])
            counters = dict(self.state.counters)
            rows = [self._status_row(e, now) for e in entries]
        for row, entry in zip(rows, entries, strict=True):
            attempt = entry.attempt
            if attempt is not None:
                last = self.service.ledger.last_checkpoint(attempt.pk)
                if last is not None:
                    row["last_checkpoint_age_s"] = round(
                        max(0.0, time.time() - float(last["created_at"])), 3)
        return {"watched": rows,
                "watcher": {"notifiers": groups, "step_ms": STEP_MS,
                            "watches": watches_in_use(), "max_watches": self.config.max_watches,
                            **counters}}

    # -- Host: lifecycle actions of the notifier groups and the settle scheduler -----------

    def check_root(self, root: str) -> None:
        with self.state.cond:
            entry = self.state.entries.get(root)
        if entry is not None and entry.attempt is None and entry.linger.lingering:
            if identity(root) != entry.identity:
                self.drop(entry)  # deleted or replaced: the lingering watch ends, no gap
            return
        if entry is None or entry.attempt is None or entry.state == "missing":
            return
        now_identity = identity(root)
        if now_identity is None:
            self.mark_missing(entry, record=True)
        elif now_identity != entry.identity:
            self.replaced(entry, now_identity)

    def watch_failed(self, entry: Entry, exc: BaseException, *, record: bool = True) -> None:
        if isinstance(exc, FileNotFoundError) or identity(entry.root) is None:
            self.mark_missing(entry, record=True)
            return
        self.degrade(entry, "watch-failed", describe_watch_error(exc), record=record)

    def degrade(self, entry: Entry, reason: str, detail: str, *, record: bool = True) -> None:
        now = time.monotonic()
        with self.state.cond:
            was = (entry.state, entry.reason)
            entry.state, entry.reason, entry.detail = "degraded", reason, detail
            entry.changes.baseline = False
            entry.group = None
            entry.checks.next_scan = now  # look at once: changes may have gone unseen
            entry.checks.retry_at = now + RETRY_SCANS * self.config.scan_interval_s
            self.state.cond.notify_all()
        if record and was != ("degraded", reason):
            self.state.gap(entry, reason, detail + f"; falling back to a stat scan every "
                           f"{self.config.scan_interval_s:g}s")

    def mark_missing(self, entry: Entry, *, record: bool) -> None:
        with self.state.cond:
            if entry.state == "missing":
                return
            entry.state, entry.reason = "missing", "worktree-missing"
            entry.detail = f"{entry.root} no longer exists; its watch ended"
            entry.group = None
            entry.changes.baseline = False
            entry.identity = None
            self.state.close_window(entry)
            checks = entry.checks
            checks.verify_at = checks.judge_at = checks.next_scan = checks.retry_at = None
            checks.next_health = time.monotonic() + self.config.scan_interval_s
            self.state.cond.notify_all()
        log.warning("worktree %s disappeared; its watch ended", entry.root)
        if record:
            self.state.gap(entry, "worktree-missing", f"worktree {entry.root} was deleted while "
                           "watched; its watch ended (it resumes if the directory comes back)")

    def replaced(self, entry: Entry, new_identity: tuple[int, int]) -> None:
        """The path now names another directory: watch that one, and capture it at once."""
        self.state.gap(entry, "worktree-replaced", f"worktree {entry.root} was replaced by "
                       "another directory while watched; watching the new one and capturing it "
                       "now")
        with self.state.cond:
            entry.identity = new_identity
            entry.group = None
            entry.state, entry.reason, entry.detail = "watching", None, None
            self.state.open_window_now(entry)
            self.state.cond.notify_all()
        entry.matcher = self._matcher(entry.root)
        self.groups.watch([entry])

    def drop(self, entry: Entry, *, expired: bool = False) -> None:
        state = self.state
        with state.cond:
            if entry.attempt is not None or state.entries.get(entry.root) is not entry:
                return
            if expired and time.monotonic() < entry.linger.mark + self.config.linger_s:
                return  # an event arrived since the scheduler looked: it lingers on
            entry.linger.lingering = False
            del state.entries[entry.root]
            state.markers.drop(entry)
            group = entry.group
            entry.group = None
            if group is not None and not self.groups.forget(group):
                group = None
        if group is not None:
            group.retire()

    def retry(self, entry: Entry) -> None:
        """Try to leave degraded mode: watch again."""
        if entry.attempt is None:
            return
        with self.state.cond:
            entry.state, entry.reason, entry.detail = "watching", None, None
            entry.checks.next_scan = None
        entry.matcher = entry.matcher or self._matcher(entry.root)
        self.groups.watch([entry], record=False)  # a failure is no news: no second gap
        with self.state.cond:
            if entry.group is not None:
                now = time.monotonic()
                entry.checks.verify_at = now  # catch up with what the scans may lack
                entry.checks.verify_since = now
                log.info("watching %s again", entry.root)

    def probe_missing(self, entry: Entry) -> None:
        now_identity = identity(entry.root)
        if now_identity is None or entry.attempt is None:
            return
        log.warning("worktree %s is back; watching it again", entry.root)
        with self.state.cond:
            entry.state, entry.reason, entry.detail = "watching", None, None
            entry.identity = now_identity
            entry.window.first = entry.window.wall = None
            self.state.open_window_now(entry)
        entry.matcher = self._matcher(entry.root)
        self.groups.watch([entry])

    # -- helpers ---------------------------------------------------------------------------

    def _new_entry(self, attempt: Attempt) -> Entry:
        """An entry for ``attempt``'s worktree with its ignore matcher, registered."""
        entry = Entry(root=attempt.worktree, attempt=attempt)
        now_identity = identity(entry.root)
        if now_identity is None:
            entry.state, entry.reason = "missing", "worktree-missing"
            entry.detail = f"{entry.root} does not exist or is not a directory"
            entry.checks.next_health = time.monotonic() + self.config.scan_interval_s
        else:
            entry.identity = now_identity
            entry.matcher = self._matcher(entry.root)
        with self.state.cond:
            self.state.entries[entry.root] = entry
            self.state.cond.notify_all()
        return entry

    def _matcher(self, root: str) -> object | None:
        lock = self.service.worktree_lock(Path(root))
        # A listener must never deadlock a caller that (against the rules) holds the lock.
        locked = lock.acquire(timeout=10)
        try:
            return self.service.caches.worktree(Path(root)).ignore_matcher()
        except Exception as exc:  # noqa: BLE001 - no filter is better than no watch
            log.warning("cannot read the ignore rules of %s (%s); every change arms a capture",
                        root, exc)
            return None
        finally:
            if locked:
                lock.release()

    def _entry_for(self, path: str) -> Entry | None:
        """The active attempt's entry whose root is ``path`` or its nearest ancestor."""
        with self.state.cond:
            entries = self.state.entries
            while True:
                entry = entries.get(path)
                if entry is not None and entry.attempt is not None:
                    return entry
                if path == "/" or not path.startswith("/"):
                    return None
                path = path.rpartition("/")[0] or "/"

    def _status_row(self, e: Entry, now: float) -> dict:
        """One ``watched`` row of ``status`` (its checkpoint age is filled in later). Under the
        lock."""
        attempt = e.attempt
        settle, max_wait = self.state.timing(e)
        lingering = attempt is None and e.linger.lingering
        ended = e.linger.last_attempt
        return {
            "path": e.root,
            "attempt": str(attempt.key) if attempt else None,
            "state": (e.state if attempt is not None
                      else "lingering" if lingering else "idle"),
            "ended_attempt": str(ended.key) if lingering and ended else None,
            "linger_left_s": (round(max(0.0, e.linger.mark + self.config.linger_s - now), 1)
                              if lingering else None),
            "degraded_reason": e.reason if e.state != "watching" else None,
            "detail": e.detail if e.state != "watching" else None,
            "window_open_s": round(now - e.window.first, 3) if e.window.first else None,
            "capturing": e.window.capturing,
            "last_checkpoint_age_s": None,
            "settle_ms": int(settle * 1000), "max_wait_ms": int(max_wait * 1000),
            "captures": e.window.captures,
            # Since the last drift verification fell due (quiet worktrees take turns for theirs).
            "verified_age_s": (round(now - e.checks.last_verify, 1)
                               if e.checks.last_verify else None),
            "fast_path": "on" if self.fastpath.fast_path_on(e, now) else "off",
            "fast_captures": e.changes.fast_captures, "drifts": e.changes.drifts,
            "symlinked_dirs": e.changes.aliased,
        }
