"""The background pusher: checkpoints go to the git remote off the reply path.

Owns ``Replicator``: the table of attempt refs with checkpoints not yet known to be on the remote,
the pusher thread that drains it, the comparison with the remote (``sync``), backoff after a
failure, and the ``replication`` block of ``status``; ``push_now`` is ``snapshotd push`` with no
daemon. Promises (in full: docs/scale-out.md, "Replication"):
- Never on the reply path: a recorded checkpoint only notes its ref and wakes the pusher, which
  waits ``push_interval_ms`` then pushes every noted ref in one ``git push``, retrying with
  backoff (0.5 s doubling to 30 s); ``status`` shows unpushed ones, the oldest's age, the error.
- Nothing is lost while the remote or daemon is down: at start-up and after every failure the
  local refs are compared with the remote's and every ref it lacks or holds at an ancestor is
  pushed; a remote ref this store does not descend from is reported, never overwritten.
- Remote refs are never deleted; only ``refs/snapshotd/runs/`` is replicated. The remote and
  git's errors are shown only redacted. A checkpoint holding a secret (and every later one of
  its attempt) is held until released (``withhold``), logged once, listed under ``withheld``.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field

from snapshotd.core import (
    NO_REMOTE,
    PUSH_FAILED,
    AttemptKey,
    ServiceError,
    finding_text,
    redact_text,
    redact_url,
)
from snapshotd.features import Withholder
from snapshotd.features.replication.gitremote import (
    GIT_TIMEOUT_S,
    NO_REMOTE_HINT,
    descends,
    ls_remote,
    normalize_remote,
    push_refs,
    run_pattern,
)
from snapshotd.ledger import Attempt
from snapshotd.service import Service

log = logging.getLogger("snapshotd.replication")

BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 30.0
# Refspecs per `git push`: keeps the command line short with thousands of attempts.
PUSH_CHUNK = 200
# A push waits for captures to pause this long (s), bounded by push_interval_ms.
PUSH_QUIET_S = 0.03


def push_now(service: Service, run_id: str | None) -> dict:
    """``snapshotd push`` without a daemon: compare with the remote and push, once."""
    if not service.config.remote:
        raise ServiceError(NO_REMOTE, NO_REMOTE_HINT)
    return Replicator(service, service.config.remote, 0).sync(run_id)


@dataclass
class _Pending:
    key: AttemptKey
    # (generation, when recorded) of each checkpoint not yet known to be on the remote.
    entries: list[tuple[int, float]] = field(default_factory=list)


class Replicator:
    """The background pusher of one daemon (or one direct ``snapshotd push``)."""

    def __init__(self, service: Service, remote: str, push_interval_ms: int = 200) -> None:
        self.service = service
        self.remote = normalize_remote(remote)
        self.interval_s = max(0, push_interval_ms) / 1000
        self._lock = threading.Lock()       # guards the pending table and counters
        self._push_lock = threading.Lock()  # one git push at a time
        self._pending: dict[str, _Pending] = {}
        self._gen = 0
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._needs_sync = True  # compare with the remote before trusting the pending table
        self.failures = 0
        self.next_retry_at: float | None = None
        self.last_error: str | None = None
        self.last_error_at: float | None = None
        self.last_push_at: float | None = None
        self.last_sync_at: float | None = None
        self.pushes = 0
        self.refs_pushed = 0
        self.diverged: dict[str, dict] = {}
        self.withholder = Withholder(service.home)
        self.withheld: dict[str, dict] = {}  # ref -> its checkpoint held back, and why

    # -- the capture side: cheap ------------------------------------------------------------

    def note(self, attempt: Attempt, row: dict) -> None:
        """The ``on_checkpoint`` listener: remember the ref, wake the pusher. O(1)."""
        ref = attempt.key.ref
        with self._lock:
            self._gen += 1
            pending = self._pending.get(ref)
            if pending is None:
                pending = self._pending[ref] = _Pending(attempt.key)
            pending.entries.append((self._gen, float(row.get("created_at") or time.time())))
        self._wake.set()

    # -- the pusher thread -----------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="snapshotd-replication",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        # One last bounded try, so a clean shutdown leaves nothing behind when it can.
        if self._pending:
            try:
                self._push_batch(None, timeout=10.0)
            except Exception as exc:  # noqa: BLE001
                log.warning("final push to %s failed: %s", self.display_remote,
                            redact_text(str(exc)))

    def _run(self) -> None:
        while not self._stop.is_set():
            wait = None
            if self.next_retry_at is not None:
                wait = max(0.0, self.next_retry_at - time.monotonic())
            elif not self._needs_sync and not self._pending:
                wait = None
            else:
                wait = 0.0
            if wait is None or wait > 0:
                self._wake.wait(wait)
            if self._stop.is_set():
                return
            self._wake.clear()
            if self.next_retry_at is not None and time.monotonic() < self.next_retry_at:
                continue  # woken by a capture during backoff: the retry time still holds
            # Batching: let the checkpoints of a burst of tool calls join this push. It goes
            # as soon as captures pause (PUSH_QUIET_S without a new checkpoint), at the latest
            # push_interval_ms after the wake: a push then runs in the gap between an agent's
            # tool calls instead of under the next capture (on 2 cores the two compete).
            if self.interval_s and self._wait_for_quiet():
                return
            try:
                if self._needs_sync:
                    self.sync(None)
                else:
                    self._push_batch(None)
            except Exception:  # noqa: BLE001 - the pusher outlives any failure
                log.exception("replication pass failed")

    def _wait_for_quiet(self) -> bool:
        """Wait until no checkpoint arrived for PUSH_QUIET_S, or interval_s passed; True if the
        pusher is stopping."""
        deadline = time.monotonic() + self.interval_s
        while True:
            with self._lock:
                seen = self._gen
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._stop.wait(min(PUSH_QUIET_S, left)):
                return True
            with self._lock:
                if self._gen == seen:
                    return False

    # -- pushing -------------------------------------------------------------------------------

    def sync(self, run_id: str | None) -> dict:
        """Compare local attempt refs (of one run, or all) with the remote and push every one
        the remote lacks or holds at an ancestor, plus every pending one. Raises ServiceError
        (``push-failed``) when the remote cannot be reached."""
        with self._push_lock:
            try:
                remote_refs = ls_remote(self.remote, run_pattern(run_id))
            except ServiceError as exc:
                self._failed(exc.message)
                raise
            repo = self.service.store.reader()
            extra: set[str] = set()
            for key, local in self.service.store.attempt_refs():
                if run_id is not None and key.run_id != run_id:
                    continue
                ref = key.ref
                theirs = remote_refs.get(ref)
                if theirs == local:
                    self.diverged.pop(ref, None)
                    continue
                if theirs is None or descends(repo, local, theirs):
                    extra.add(ref)
                    self.diverged.pop(ref, None)
                elif ref not in self._pending:
                    # Not captured here since start-up: another host may own it. Reported only.
                    self.diverged[ref] = {**key.as_dict(), "local": local, "remote": theirs}
            for ref in extra:
                self._queue(ref, AttemptKey.from_ref(ref))
            result = self._push_locked(run_id, timeout=GIT_TIMEOUT_S)
            self._needs_sync = False
            self.last_sync_at = time.time()
            result["diverged"] = [d for r, d in self.diverged.items()
                                  if run_id is None or d["run_id"] == run_id]
            return result

    def _queue(self, ref: str, key: AttemptKey) -> None:
        """Queue a ref found by comparison (its lag counts from its newest ledger row)."""
        attempt = self.service.ledger.get_attempt(key)
        last = self.service.ledger.last_checkpoint(attempt.pk) if attempt else None
        when = float(last["created_at"]) if last else time.time()
        with self._lock:
            if ref in self._pending:
                return
            self._gen += 1
            self._pending[ref] = _Pending(key, [(self._gen, when)])

    def _push_batch(self, run_id: str | None, timeout: float = GIT_TIMEOUT_S) -> dict:
        with self._push_lock:
            return self._push_locked(run_id, timeout=timeout)

    def _push_locked(self, run_id: str | None, *, timeout: float) -> dict:
        with self._lock:
            batch = {ref: (p.key, max(g for g, _ in p.entries)) for ref, p in self._pending.items()
                     if run_id is None or p.key.run_id == run_id}
        # Each ref's tip is read after its generation was taken: every checkpoint noted up to
        # that generation is in (or behind) the commit pushed.
        specs, gone = self._targets(batch)
        pushed: list[str] = []
        error: str | None = None
        refs = sorted(specs)
        for i in range(0, len(refs), PUSH_CHUNK):
            chunk = refs[i:i + PUSH_CHUNK]
            ok, err = push_refs(self.service.store.path, self.remote,
                                {r: specs[r] for r in chunk}, timeout=timeout)
            pushed.extend(ok)
            if err:
                error = err
        with self._lock:
            for ref in gone:
                self._pending.pop(ref, None)
            for ref in pushed:
                pending = self._pending.get(ref)
                if pending is None:
                    continue
                gen = batch[ref][1]
                pending.entries = [e for e in pending.entries if e[0] > gen]
                if not pending.entries:
                    del self._pending[ref]
            self.refs_pushed += len(pushed)
            if pushed:
                self.pushes += 1
                self.last_push_at = time.time()
        if error is not None:
            self._failed(error)
            raise ServiceError(PUSH_FAILED,
                               f"could not push to {self.display_remote}: {error}")
        self.failures = 0
        self.next_retry_at = None
        return {"remote": self.display_remote, "pushed": [
            {**batch[r][0].as_dict(), "commit": specs[r]} for r in pushed],
            "unpushed": self.unpushed_count(run_id)}

    def _targets(self, batch: dict[str, tuple[AttemptKey, int]]) -> tuple[dict[str, str],
                                                                        list[str]]:
        """What to push of each ref (its tip, or the parent of its oldest checkpoint holding
        a secret), and the refs with nothing to push: gone locally, or held back whole."""
        specs: dict[str, str] = {}
        gone: list[str] = []
        repo = self.service.store.reader()  # this thread's own handle
        for ref, (key, _gen) in batch.items():
            found = repo.references.get(ref)
            if found is None:
                gone.append(ref)  # deleted locally (retention): nothing to push
                continue
            target, held = self.withholder.target(repo, ref, str(found.target))
            if held is None:
                self.withheld.pop(ref, None)
            else:
                self._withhold(ref, key, held)
            if target is None:
                gone.append(ref)  # its first checkpoint is held: nothing may leave yet
            else:
                specs[ref] = target
        return specs, gone

    def _withhold(self, ref: str, key: AttemptKey, held: dict) -> None:
        if self.withheld.get(ref, {}).get("commit") != held["commit"]:
            where = ", ".join(finding_text(f) for f in held["findings"][:5])
            log.warning("replication-withheld: %s seq %s holds a secret (%s); it stays on this "
                        "host until released: snapshotd push %s --release %s (or "
                        "--release-path PATH)", key, held["seq"], where, key.run_id,
                        held["commit"])
        self.withheld[ref] = {**key.as_dict(), **held, "reason": "replication-withheld"}

    def _failed(self, error: str) -> None:
        with self._lock:
            self.failures += 1
            self.last_error = error
            self.last_error_at = time.time()
            delay = min(BACKOFF_MAX_S, BACKOFF_MIN_S * 2 ** (self.failures - 1))
            self.next_retry_at = time.monotonic() + delay
            # After a failure the remote's state is unknown: compare again before pushing.
            self._needs_sync = True
        log.warning("replication to %s failed (retry in %.1fs): %s", self.display_remote,
                    delay, error)

    # -- reporting -----------------------------------------------------------------------------

    @property
    def display_remote(self) -> str:
        return redact_url(self.remote)

    def unpushed_count(self, run_id: str | None = None) -> int:
        with self._lock:
            return sum(len(p.entries) for p in self._pending.values()
                       if run_id is None or p.key.run_id == run_id)

    def attempt_state(self, key: AttemptKey) -> dict:
        with self._lock:
            pending = self._pending.get(key.ref)
            if pending is None:
                return {"unpushed": 0, "lag_s": 0.0}
            oldest = min(t for _, t in pending.entries)
            return {"unpushed": len(pending.entries),
                    "lag_s": round(max(0.0, time.time() - oldest), 3)}

    def status(self) -> dict:
        now = time.time()
        with self._lock:
            attempts = []
            for pending in self._pending.values():
                oldest = min(t for _, t in pending.entries)
                attempts.append({**pending.key.as_dict(), "unpushed": len(pending.entries),
                                 "lag_s": round(max(0.0, now - oldest), 3)})
            retry = None if self.next_retry_at is None else \
                round(max(0.0, self.next_retry_at - time.monotonic()), 3)
            return {
                "enabled": True, "remote": self.display_remote,
                "push_interval_ms": round(self.interval_s * 1000),
                "unpushed_checkpoints": sum(a["unpushed"] for a in attempts),
                "lag_s": max((a["lag_s"] for a in attempts), default=0.0),
                "attempts": sorted(attempts, key=lambda a: -a["lag_s"]),
                "last_error": self.last_error, "last_error_at": self.last_error_at,
                "consecutive_failures": self.failures, "next_retry_in_s": retry,
                "last_push_at": self.last_push_at, "last_sync_at": self.last_sync_at,
                "pushes": self.pushes, "refs_pushed": self.refs_pushed,
                "diverged": list(self.diverged.values()),
                "withheld": list(self.withheld.values()),
            }
