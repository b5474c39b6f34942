"""When tier 2 captures: settle windows, max-wait, verification scans, and the captures themselves.

Owns ``Settler``: the scheduler thread, the pool running tier-2 captures, window claims,
verification scans, recovery of windows a crash left open (``<home>/watch/`` markers) and the one
shared tick of every root's periodic stat (``scan_interval_s``). Promises (docs/watcher.md):
- A tier-2 capture (source ``watch``) runs after ``settle_ms`` without change, at the latest
  ``max_wait_ms`` after the first change not yet in a checkpoint, through
  ``Service.capture_attempt``: an ended or fenced attempt is never captured. At most one per
  worktree runs at a time; a failed one reopens its window and retries with backoff (≤ 30 s).
- After a burst's last capture one verification looks for drift; quiet worktrees are verified
  every ``verify_interval_s`` (if they saw events) or ``QUIET_VERIFY_FACTOR`` intervals, taking
  turns within ``quiet_verify_share`` of a core, never skipped; after a scan of ``LONG_VERIFY_S``
  the next waits for ``VERIFY_QUIET_FACTOR`` times that of quiet, never past that factor.
- Each crash marker of a still-active attempt becomes a ``settle-window-missed`` gap and an
  immediate capture; other markers are dropped.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from snapshotd.core import CAPTURE_FAILED, FENCED, WORKTREE_MISSING, WORKTREE_REPLACED, ServiceError
from snapshotd.ledger import ACTIVE, Attempt
from snapshotd.watch.fastpath import QUIET_VERIFY_FACTOR, FastPath
from snapshotd.watch.groups import Groups
from snapshotd.watch.notifier_group import STEP_MS
from snapshotd.watch.prescan import Prescan
from snapshotd.watch.state import Entry, Host, WatchState, identity

log = logging.getLogger("snapshotd.watcher")

# After a burst's last capture, one verification scan this long after it (s, at least settle).
VERIFY_DELAY_S = 1.0
# How long to wait for late events before calling a verification's find drift (s).
JUDGE_DELAY_S = 0.4
# A verification scan that took this long (s) or more makes the next wait for a quiet worktree:
# quiet for VERIFY_QUIET_FACTOR times as long as that scan took.
LONG_VERIFY_S = 0.5
VERIFY_QUIET_FACTOR = 2.0
# A worktree whose attempt ended keeps its entry this long, so a superseding attempt on the same
# directory takes the watch over without a rebuild (s).
IDLE_GRACE_S = 5.0
# Quiet worktrees' verifications start at least this far apart (s), whatever their share of a
# core (``quiet_verify_share``) would allow.
QUIET_VERIFY_GAP_S = 1.0
# Capture errors after which the window is not reopened: nothing more can be captured.
_FINAL_ERRORS = (FENCED, WORKTREE_MISSING, WORKTREE_REPLACED)


@dataclass
class Claim:
    """A worktree's window, taken for one capture."""

    attempt: Attempt
    first: float | None
    wall: float | None
    started: float


@dataclass
class _Plan:
    """What one scheduler pass found due, and when to look again."""

    now: float
    actions: list[Callable[[], None]] = field(default_factory=list)
    wake: float | None = None
    quiet: list[Entry] = field(default_factory=list)  # quiet worktrees owed a verification

    def later(self, at: float) -> None:
        delay = at - self.now
        self.wake = delay if self.wake is None else min(self.wake, delay)


class Settler:
    """The settle scheduler and the tier-2 captures it runs."""

    def __init__(self, state: WatchState, host: Host, groups: Groups, fastpath: FastPath) -> None:
        self.state = state
        self.host = host
        self.groups = groups
        self.fastpath = fastpath
        self.pool = ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2)),
                                       thread_name_prefix="snapshotd-watch-capture")
        self._scheduler = threading.Thread(target=self._schedule_loop, name="snapshotd-settle",
                                           daemon=True)
        # The next quiet worktree's verification may start then; the one whose turn it is.
        self._quiet_free_at = 0.0
        self._quiet_turn: Entry | None = None

    def start(self) -> None:
        self._scheduler.start()

    def stop(self) -> None:
        """Wait for the scheduler (``state.stopping`` is set) and every running capture."""
        self._scheduler.join(timeout=10)
        self.pool.shutdown(wait=True)

    def claim(self, entry: Entry, *, wait: bool) -> Claim | None:
        """Take the entry's window for a capture (under the lock); None if there is nothing to
        capture for or, with ``wait=False``, a capture already runs."""
        window = entry.window
        while window.capturing:
            if not wait:
                return None
            self.state.cond.wait()
        if entry.attempt is None or entry.state == "missing":
            return None
        window.capturing = True
        claim = Claim(entry.attempt, window.first, window.wall, time.monotonic())
        window.first = window.last = window.wall = None
        return claim

    def run_capture(self, entry: Entry, claim: Claim, kind: str, *,
                    raise_errors: bool = False) -> dict | None:
        """Capture a claimed entry; settles its window and marker whatever happens. ``kind``:
        window, flush, shutdown, crash, scan (degraded) or verify."""
        result, error, problem = self._capture(entry, claim.attempt, kind)
        with self.state.cond:
            entry.window.capturing = False
            self.state.cond.notify_all()
            if result is not None:
                self._captured(entry, claim, kind, result)
            elif error is not None and error.code not in _FINAL_ERRORS:
                self._reopen(entry, claim, kind)
            if entry.window.first is None:
                self.state.markers.remove(entry)
        if problem == "missing" or (error is not None and error.code in (WORKTREE_MISSING,
                                                                         WORKTREE_REPLACED)):
            # A gap was written by the service when it was the one to find out.
            self.host.mark_missing(entry, record=error is None)
        elif problem == "replaced":
            now_identity = identity(entry.root)
            if now_identity is not None:
                self.host.replaced(entry, now_identity)
        if error is not None and raise_errors and error.code != FENCED:
            raise error
        return result

    def recover_markers(self) -> None:
        """Windows a crash left open: a gap each, and a capture at once (still-active only)."""
        state = self.state
        for path, record in state.markers.read_all():
            if record is None:
                path.unlink(missing_ok=True)
                continue
            with state.cond:
                entry = state.entries.get(record["worktree"])
            attempt = entry.attempt if entry else None
            if (entry is None or attempt is None or attempt.state != ACTIVE
                    or attempt.key.as_dict() != {k: record.get(k) for k in
                                                 ("run_id", "node_id", "iteration", "attempt")}):
                path.unlink(missing_ok=True)
                continue
            opened = record["opened_at"]
            when = time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(opened))
            then = ("capturing the current state now" if entry.state != "missing"
                    else "the worktree no longer exists, so nothing could be captured")
            state.gap(entry, "settle-window-missed",
                      f"a settle window opened at {when} (unix {opened:.3f}) was still open when "
                      f"the daemon stopped without capturing it; {then}")
            with state.cond:
                entry.window.first = time.monotonic()
                entry.window.last = time.monotonic() - 3600  # due at once
                entry.window.wall = opened
                claim = self.claim(entry, wait=True)
            if claim is not None:
                self.pool.submit(self.run_capture, entry, claim, "crash")
            else:
                with state.cond:
                    state.close_window(entry)

    # -- scheduling ------------------------------------------------------------------------

    def _schedule_loop(self) -> None:
        cond = self.state.cond
        while True:
            with cond:
                if self.state.stopping:
                    return
                self.state.counters["scheduler_passes"] += 1
                actions, wake = self._due(time.monotonic())
                if not actions:
                    cond.wait(timeout=None if wake is None else max(0.0, wake))
                    continue
            for action in actions:
                try:
                    action()
                except Exception:  # noqa: BLE001 - the scheduler must outlive any one action
                    log.exception("watcher action failed")

    def _due(self, now: float) -> tuple[list[Callable[[], None]], float | None]:
        """What is due now (callables) and how long until the next thing is. Under the lock."""
        plan = _Plan(now)
        for entry in list(self.state.entries.values()):
            if entry.attempt is None and entry.linger.lingering:
                self._due_lingering(entry, plan)
            elif entry.attempt is None:
                idle_since = entry.linger.idle_since
                if idle_since is not None and now - idle_since >= IDLE_GRACE_S:
                    plan.actions.append(lambda e=entry: self.host.drop(e))
                elif idle_since is not None:
                    plan.later(idle_since + IDLE_GRACE_S)
            elif entry.state == "missing":
                if now >= entry.checks.next_health:
                    entry.checks.next_health = self._next_health(now)
                    plan.actions.append(lambda e=entry: self.host.probe_missing(e))
                plan.later(entry.checks.next_health)
            else:
                self._due_active(entry, plan)
        self._give_quiet_turn(plan)
        merge = self.groups.merge_plan(now)
        if merge is True:
            self.groups.start_merge()
        elif merge is not None:
            plan.later(merge)
        return plan.actions, plan.wake

    def _next_health(self, now: float) -> float:
        """When a worktree's root is next stat'ed: ``scan_interval_s`` from now, moved to the
        nearest tick of one grid shared by all worktrees. Clocks of worktrees begun apart would
        otherwise drift apart, and the scheduler would wake, and pass over every entry, once
        per worktree instead of once per tick (100 worktrees: 50 passes a second, 3.5 % of a
        core). Verification clocks stay apart: lined up, their scans would all start at once."""
        every = self.state.config.scan_interval_s
        return round((now + every) / every) * every  # at least now + every / 2

    def _due_active(self, entry: Entry, plan: _Plan) -> None:
        """An active attempt's worktree: health, window, scans, judging, retries."""
        now = plan.now
        checks = entry.checks
        if now >= checks.next_health:
            checks.next_health = self._next_health(now)
            plan.actions.append(lambda e=entry: self.host.check_root(e.root))
        plan.later(checks.next_health)
        if entry.window.capturing:
            return
        kind = self._capture_due(entry, plan)
        if kind is not None:
            claim = self.claim(entry, wait=False)
            if claim is not None:
                self.pool.submit(self.run_capture, entry, claim, kind)
        if checks.judge_at is not None:
            if now >= checks.judge_at:
                checks.judge_at = None
                plan.actions.append(lambda e=entry: self._judge(e))
            else:
                plan.later(checks.judge_at)
        if checks.retry_at is not None and entry.state == "degraded":
            if now >= checks.retry_at:
                checks.retry_at = None
                plan.actions.append(lambda e=entry: self.host.retry(e))
            else:
                plan.later(checks.retry_at)

    def _capture_due(self, entry: Entry, plan: _Plan) -> str | None:
        """Which capture is due now for an active worktree (window, scan, verify), if any."""
        now = plan.now
        window, checks = entry.window, entry.checks
        kind = None
        if window.first is not None:
            settle, max_wait = self.state.timing(entry)
            due = max(min(window.last + settle, window.first + max_wait), window.not_before)
            if now >= due:
                kind = "window"
            else:
                plan.later(due)
        elif checks.next_scan is not None and entry.state == "degraded":
            if now >= checks.next_scan:
                kind = "scan"
                checks.next_scan = now + self.state.config.scan_interval_s
            plan.later(checks.next_scan)
        if (entry.state == "watching" and window.first is None and checks.verify_at is None
                and entry.changes.baseline):
            # Look for drift now and then (an overflowed kernel queue is never reported).
            # A worktree that saw no event since its last verification is only re-verified
            # every QUIET_VERIFY_FACTOR intervals, and in turn: idle worktrees cost little CPU.
            due = self._verify_due(entry, plan, when_quiet=True)
            if due == "events":
                checks.verify_at = now
                checks.verify_since = now
            elif due == "quiet":
                plan.quiet.append(entry)
        if kind is None and checks.verify_at is not None and window.first is None:
            quiet = self._quiet_at(entry, now)
            if now >= checks.verify_at and now >= quiet:
                kind = "verify"
                checks.verify_at = None
                # A burst's verification counts as a periodic one too: it covers every event
                # so far (counted as not covered, they called for a second scan right after).
                checks.last_verify = now
                checks.verified_mark = checks.last_event
                checks.next_verify = now + self.state.config.verify_interval_s
            else:
                plan.later(max(checks.verify_at, quiet))
        return kind

    def _quiet_at(self, entry: Entry, now: float) -> float:
        """When a verification of ``entry`` may start without taking a core from the agent's
        work: now for one whose last verification was short; for a long one, once the worktree
        has been quiet for ``VERIFY_QUIET_FACTOR`` times that long, or once
        ``QUIET_VERIFY_FACTOR`` intervals have passed without one. Under the lock."""
        checks = entry.checks
        if checks.verify_took < LONG_VERIFY_S:
            return now
        if now - checks.last_verify >= QUIET_VERIFY_FACTOR * self.state.config.verify_interval_s:
            return now
        active = max(checks.last_event, entry.changes.last_fast)
        return active + VERIFY_QUIET_FACTOR * checks.verify_took

    def _due_lingering(self, entry: Entry, plan: _Plan) -> None:
        """A lingering worktree: ends after ``linger_s`` without events; its root is stat'ed
        every ``scan_interval_s``; a verification (a full scan compared with the dirty set,
        recording nothing) follows events, at most every ``verify_interval_s``. A quiet one is
        never scanned: past ``QUIET_VERIFY_FACTOR`` intervals without a verification or a
        fresh baseline, ``take`` just stops vouching. Under the lock."""
        now = plan.now
        expires = entry.linger.mark + self.state.config.linger_s
        if now >= expires:
            plan.actions.append(lambda e=entry: self.host.drop(e, expired=True))
            return
        plan.later(expires)
        if now >= entry.checks.next_health:
            entry.checks.next_health = self._next_health(now)
            plan.actions.append(lambda e=entry: self.host.check_root(e.root))
        plan.later(entry.checks.next_health)
        if entry.window.capturing or not entry.changes.baseline or entry.state != "watching":
            return
        quiet = self._quiet_at(entry, now)
        if now < quiet:  # the clock below stays due: it fires once the worktree is quiet
            plan.later(quiet)
            return
        if self._verify_due(entry, plan, when_quiet=False):
            entry.window.capturing = True  # no capture may start on it meanwhile
            self.pool.submit(self._verify_lingering, entry)

    def _verify_due(self, entry: Entry, plan: _Plan, *, when_quiet: bool) -> str | None:
        """The clock of periodic drift verification (under the lock): ``"events"`` when one
        should start now (events were seen since the last one); with ``when_quiet``,
        ``"quiet"`` when none ran for ``QUIET_VERIFY_FACTOR`` intervals (it waits for its turn,
        ``_give_quiet_turn``, its clock left as it is); else None."""
        now = plan.now
        every = self.state.config.verify_interval_s
        checks = entry.checks
        if checks.next_verify == 0.0:
            checks.next_verify = now + every
            checks.verified_mark = checks.last_event
            checks.last_verify = now
        elif now >= checks.next_verify:
            if checks.last_event != checks.verified_mark:
                checks.next_verify = now + every
                checks.verified_mark = checks.last_event
                checks.last_verify = now
                plan.later(checks.next_verify)
                return "events"
            if when_quiet and now - checks.last_verify >= every * QUIET_VERIFY_FACTOR:
                return "quiet"
            checks.next_verify = now + every
        plan.later(checks.next_verify)
        return None

    def _give_quiet_turn(self, plan: _Plan) -> None:
        """Start the verification of one quiet worktree owed one, the longest unverified first,
        once the last one's share of a core (``quiet_verify_share``) is spent: their cost then
        stays within that share however many worktrees are quiet (100 of 10,000 files, each
        verified every ten minutes at about 60 ms, would take 1 % of a core). Under the lock."""
        if not plan.quiet:
            return
        now = plan.now
        if now < self._quiet_free_at:
            plan.later(self._quiet_free_at)
            return
        entry = min(plan.quiet, key=lambda e: e.checks.last_verify)
        checks = entry.checks
        # Its periodic clock restarts when the verification starts (``_capture_due``).
        checks.last_verify = now
        checks.verify_at = checks.verify_since = now
        # Until it ends and says what it cost: what its last whole scan took.
        self._quiet_free_at = now + self._quiet_gap(checks.verify_took)
        self._quiet_turn = entry
        plan.later(now)

    def _quiet_gap(self, took: float) -> float:
        """How long after a quiet worktree's verification that took ``took`` s the next may
        start."""
        return max(QUIET_VERIFY_GAP_S, took / self.state.config.quiet_verify_share)

    # -- captures and verifications --------------------------------------------------------

    def _capture(self, entry: Entry, attempt: Attempt,
                 kind: str) -> tuple[dict | None, ServiceError | None, str | None]:
        """Run one tier-2 capture: (result, error, problem: missing | replaced | None)."""
        try:
            now_identity = identity(entry.root)
            if now_identity is None:
                return None, None, "missing"
            if entry.identity is not None and now_identity != entry.identity:
                return None, None, "replaced"
            # A verification scans off the worktree's lock first (``prescan``).
            prescan = Prescan.run(self.state.service, Path(entry.root)) \
                if kind == "verify" else None
            result = self.state.service.capture_attempt(attempt, tier=2, source="watch",
                                                        require_active=True,
                                                        full=kind in ("verify", "scan"),
                                                        prescan=prescan)
            return result, None, None
        except ServiceError as exc:
            return None, exc, None
        except Exception as exc:  # noqa: BLE001 - a capture never takes the watcher down
            log.exception("tier-2 capture of %s failed", entry.root)
            return None, ServiceError(CAPTURE_FAILED, f"{type(exc).__name__}: {exc}"), None

    def _captured(self, entry: Entry, claim: Claim, kind: str, result: dict) -> None:
        """A capture succeeded: counters, and the verification that follows. Under the lock."""
        now = time.monotonic()
        window, checks, counters = entry.window, entry.checks, self.state.counters
        window.failures = 0
        window.not_before = 0.0
        window.captures += 1
        counters["captures"] += 1
        counters["deduped"] += bool(result.get("deduped"))
        if kind in ("window", "flush", "crash") and not result.get("deduped"):
            checks.verify_at = now + max(VERIFY_DELAY_S, self.state.timing(entry)[0])
            checks.verify_since = claim.started
        if kind == "verify":
            if self._quiet_turn is entry:
                self._quiet_turn = None
                self._quiet_free_at = max(self._quiet_free_at,
                                          claim.started + self._quiet_gap(now - claim.started))
            counters["verifications"] += 1
            counters["verify_full_scans"] += result.get("scan") == "full"
            if not result.get("deduped"):
                checks.judge_at = now + JUDGE_DELAY_S
                checks.judge_since = checks.verify_since
                checks.judge_seq = result.get("seq")

    def _reopen(self, entry: Entry, claim: Claim, kind: str) -> None:
        """A capture failed and its changes are still owed: reopen the window and retry,
        backing off. Under the lock."""
        now = time.monotonic()
        window = entry.window
        self.state.counters["failures"] += 1
        window.failures += 1
        if claim.first is not None or kind != "verify":
            window.first = window.first or claim.first or now
            window.last = window.last or now
            window.wall = window.wall or claim.wall or time.time()
        window.not_before = now + min(30.0, self.state.config.scan_interval_s
                                      * 2 ** min(window.failures, 5))

    def _judge(self, entry: Entry) -> None:
        """A verification scan found changes: were they announced by any event? If not (and
        the scan's own drift check did not already say so), that is drift."""
        with self.state.cond:
            checks = entry.checks
            announced = checks.last_event >= checks.judge_since - STEP_MS / 1000
            seq = checks.judge_seq
            drift_recorded = entry.changes.drift_at >= checks.judge_since
        if announced or drift_recorded or entry.attempt is None:
            return
        self.fastpath.record_drift(entry, f"a verification scan found changes no event "
                                   f"announced (captured as seq {seq})")

    def _verify_lingering(self, entry: Entry) -> None:
        """Verify a lingering worktree without recording anything: under the worktree lock,
        take the dirty set, bring the stat cache up to date with a full scan, and call anything
        the scan found that no event reported drift (gap, fast path off)."""
        root = Path(entry.root)
        state = self.state
        try:
            prescan = Prescan.run(state.service, root)
            with state.service.worktree_lock(root):
                with state.cond:
                    if not entry.linger.lingering or state.entries.get(entry.root) is not entry:
                        return
                try:
                    capture = state.service.read_worktree(root, verify=True, prescan=prescan)
                except Exception as exc:  # noqa: BLE001 - the watch just stops vouching
                    log.warning("verification of lingering %s failed: %s", root, exc)
                    if identity(entry.root) != entry.identity:
                        self.host.drop(entry)
                    return
            with state.cond:
                state.counters["verifications"] += 1
                state.counters["verify_full_scans"] += capture.full_scan
        finally:
            with state.cond:
                entry.window.capturing = False
                state.cond.notify_all()
