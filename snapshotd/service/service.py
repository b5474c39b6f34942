"""The capture service: turns capture requests into numbered checkpoints, or gaps.

Owns the per-worktree serialization of captures, deduplication, idempotency by tool call, fencing
of superseded and ended attempts, the capture path itself (read the worktree, then hand the
capture to ``recording``, which commits it and records its row), ``attempt_begin`` /
``attempt_end``, and the service's own ``status`` figures. It delegates attribution
(``attribution``), the ``list`` op (``listing``) and start-up reconciliation of the ledger with
the store's refs (``reconcile``). Promises:
- Captures of one worktree are strictly serialized; different worktrees proceed concurrently.
- Write order is objects → commit → ref → ledger row → reply. A crash before the ref leaves
  only unreferenced objects; a crash between ref and row is repaired at start-up from the commit
  trailers, so an acknowledged seq is never reused.
- A capture that fails raises ``ServiceError`` and leaves a gap record; it never takes the
  daemon down.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pygit2

from snapshotd import __version__
from snapshotd.capture import Capture, CaptureSettings, StatCaches
from snapshotd.core import (
    BAD_REQUEST,
    CAPTURE_FAILED,
    CONFLICT,
    FENCED,
    NOT_FOUND,
    WORKTREE_MISSING,
    WORKTREE_REPLACED,
    AttemptKey,
    Config,
    ServiceError,
    Trailers,
    crash_point,
    id_field,
    int_field,
    opt_int_field,
    write_file,
)
from snapshotd.ledger import ACTIVE, Attempt, Ledger, LedgerError, open_ledger, percentiles
from snapshotd.service.attribution import Attribution
from snapshotd.service.change_source import ChangeSource, OffLockScan
from snapshotd.service.damage import DamageRegistry, repair_ref
from snapshotd.service.gaps import GapSpool
from snapshotd.service.listing import list_op, list_run
from snapshotd.service.ownership import Call, Ownership
from snapshotd.service.reconcile import lost_gap_writer, reconcile, reconcile_attempt
from snapshotd.service.recording import Recorder, checkpoint_label
from snapshotd.service.request import (
    SOURCES,
    SnapshotRequest,
    gap_fields,
    outcome_json,
    tool_ids_of,
)
from snapshotd.service.seqmarks import SeqMarks
from snapshotd.service.settling import settle
from snapshotd.store import Store, StoreError, disk_reason
from snapshotd_client import gaps_path

# Names other modules import from here; their homes are the modules above.
__all__ = ["SOURCES", "ChangeSource", "Service", "ServiceError", "SnapshotRequest", "list_run"]

log = logging.getLogger("snapshotd.service")


class Service:
    """Everything the daemon does to the store and the ledger, callable from any thread."""

    def __init__(self, home: Path, config: Config, *, gaps_file: Path | None = None) -> None:
        self.home = home
        self.config = config
        self.started_at = time.time()
        self.store = Store(home, fsync=config.durability == "full", recover=True)
        self.caches = StatCaches(self.store, CaptureSettings(
            excludes=tuple(config.excludes), max_file_bytes=config.max_file_bytes,
            secret_files=config.secret_files, secret_scan=config.secret_scan,
            worktree_settings=config.for_worktree))
        self.ledger: Ledger = open_ledger(home, config)
        self.ledger.host = host_id(home)
        self.ledger.set_full_durability(config.durability == "full")
        if config.durability == "full":
            # Objects and refs are fsynced by libgit2 before a checkpoint is acknowledged.
            pygit2.option(pygit2.enums.Option.ENABLE_FSYNC_GITDIR, True)
        self.gaps = GapSpool(gaps_file or gaps_path(home))
        self.seqmarks = SeqMarks(home)
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.counters: dict[str, int] = {"captures_tier1": 0, "captures_tier2": 0,
                                         "dedups": 0, "repeats": 0, "errors": 0,
                                         "fast_captures": 0, "full_scans": 0,
                                         "settle_retakes": 0, "unsettled": 0}
        # What changed since the last capture, when a watcher can vouch for it (fastpath).
        self.change_source: ChangeSource | None = None
        # Called with the attempt when it starts or stops being active (watcher, engine).
        self.on_attempt_active: list[Callable[[Attempt], None]] = []
        self.on_attempt_inactive: list[Callable[[Attempt], None]] = []
        # Called with the attempt and its new row once a checkpoint is recorded (replication),
        # on the capture path: a listener only notes the work and returns.
        self.on_checkpoint: list[Callable[[Attempt, dict], None]] = []
        # The tool calls in flight per attempt, and who owns a tier-2 capture (memory only).
        self.ownership = Ownership(self.ledger, self.counters)
        self.recorder = Recorder(self.store, self.ledger, self.seqmarks, self.record_gap,
                                 self.counters, self.on_checkpoint, self.ownership)
        self.latencies = self.recorder.latencies  # capture latencies per tier, for status
        # Which attempt each worktree's tier-2 captures go to (the last one announced active).
        self._tier2_owner: dict[str, AttemptKey] = {}
        self._routing_lock = threading.RLock()
        self.attribution = Attribution(
            home=home, ledger=self.ledger, caches=self.caches,
            max_zero_setup_files=config.max_zero_setup_files, record_gap=self.record_gap,
            announce_active=self.announce_active)
        # Attempts found damaged (at start-up or by a capture): each one's damage stays its own.
        self.damage = DamageRegistry(self.gaps)
        self.reconciliation = self.reconcile()

    # -- ops -------------------------------------------------------------------------------

    def snapshot(self, fields: dict) -> dict:
        """The ``snapshot`` op: capture a worktree for the attempt the request names or implies
        (the order is ``snapshotd.service.attribution``'s). Its ledger reads see every commit made
        before it began (one check for other connections' commits serves them all)."""
        with self.ledger.reads_since(time.monotonic_ns()):
            return self._snapshot(fields)

    def _snapshot(self, fields: dict) -> dict:
        started = time.perf_counter()
        req = SnapshotRequest.from_fields(fields)
        try:
            attempt = self.attribution.attribute(req)
        except Exception as exc:
            self._ledger_failed(req, None, exc)
            raise
        root = Path(attempt.worktree)
        if attempt.zero_setup:
            self.route_tier2(attempt)
        with self.worktree_lock(root):
            # Re-read under the lock: an attempt_begin may have fenced this attempt meanwhile.
            try:
                current = self.ledger.get_attempt(attempt.key)
            except Exception as exc:
                self._ledger_failed(req, attempt, exc)
                raise
            if current is None or current.state != ACTIVE:
                self._fenced(req, attempt, current)
            try:
                result = self.capture_locked(current, req, started)
            except Exception as exc:
                self._ledger_failed(req, current, exc)
                raise
            if current.idle_since is not None and req.source == "hook":
                # A tool call is its agent at work, whatever the last turn's end said.
                self.ledger.set_attempt_idle(current.key, False)
        if req.tool_use_id:  # a call ended: another session's running call may own tier 2
            self.route_in_flight(current.worktree)
        crash_point("before-reply")
        return result

    def tool_started(self, fields: dict, started_at: float) -> bool:
        """The ``before_tool`` op's record: the attempt the request would be attributed to has
        its tool call (ids, label as the after-tool capture names it) in flight since
        ``started_at``. Memory only: no capture, no ledger write, no attempt created, no gap
        (False when there is no active attempt yet)."""
        label = fields.get("label")
        if isinstance(label, str) and label.startswith("before "):
            fields = dict(fields, label=label[len("before "):])
        req = SnapshotRequest.from_fields(dict(fields, source="hook", tier=1))
        with self.ledger.reads_since(time.monotonic_ns()):
            attempt = self.attribution.existing(req)
        if attempt is None:
            return False
        self.ownership.start(attempt, Call(tuple(tool_ids_of(req)),
                                           checkpoint_label(req, attempt.worktree), started_at))
        self.route_in_flight(attempt.worktree)
        return True

    def set_idle(self, attempt: Attempt, idle: bool) -> None:
        """A session's turn ended (``idle``) or began: the ledger's mark, and no tool call of
        it is in flight any more once idle."""
        self.ledger.set_attempt_idle(attempt.key, idle)
        if idle:
            self.ownership.went_idle(attempt)

    def ping(self, _fields: dict | None = None) -> dict:
        return {"pid": os.getpid(), "version": __version__, "home": str(self.home)}

    def attempt_begin(self, fields: dict) -> dict:
        """Register an attempt on a worktree, superseding the active one there: a worktree has
        at most one active attempt, and a superseded attempt's later captures are fenced."""
        run_id = id_field("run_id", fields.get("run_id"))
        node_id = id_field("node_id", fields.get("node_id"))
        iteration = int_field(fields, "iteration", 0, 0)
        root = self.attribution.worktree_from_cwd(fields)
        owner_pid = fields.get("owner_pid")
        if owner_pid is not None and (not isinstance(owner_pid, int) or isinstance(owner_pid, bool)
                                      or owner_pid <= 0):
            raise ServiceError(BAD_REQUEST, "owner_pid must be a positive integer")
        settle_ms = opt_int_field(fields, "settle_ms", 1)
        max_wait_ms = opt_int_field(fields, "max_wait_ms", 1)
        with self.worktree_lock(root):
            if fields.get("attempt") is None:
                number = self.ledger.last_attempt_number(run_id, node_id, iteration) + 1
            else:
                number = int_field(fields, "attempt", 1, 1)
            key = AttemptKey(run_id, node_id, iteration, number)
            existing = self.ledger.get_attempt(key)
            if existing is not None and existing.state != ACTIVE:
                raise ServiceError(CONFLICT, f"attempt {key} already ended "
                                   f"({existing.state}); begin a new attempt number")
            if existing is not None and existing.worktree != str(root):
                raise ServiceError(CONFLICT, f"attempt {key} works in "
                                   f"{existing.worktree}, not {root}")
            self.ledger.ensure_worktree(self.caches.worktree(root).id, str(root))
            superseded = [a for a in self.ledger.active_attempts(str(root)) if a.key != key]
            for old in superseded:
                self.ledger.set_attempt_state(old.key, "superseded", ended=True,
                                              final_commit=self._head_commit(old))
            epoch = self.ledger.bump_epoch(str(root))
            attempt = existing or self.ledger.create_attempt(
                key, str(root), epoch=epoch, owner_pid=owner_pid,
                settle_ms=settle_ms, max_wait_ms=max_wait_ms)
        for old in superseded:
            self.announce_inactive(old)
        self.announce_active(attempt)
        result = attempt.as_dict()
        result["superseded"] = [str(a.key) for a in superseded]
        return result

    def attempt_end(self, fields: dict) -> dict:
        """End an attempt: record the final pointer and the end time. Pending tier-2 work is
        flushed first by the engine's wrapper of this op (``snapshotd.features.engine``)."""
        status = fields.get("status", "finished")
        if status not in ("finished", "failed", "cancelled"):
            raise ServiceError(BAD_REQUEST,
                               "status must be finished, failed or cancelled")
        attempt = self.named_attempt(fields)
        with self.worktree_lock(Path(attempt.worktree)):
            current = self.ledger.get_attempt(attempt.key)
            assert current is not None
            if current.state == ACTIVE:
                self.ledger.set_attempt_state(current.key, status, ended=True,
                                              final_commit=self._head_commit(current))
            ended = self.ledger.get_attempt(attempt.key)
        assert ended is not None
        self.announce_inactive(ended)
        return ended.as_dict()

    def list_run(self, fields: dict) -> dict:
        """The ``list`` op: a run's checkpoints and gaps (the ``snapshots --json`` shape)."""
        return list_op(self.ledger, self.gaps, fields)

    def status(self, _fields: dict | None = None) -> dict:
        counts = self.ledger.counts()
        return {
            "pid": os.getpid(), "version": __version__, "home": str(self.home),
            "uptime_s": round(time.time() - self.started_at, 3),
            "counters": dict(self.counters), "checkpoints": counts,
            "gaps_by_reason": dict(self.gaps.counts), "gaps_unwritten": self.gaps.unwritten,
            "ledger": {"dialect": self.ledger.dialect, **self.ledger.counters()},
            "latency_ms": {f"tier{t}": percentiles(v) for t, v in self.latencies.items()},
            "active_attempts": [a.as_dict() for a in self.ledger.active_attempts()],
            "reconciliation": self.reconciliation,
            "damaged_attempts": self.damage.listing(),
            "recovery": self.store.recovery.as_dict(),
        }

    # -- for the daemon's other parts ------------------------------------------------------

    def named_attempt(self, fields: dict) -> Attempt:
        """The attempt a request's ``run_id``, ``node_id``, ``iteration`` and ``attempt`` (the
        node's newest when absent) name, or ``not-found``."""
        run_id = id_field("run_id", fields.get("run_id"))
        node_id = id_field("node_id", fields.get("node_id"))
        iteration = int_field(fields, "iteration", 0, 0)
        return self.attribution.find_attempt(run_id, node_id, iteration, fields.get("attempt"))

    def capture_attempt(self, attempt: Attempt, *, tier: int, source: str,
                        label: str | None = None, require_active: bool = False,
                        full: bool = False, prescan: OffLockScan | None = None) -> dict:
        """A capture the daemon takes by itself (tier 2, restore safety) for a known attempt.
        With ``require_active`` an attempt that ended or was fenced meanwhile is refused
        (``fenced``, no gap: nothing was owed to it), checked under the worktree lock.
        ``full`` verifies the watcher: a stat scan of the whole tree, or ``prescan``'s."""
        req = SnapshotRequest(cwd=Path(attempt.worktree), tier=tier, source=source, label=label,
                              run_id=attempt.key.run_id, node_id=attempt.key.node_id,
                              iteration=attempt.key.iteration, attempt=attempt.key.attempt,
                              full=full, prescan=prescan)
        started = time.perf_counter()
        with self.worktree_lock(Path(attempt.worktree)):
            current = self.ledger.get_attempt(attempt.key)
            if current is None:
                raise ServiceError(NOT_FOUND,
                                   f"attempt {attempt.key} is not in the ledger")
            if require_active and current.state != ACTIVE:
                raise ServiceError(FENCED, f"attempt {current.key} is {current.state}")
            try:
                return self.capture_locked(current, req, started)
            except Exception as exc:
                self._ledger_failed(req, current, exc)
                raise

    def worktree_lock(self, root: Path) -> threading.Lock:
        """The lock that serializes everything reading or writing the worktree ``root``."""
        key = str(root)
        with self._locks_guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.Lock()
            return lock

    def close(self) -> None:
        self.caches.persist_all()
        self.seqmarks.close()
        self.ledger.close()

    def reconcile(self) -> dict:
        """Bring the ledger level with the refs (``snapshotd.service.reconcile``). At the first start of a
        boot, rows whose commits a power cut took are dropped as ``checkpoint-lost`` gaps; not
        with a remote, where a row may name a commit that is only on the remote yet."""
        lost = self.store.recovery.fresh_boot and not self.config.remote
        return reconcile(self.store, self.ledger, self.damage,
                         lost_gap_writer(self.gaps) if lost else None)

    def reconcile_attempt(self, key: AttemptKey, tip: str) -> int:
        """Insert the rows of the commits on ``tip``'s chain that the ledger lacks."""
        return reconcile_attempt(self.store, self.ledger, key, tip)

    def read_worktree(self, root: Path, *, verify: bool = False,
                      prescan: OffLockScan | None = None) -> Capture:
        """Bring ``root``'s stat cache up to date and write its tree, recording nothing (the
        caller holds the worktree lock): through the change source's changed paths when it
        vouches, else a full stat scan. ``verify`` looks for changes no event announced (drift,
        reported to the source): with the paths ``prescan`` found off the lock, else by the
        scan. On failure the source is told the paths it handed over are owed (the next
        capture scans), any error but a ``StoreError`` also drops the cache, and it propagates."""
        index = self.caches.worktree(root)
        source = self.change_source
        try:
            mode = "fast" if not verify else "narrow" if prescan is not None else "verify"
            reported = source.take(root, mode) if source is not None else None
            capture = index.capture_changed(reported) \
                if reported is not None and not verify else None
            if verify and prescan is not None and reported is not None and source is not None:
                capture = prescan.verify(index, source, root, reported)
            if capture is None:
                scan_started = time.monotonic()
                capture = index.capture()
                if source is not None:
                    source.scanned(root, time.monotonic() - scan_started)
                if reported is not None and verify and source is not None:
                    source.drift(root, set(capture.paths) - reported, reported)
            if source is not None:
                capture = settle(index, source, root, capture, self.counters)
        except StoreError:
            if source is not None:
                source.failed(root)
            raise
        except Exception:
            if source is not None:
                source.failed(root)
            index.drop_cache()
            raise
        return capture

    def capture_locked(self, attempt: Attempt, req: SnapshotRequest, started: float) -> dict:
        """One capture of ``attempt``'s worktree (the caller holds its lock): a repeated tool
        call answers with its checkpoint, an unchanged tree with the newest one, anything else
        becomes a new checkpoint. Every failure leaves a gap and raises ``ServiceError``."""
        for tool_id in tool_ids_of(req):  # a repeat may name the call by any of its ids
            previous = self.ledger.tool_call(attempt.pk, tool_id)
            if previous is not None:
                self.counters["repeats"] += 1
                return self.recorder.reply(attempt, previous, deduped=True, repeated=True,
                                          started=started)
        # Shared with other captures, exclusive of gc's prune: from the first object written
        # to the ref moved, nothing this capture wrote is named by a ref yet.
        with self.store.gate.shared():
            capture, head = self._read(attempt, req)
            self.counters["fast_captures" if not capture.full_scan else "full_scans"] += 1
            last = self._level_ledger(attempt, req, head)
            if head is not None and str(head.tree_id) == capture.tree:
                # A head without a seq trailer reads as seq 0: only a ledger whose newest
                # row is seq 0 then takes the unchanged tree as that checkpoint.
                found = Trailers(head.message).seq
                seq = 0 if found is None else found
                if last is not None and last["seq"] == seq:
                    if req.tool_use_id:
                        self.ledger.record_tool_call(
                            attempt, req.tool_use_id, seq, outcome_json(req), req.tool_aliases,
                            label=checkpoint_label(req, attempt.worktree),
                            started_at=self.ownership.started_at(attempt, tool_ids_of(req)))
                        self.ownership.closed(attempt, tool_ids_of(req))
                    self.counters["dedups"] += 1
                    return self.recorder.reply(
                        attempt, {"seq": seq, "commit": str(head.id), "tree": capture.tree},
                        deduped=True, started=started, skipped=capture.skipped, tier=req.tier,
                        scan="full" if capture.full_scan else "fast")
            return self.recorder.record(attempt, req, capture, head, last, started)

    def record_gap(self, req: SnapshotRequest, attempt: Attempt | None, reason: str,
                   detail: str) -> None:
        """A gap for a capture request that could not be served (``fenced`` is not an error)."""
        self.counters["errors"] += reason != FENCED
        reason, detail = disk_reason(reason, detail, self.store.path)
        self.gaps.record(reason=reason, detail=detail, **gap_fields(req, attempt))

    def announce_active(self, attempt: Attempt) -> None:
        """Tell the listeners (watcher, engine) that ``attempt`` now owns its worktree's
        tier-2 captures."""
        with self._routing_lock:
            self._tier2_owner[attempt.worktree] = attempt.key
            for listener in self.on_attempt_active:
                try:
                    listener(attempt)
                except Exception:  # noqa: BLE001
                    log.exception("attempt-active listener failed for %s", attempt.worktree)

    def announce_inactive(self, attempt: Attempt) -> None:
        """Tell the listeners that ``attempt`` ended. When it owned its worktree's tier-2
        captures and another attempt is still active there (two agent sessions in one folder),
        the newest of those takes them over."""
        self.ownership.forget(attempt)
        with self._routing_lock:
            for listener in self.on_attempt_inactive:
                try:
                    listener(attempt)
                except Exception:  # noqa: BLE001
                    log.exception("attempt-inactive listener failed for %s", attempt.worktree)
            if self._tier2_owner.get(attempt.worktree) not in (attempt.key, None):
                return
            self._tier2_owner.pop(attempt.worktree, None)
            others = [a for a in self.ledger.active_attempts(attempt.worktree)
                      if a.key != attempt.key]
            if others:
                self.announce_active(others[-1])

    def route_tier2(self, attempt: Attempt) -> None:
        """Make ``attempt`` (an agent session that just made a request) the owner of its
        worktree's tier-2 captures, when another active attempt there held them: with several
        sessions in one folder, tier 2 goes to the one active most recently."""
        with self._routing_lock:
            if self._tier2_owner.get(attempt.worktree) != attempt.key:
                self.announce_active(attempt)

    def route_in_flight(self, worktree: str) -> None:
        """With several sessions in one folder, tier 2 goes to the one whose tool call runs,
        when exactly one has a call in flight (else it stays where it is)."""
        running = self.ownership.in_flight(worktree)
        if len(running) == 1:
            self.route_tier2(running[0])

    # -- helpers ---------------------------------------------------------------------------

    def _read(self, attempt: Attempt, req: SnapshotRequest
              ) -> tuple[Capture, pygit2.Commit | None]:
        """The worktree's tree and the attempt's newest commit, or a gap and ``ServiceError``
        (a ref the store cannot read fails the capture like the worktree would)."""
        root = Path(attempt.worktree)
        try:
            return (self.read_worktree(root, verify=req.full, prescan=req.prescan),
                    self._capture_head(attempt))
        except StoreError as exc:
            # The worktree's own trouble keeps its code; any other store failure is
            # capture-failed (the gap names the store's reason).
            self.record_gap(req, attempt, exc.reason, exc.message)
            raise ServiceError(
                WORKTREE_MISSING if exc.reason == WORKTREE_MISSING
                else WORKTREE_REPLACED if exc.reason == WORKTREE_REPLACED
                else CAPTURE_FAILED, exc.message) from exc
        except Exception as exc:  # noqa: BLE001 - any failure becomes a gap, never a crash
            self.record_gap(req, attempt, "capture-failed", f"{type(exc).__name__}: {exc}")
            raise ServiceError(CAPTURE_FAILED,
                               f"capture of {root} failed: {exc}") from exc

    def _level_ledger(self, attempt: Attempt, req: SnapshotRequest,
                      head: pygit2.Commit | None) -> dict | None:
        """The attempt's newest row, after repairing a ref that moved without its row (a
        ledger fault on an earlier capture)."""
        last = self.ledger.last_checkpoint(attempt.pk)
        if head is None or (last is not None and last["commit"] == str(head.id)):
            return last
        try:
            self.reconcile_attempt(attempt.key, str(head.id))
        except Exception as exc:  # noqa: BLE001
            self.record_gap(req, attempt, "ledger-failed", f"{type(exc).__name__}: {exc}")
            raise ServiceError(CAPTURE_FAILED,
                               f"the ledger cannot be written: {exc}") from exc
        return self.ledger.last_checkpoint(attempt.pk)

    def _fenced(self, req: SnapshotRequest, attempt: Attempt, current: Attempt | None) -> None:
        state = current.state if current else "missing"
        detail = f"attempt {attempt.key} is {state}; its captures are refused"
        self.record_gap(req, attempt, FENCED, detail)
        raise ServiceError(FENCED, detail)

    def _ledger_failed(self, req: SnapshotRequest, attempt: Attempt | None,
                       exc: Exception) -> None:
        """A ledger read or write failed before the capture (a full or failing disk under the
        ledger, a database gone): a ``ledger-failed`` gap and ``capture-failed``, never an
        ``internal`` error with no gap. Any other exception is left alone."""
        if isinstance(exc, ServiceError) or not isinstance(exc, LedgerError):
            return
        self.record_gap(req, attempt, "ledger-failed", f"{type(exc).__name__}: {exc}")
        raise ServiceError(CAPTURE_FAILED, f"the ledger cannot be used: {exc}") from exc

    def _capture_head(self, attempt: Attempt) -> pygit2.Commit | None:
        """The attempt's newest commit, the capture's parent. A ref broken for certain (it
        names a commit the store lacks, or cannot be parsed) is repaired first, onto the newest
        checkpoint the store holds, and the attempt recorded damaged (``snapshotd.service.damage``):
        the capture then continues the chain from there, losing nothing more."""
        try:
            return self.store.head(attempt.key)
        except StoreError:
            detail = repair_ref(self.store, self.ledger, attempt.key)
            if detail is None:
                raise
            self.damage.note(attempt.key, detail, attempt.worktree)
            return self.store.head(attempt.key)

    def _head_commit(self, attempt: Attempt) -> str | None:
        try:
            head = self.store.head(attempt.key)
        except StoreError as exc:
            # Ending or superseding a damaged attempt still happens; its final pointer stays
            # whatever it was (the damage itself is reported by reconciliation or the capture).
            log.warning("attempt %s ends without a final pointer: %s", attempt.key, exc.message)
            return None
        return str(head.id) if head else None


def host_id(home: Path) -> str:
    """The id this home's daemon stamps on the attempts it creates (``Attempt.host``): the host
    name and a random part kept in ``<home>/host-id`` (two homes on one host are two stores),
    written durably once, at the first start."""
    path = home / "host-id"
    try:
        found = path.read_text().strip()
    except FileNotFoundError:
        found = ""
    if found:
        return found
    made = f"{socket.gethostname()}-{uuid.uuid4().hex[:12]}"
    # Durable before any attempt names it, whatever ``durability`` says: an id lost to a power
    # cut would make this daemon refuse its own attempts as another host's.
    write_file(path, (made + "\n").encode(), 0o600, sync=True)
    return made
