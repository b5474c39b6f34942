"""The snapshot service: turns capture requests into numbered checkpoints, or gaps.

Owns attribution (which attempt a capture belongs to, DESIGN §6), the per-worktree
serialization of captures, deduplication, idempotency by tool call, fencing of superseded and
ended attempts, and start-up reconciliation of the ledger with the store's refs.

Promises:
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
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import pygit2

from snapshotd import __version__, faults
from snapshotd.config import Config
from snapshotd.errors import ServiceError, id_field, int_field, opt_int_field
from snapshotd.gaps import GapSpool
from snapshotd.ledger import (
    ACTIVE,
    Attempt,
    DuplicateToolCall,
    Ledger,
    LedgerError,
    SeqConflict,
    open_ledger,
)
from snapshotd.store import (
    AttemptKey,
    CheckpointMeta,
    Store,
    StoreError,
    parse_trailers,
    tree_changes,
)
from snapshotd.worktree_index import Capture
from snapshotd_client.paths import gaps_path

log = logging.getLogger("snapshotd.service")

SOURCES = ("hook", "wrap", "watch", "restore", "cli")
_PSEUDO_FS = (Path("/proc"), Path("/sys"), Path("/dev"))


class ChangeSource(Protocol):
    """Knows which paths of a worktree changed since its last capture (the watcher)."""

    def take(self, root: Path, mode: str) -> set[str] | None:
        """The worktree-relative paths changed since the last capture, once every earlier
        change has been observed; None when it cannot vouch (then a full scan runs). ``mode``
        is ``fast`` or ``verify`` (a full scan follows; the set is used to detect drift)."""

    def failed(self, root: Path) -> None:
        """The capture that took the paths failed: stop vouching until a full scan."""

    def drift(self, root: Path, missed: list[str]) -> None:
        """A full scan found changes no event reported."""


@dataclass
class SnapshotRequest:
    cwd: Path
    tier: int = 1
    source: str = "wrap"
    run_id: str | None = None
    node_id: str | None = None
    iteration: int = 0
    attempt: int | None = None
    label: str | None = None
    tool_use_id: str | None = None
    fallback: dict | None = None
    full: bool = False  # internal: force a full stat scan (never set from the wire)

    @classmethod
    def from_fields(cls, fields: dict) -> SnapshotRequest:
        """Validate a request's fields; raises ServiceError(bad-request | bad-id)."""
        cwd = fields.get("cwd")
        if not isinstance(cwd, str) or not cwd or "\0" in cwd:
            raise ServiceError("bad-request", "cwd must be a non-empty path string")
        if not os.path.isabs(cwd):
            raise ServiceError("bad-request", f"cwd must be an absolute path, got {cwd!r}")
        tier = int_field(fields, "tier", 1, 1)
        if tier not in (1, 2):
            raise ServiceError("bad-request", f"tier must be 1 or 2, got {tier}")
        source = fields.get("source", "wrap")
        if source not in SOURCES:
            raise ServiceError("bad-request", f"source must be one of {', '.join(SOURCES)}")
        req = cls(cwd=Path(cwd), tier=tier, source=source)
        run_id, node_id = fields.get("run_id"), fields.get("node_id")
        if (run_id is None) != (node_id is None):
            raise ServiceError("bad-request", "run_id and node_id go together: name both or neither")
        if run_id is not None:
            req.run_id = id_field("run_id", run_id)
            req.node_id = id_field("node_id", node_id)
        req.iteration = int_field(fields, "iteration", 0, 0)
        if fields.get("attempt") is not None:
            req.attempt = int_field(fields, "attempt", 1, 1)
        for name in ("label", "tool_use_id"):
            value = fields.get(name)
            if value is not None:
                if not isinstance(value, str) or len(value.encode()) > 1000 or "\0" in value:
                    raise ServiceError("bad-request", f"{name} must be a string under 1000 bytes")
                setattr(req, name, value)
        fallback = fields.get("fallback")
        if fallback is not None:
            if not isinstance(fallback, dict):
                raise ServiceError("bad-request", "fallback must be a map")
            wt = fallback.get("worktree")
            if not isinstance(wt, str) or not os.path.isabs(wt) or "\0" in wt:
                raise ServiceError("bad-request", "fallback.worktree must be an absolute path")
            req.fallback = {
                "run_id": id_field("fallback.run_id", fallback.get("run_id")),
                "node_id": id_field("fallback.node_id", fallback.get("node_id")),
                "iteration": int_field(fallback, "iteration", 0, 0),
                "attempt": int_field(fallback, "attempt", 1, 1),
                "worktree": wt,
            }
        return req


class Service:
    """Everything the daemon does to the store and the ledger, callable from any thread."""

    def __init__(self, home: Path, config: Config, *, gaps_file: Path | None = None) -> None:
        self.home = home
        self.config = config
        self.started_at = time.time()
        self.store = Store(home, excludes=config.excludes, max_file_bytes=config.max_file_bytes)
        self.ledger: Ledger = open_ledger(home, config)
        self.ledger.set_full_durability(config.durability == "full")
        if config.durability == "full":
            # Objects and refs are fsynced by libgit2 before a checkpoint is acknowledged.
            pygit2.option(pygit2.enums.Option.ENABLE_FSYNC_GITDIR, True)
        self.gaps = GapSpool(gaps_file or gaps_path(home))
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.counters: dict[str, int] = {"captures_tier1": 0, "captures_tier2": 0,
                                         "dedups": 0, "repeats": 0, "errors": 0,
                                         "fast_captures": 0, "full_scans": 0}
        # What changed since the last capture, when a watcher can vouch for it (fastpath).
        self.change_source: ChangeSource | None = None
        self.latencies: dict[int, list[float]] = {1: [], 2: []}
        # Called with the attempt when it starts or stops being active (watcher, engine).
        self.on_attempt_active: list[Callable[[Attempt], None]] = []
        self.on_attempt_inactive: list[Callable[[Attempt], None]] = []
        # Called with the attempt and its new row once a checkpoint is recorded (replication);
        # runs on the capture path, so a listener only notes the work and returns.
        self.on_checkpoint: list[Callable[[Attempt, dict], None]] = []
        self.reconciliation = self.reconcile()

    # -- public entry points ---------------------------------------------------------------

    def snapshot(self, fields: dict) -> dict:
        """Capture a worktree for the attempt the request names or implies (DESIGN §6)."""
        started = time.perf_counter()
        req = SnapshotRequest.from_fields(fields)
        try:
            attempt = self._attribute(req)
        except Exception as exc:
            self._ledger_failed(req, None, exc)
            raise
        root = Path(attempt.worktree)
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
        faults.crash_point("before-reply")
        return result

    def capture_attempt(self, attempt: Attempt, *, tier: int, source: str,
                        label: str | None = None, require_active: bool = False,
                        full: bool = False) -> dict:
        """A capture the daemon takes by itself (tier 2, restore safety) for a known attempt.
        With ``require_active`` an attempt that ended or was fenced meanwhile is refused
        (``fenced``, no gap: nothing was owed to it), checked under the worktree lock.
        ``full`` forces a stat scan of the whole tree (a verification of the watcher)."""
        req = SnapshotRequest(cwd=Path(attempt.worktree), tier=tier, source=source, label=label,
                              run_id=attempt.key.run_id, node_id=attempt.key.node_id,
                              iteration=attempt.key.iteration, attempt=attempt.key.attempt,
                              full=full)
        started = time.perf_counter()
        with self.worktree_lock(Path(attempt.worktree)):
            current = self.ledger.get_attempt(attempt.key)
            if current is None:
                raise ServiceError("not-found", f"attempt {attempt.key} is not in the ledger")
            if require_active and current.state != ACTIVE:
                raise ServiceError("fenced", f"attempt {current.key} is {current.state}")
            try:
                return self.capture_locked(current, req, started)
            except Exception as exc:
                self._ledger_failed(req, current, exc)
                raise

    def worktree_lock(self, root: Path) -> threading.Lock:
        key = str(root)
        with self._locks_guard:
            lock = self._locks.get(key)
            if lock is None:
                lock = self._locks[key] = threading.Lock()
            return lock

    def ping(self, _fields: dict | None = None) -> dict:
        return {"pid": os.getpid(), "version": __version__, "home": str(self.home)}

    def attempt_begin(self, fields: dict) -> dict:
        """Register an attempt on a worktree, superseding the active one there (DESIGN §7)."""
        run_id = id_field("run_id", fields.get("run_id"))
        node_id = id_field("node_id", fields.get("node_id"))
        iteration = int_field(fields, "iteration", 0, 0)
        root = self._worktree_from_cwd(fields.get("cwd"))
        number = fields.get("attempt")
        owner_pid = fields.get("owner_pid")
        if owner_pid is not None and (not isinstance(owner_pid, int) or isinstance(owner_pid, bool)
                                      or owner_pid <= 0):
            raise ServiceError("bad-request", "owner_pid must be a positive integer")
        settle_ms = opt_int_field(fields, "settle_ms", 1)
        max_wait_ms = opt_int_field(fields, "max_wait_ms", 1)
        with self.worktree_lock(root):
            if number is None:
                number = self.ledger.last_attempt_number(run_id, node_id, iteration) + 1
            else:
                number = int_field(fields, "attempt", 1, 1)
            key = AttemptKey(run_id, node_id, iteration, number)
            existing = self.ledger.get_attempt(key)
            if existing is not None and existing.state != ACTIVE:
                raise ServiceError("conflict", f"attempt {key} already ended "
                                   f"({existing.state}); begin a new attempt number")
            if existing is not None and existing.worktree != str(root):
                raise ServiceError("conflict", f"attempt {key} works in "
                                   f"{existing.worktree}, not {root}")
            self.ledger.ensure_worktree(self.store.worktree(root).id, str(root))
            superseded = [a for a in self.ledger.active_attempts(str(root)) if a.key != key]
            for old in superseded:
                self.ledger.set_attempt_state(old.key, "superseded", ended=True,
                                              final_commit=self._head_commit(old))
            epoch = self.ledger.bump_epoch(str(root))
            if existing is None:
                attempt = self.ledger.create_attempt(
                    key, str(root), epoch=epoch, owner_pid=owner_pid,
                    settle_ms=settle_ms, max_wait_ms=max_wait_ms)
            else:
                attempt = existing
        for old in superseded:
            self.announce_inactive(old)
        self.announce_active(attempt)
        result = attempt.as_dict()
        result["superseded"] = [str(a.key) for a in superseded]
        return result

    def attempt_end(self, fields: dict, *, flush: Callable[[Path], None] | None = None) -> dict:
        """End an attempt: flush pending work, record the final pointer and the end time."""
        run_id = id_field("run_id", fields.get("run_id"))
        node_id = id_field("node_id", fields.get("node_id"))
        iteration = int_field(fields, "iteration", 0, 0)
        status = fields.get("status", "finished")
        if status not in ("finished", "failed", "cancelled"):
            raise ServiceError("bad-request", "status must be finished, failed or cancelled")
        attempt = self._find_attempt(run_id, node_id, iteration, fields.get("attempt"))
        if attempt.state == ACTIVE and flush is not None:
            flush(Path(attempt.worktree))
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
        """A run's checkpoints and gaps (the ``snapshots --json`` shape)."""
        run_id = id_field("run_id", fields.get("run_id"))
        node_id = fields.get("node_id")
        if node_id is not None:
            node_id = id_field("node_id", node_id)
        attempt = fields.get("attempt")
        if attempt is not None:
            attempt = int_field(fields, "attempt", 1, 1)
        return list_run(self.ledger, self.gaps, run_id, node_id, attempt)

    def status(self, _fields: dict | None = None) -> dict:
        counts = self.ledger.counts()
        return {
            "pid": os.getpid(), "version": __version__, "home": str(self.home),
            "uptime_s": round(time.time() - self.started_at, 3),
            "counters": dict(self.counters), "checkpoints": counts,
            "gaps_by_reason": dict(self.gaps.counts),
            "latency_ms": {f"tier{t}": _percentiles(v) for t, v in self.latencies.items()},
            "active_attempts": [a.as_dict() for a in self.ledger.active_attempts()],
            "reconciliation": self.reconciliation,
        }

    def close(self) -> None:
        self.store.persist_all()
        self.ledger.close()

    def reconcile(self) -> dict:
        """Bring the ledger level with the refs: rows the ref holds but the ledger lacks (a crash
        between ref and row) are rebuilt from the commit trailers."""
        rebuilt = 0
        for key, tip in self.store.attempt_refs():
            rebuilt += self.reconcile_attempt(key, tip)
        if rebuilt:
            log.warning("reconciliation rebuilt %d checkpoint rows from store refs", rebuilt)
        return {"rebuilt_rows": rebuilt, "at": time.time()}

    # -- helpers ---------------------------------------------------------------------------

    def reconcile_attempt(self, key: AttemptKey, tip: str) -> int:
        """Insert the rows of the commits on ``tip``'s chain that the ledger lacks."""
        attempt = self.ledger.get_attempt(key)
        known = self.ledger.seqs(attempt.pk) if attempt else set()
        missing: list[pygit2.Commit] = []
        commit = self.store.read_commit(tip)
        while True:
            seq = int(parse_trailers(commit.message).get("Snapshotd-Seq", "-1"))
            if seq in known or seq < 0:
                break
            missing.append(commit)
            if not commit.parents:
                break
            commit = commit.parents[0]
        if not missing:
            return 0
        if attempt is None:
            worktree = parse_trailers(missing[-1].message).get("Snapshotd-Worktree", "")
            attempt = self.ledger.create_attempt(key, worktree, state="interrupted")
        for c in reversed(missing):
            t = parse_trailers(c.message)
            self.ledger.record_checkpoint(attempt, {
                "seq": int(t["Snapshotd-Seq"]), "commit": str(c.id), "tree": str(c.tree_id),
                "parent": str(c.parents[0].id) if c.parents else None,
                "source": t.get("Snapshotd-Source", "hook"),
                "tier": int(t.get("Snapshotd-Tier", "1")), "label": t.get("Snapshotd-Label"),
                "tool_use_id": t.get("Snapshotd-Tool-Use-Id"),
                "worktree": t.get("Snapshotd-Worktree", attempt.worktree),
                "created_at": float(c.commit_time),
            })
        return len(missing)

    def read_worktree(self, root: Path, *, verify: bool = False) -> Capture:
        """Bring ``root``'s stat cache up to date and write its tree, recording nothing (the
        caller holds the worktree lock): through the change source's changed paths when it
        vouches, else a full stat scan. ``verify`` forces the scan and reports to the source
        what it found that no event announced (drift). On failure the source is told the
        paths it handed over are owed (the next capture scans), any error but a ``StoreError``
        also drops the cache, and the error propagates."""
        index = self.store.worktree(root)
        source = self.change_source
        try:
            reported = source.take(root, "verify" if verify else "fast") \
                if source is not None else None
            capture = index.capture_changed(reported) \
                if reported is not None and not verify else None
            if capture is None:
                capture = index.capture()
                if reported is not None and verify and source is not None:
                    missed = set(capture.paths) - reported
                    if missed:
                        source.drift(root, sorted(missed))
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
        if req.tool_use_id:
            previous = self.ledger.tool_call(attempt.pk, req.tool_use_id)
            if previous is not None:
                self.counters["repeats"] += 1
                return self._reply(attempt, previous, deduped=True, repeated=True,
                                   started=started)
        root = Path(attempt.worktree)
        try:
            capture = self.read_worktree(root, verify=req.full)
            head = self.store.head(attempt.key)
        except StoreError as exc:
            self._gap(req, attempt, exc.reason, exc.message)
            code = exc.reason if exc.reason in ("worktree-missing", "worktree-replaced") \
                else "capture-failed"
            raise ServiceError(code, exc.message) from exc
        except Exception as exc:  # noqa: BLE001 - any failure becomes a gap, never a crash
            self._gap(req, attempt, "capture-failed", f"{type(exc).__name__}: {exc}")
            raise ServiceError("capture-failed", f"capture of {root} failed: {exc}") from exc
        self.counters["fast_captures" if not capture.full_scan else "full_scans"] += 1
        last = self.ledger.last_checkpoint(attempt.pk)
        if head is not None and (last is None or last["commit"] != str(head.id)):
            # The ref moved but its row was not written (a ledger fault): repair it now.
            try:
                self.reconcile_attempt(attempt.key, str(head.id))
            except Exception as exc:  # noqa: BLE001
                self._gap(req, attempt, "ledger-failed", f"{type(exc).__name__}: {exc}")
                raise ServiceError("capture-failed", f"the ledger cannot be written: {exc}") from exc
            last = self.ledger.last_checkpoint(attempt.pk)
        if head is not None and str(head.tree_id) == capture.tree:
            seq = int(parse_trailers(head.message).get("Snapshotd-Seq", "0"))
            if last is not None and last["seq"] == seq:
                if req.tool_use_id:
                    self.ledger.record_tool_call(attempt, req.tool_use_id, seq)
                self.counters["dedups"] += 1
                return self._reply(attempt, {"seq": seq, "commit": str(head.id),
                                             "tree": capture.tree}, deduped=True,
                                   started=started, skipped=capture.skipped, tier=req.tier,
                                   scan="full" if capture.full_scan else "fast")
        seq = self._next_seq(head, last)
        added, modified, deleted = self._changes(head, capture.tree)
        meta = CheckpointMeta(key=attempt.key, seq=seq, tier=req.tier, source=req.source,
                              worktree=str(root), label=req.label, tool_use_id=req.tool_use_id)
        parent = str(head.id) if head else None
        commit = None
        try:
            commit = self.store.commit(meta, capture.tree, parent)
            row = {"seq": seq, "commit": commit, "tree": capture.tree,
                   "parent": str(head.id) if head else None, "source": req.source,
                   "tier": req.tier, "label": req.label, "tool_use_id": req.tool_use_id,
                   "worktree": str(root), "added": added, "modified": modified,
                   "deleted": deleted, "created_at": time.time(),
                   "skipped": _json(capture.skipped) if capture.skipped else None}
            faults.delay("before-row")
            self.ledger.record_checkpoint(attempt, row)
            faults.crash_point("after-row")
        except DuplicateToolCall as exc:
            # Another daemon sharing the ledger recorded this tool call first: its checkpoint
            # is the answer, and ours never happened (a row-less ref would be "repaired" later).
            assert commit is not None
            self.store.rewind(attempt.key, commit, parent)
            winner = self.ledger.tool_call(attempt.pk, exc.tool_use_id)
            self.counters["repeats"] += 1
            return self._reply(attempt, winner or {"seq": exc.seq, "commit": None,
                                                   "tree": None},
                               deduped=True, repeated=True, started=started)
        except SeqConflict as exc:
            assert commit is not None
            self.store.rewind(attempt.key, commit, parent)
            self._gap(req, attempt, "commit-failed", f"another daemon recorded into "
                      f"{attempt.key} at the same time: {exc}")
            raise ServiceError("capture-failed", f"could not record the checkpoint: {exc}") from exc
        except StoreError as exc:  # the commit or ref: store-write-failed or commit-failed
            self._gap(req, attempt, exc.reason, exc.message)
            raise ServiceError("capture-failed", f"could not record the checkpoint: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - the ledger row
            self._gap(req, attempt, "ledger-failed", f"{type(exc).__name__}: {exc}")
            raise ServiceError("capture-failed", f"could not record the checkpoint: {exc}") from exc
        self.counters[f"captures_tier{req.tier}"] += 1
        for listener in self.on_checkpoint:
            try:
                listener(attempt, row)
            except Exception:  # noqa: BLE001 - a listener never fails an acknowledged capture
                log.exception("checkpoint listener failed for %s", attempt.worktree)
        return self._reply(attempt, {"seq": seq, "commit": commit, "tree": capture.tree},
                           deduped=False, started=started, skipped=capture.skipped,
                           changes={"added": added, "modified": modified, "deleted": deleted},
                           tier=req.tier, scan="full" if capture.full_scan else "fast")

    def _reply(self, attempt: Attempt, cp: dict, *, deduped: bool, started: float,
               repeated: bool = False, skipped: list | None = None,
               changes: dict | None = None, tier: int | None = None,
               scan: str | None = None) -> dict:
        elapsed = (time.perf_counter() - started) * 1000
        if tier is not None:
            samples = self.latencies[tier]
            samples.append(elapsed)
            if len(samples) > 2000:
                del samples[:1000]
        out = attempt.key.as_dict()
        out.update(seq=cp["seq"], commit=cp["commit"], tree=cp["tree"], deduped=deduped,
                   elapsed_ms=round(elapsed, 3), worktree=attempt.worktree,
                   skipped=skipped or [],
                   changes=changes or {"added": 0, "modified": 0, "deleted": 0})
        if repeated:
            out["repeated"] = True
        if scan is not None:
            out["scan"] = scan  # "fast" (the watcher's changed paths) or "full" (a stat scan)
        return out

    def _attribute(self, req: SnapshotRequest) -> Attempt:
        """Which attempt a capture belongs to: explicit, registered worktree, or zero-setup."""
        if req.run_id is not None:
            assert req.node_id is not None
            if req.attempt is None:
                found = self._newest_attempt(req.run_id, req.node_id, req.iteration)
                if found is not None:
                    return found
                key = AttemptKey(req.run_id, req.node_id, req.iteration, 1)
            else:
                key = AttemptKey(req.run_id, req.node_id, req.iteration, req.attempt)
                found = self.ledger.get_attempt(key)
                if found is not None:
                    return found
            root = self._registered_ancestor(req.cwd) or self._checked_root(req.cwd, req)
            return self._new_attempt(key, root, zero_setup=False)
        registered = self._active_for(req.cwd)
        if registered is not None:
            return registered
        if req.fallback is None:
            raise ServiceError(
                "bad-request", f"no attempt is registered for {req.cwd}: name run_id and "
                "node_id, or run `snapshotd attempt begin` for this worktree")
        fb = req.fallback
        key = AttemptKey(fb["run_id"], fb["node_id"], fb["iteration"], fb["attempt"])
        found = self.ledger.get_attempt(key)
        if found is not None:
            return found
        req.run_id, req.node_id, req.attempt = key.run_id, key.node_id, key.attempt
        root = self._checked_root(Path(fb["worktree"]), req)
        self._refuse_zero_setup(root, req)
        return self._new_attempt(key, root, zero_setup=True)

    def _new_attempt(self, key: AttemptKey, root: Path, *, zero_setup: bool) -> Attempt:
        self.ledger.ensure_worktree(self.store.worktree(root).id, str(root))
        attempt = self.ledger.create_attempt(key, str(root), zero_setup=zero_setup)
        self.announce_active(attempt)
        return attempt

    def _newest_attempt(self, run_id: str, node_id: str, iteration: int) -> Attempt | None:
        number = self.ledger.last_attempt_number(run_id, node_id, iteration)
        if number == 0:
            return None
        return self.ledger.get_attempt(AttemptKey(run_id, node_id, iteration, number))

    def _find_attempt(self, run_id: str, node_id: str, iteration: int,
                      number: object) -> Attempt:
        if number is None:
            attempt = self._newest_attempt(run_id, node_id, iteration)
        else:
            n = int_field({"attempt": number}, "attempt", 1, 1)
            attempt = self.ledger.get_attempt(AttemptKey(run_id, node_id, iteration, n))
        if attempt is None:
            raise ServiceError("not-found", f"no attempt for run {run_id!r} node {node_id!r} "
                               f"iteration {iteration}" + (f" attempt {number}" if number else ""))
        return attempt

    def _active_for(self, cwd: Path) -> Attempt | None:
        """The active attempt whose worktree is ``cwd`` or its nearest registered ancestor."""
        path = _resolve(cwd)
        best: Attempt | None = None
        for attempt in self.ledger.active_attempts():
            root = Path(attempt.worktree)
            if path == root or root in path.parents:
                if best is None or len(str(root)) > len(best.worktree) or (
                        str(root) == best.worktree and attempt.pk > best.pk):
                    best = attempt
        return best

    def _registered_ancestor(self, cwd: Path) -> Path | None:
        attempt = self._active_for(cwd)
        return Path(attempt.worktree) if attempt else None

    def _worktree_from_cwd(self, cwd: object) -> Path:
        if not isinstance(cwd, str) or not os.path.isabs(cwd) or "\0" in cwd:
            raise ServiceError("bad-request", "cwd must be an absolute path")
        return self._checked_root(Path(cwd), None)

    def _checked_root(self, path: Path, req: SnapshotRequest | None) -> Path:
        root = _resolve(path)
        if not root.is_dir():
            if req is not None:
                self._gap(req, None, "worktree-missing", f"{path} is not a directory")
            raise ServiceError("worktree-missing", f"{path} does not exist or is not a directory")
        if root == Path("/") or any(root == p or p in root.parents for p in _PSEUDO_FS):
            detail = f"{root} is the filesystem root or a pseudo filesystem; it cannot be captured"
            if req is not None:
                self._gap(req, None, "worktree-refused", detail)
            raise ServiceError("worktree-refused", detail)
        home = _resolve(self.home)
        if root == home or root in home.parents or home in root.parents:
            if req is not None:
                self._gap(req, None, "worktree-refused",
                          f"{root} holds or is inside the snapshotd home {home}")
            raise ServiceError("worktree-refused", f"{root} holds or is inside the snapshotd "
                               f"home {home}; set SNAPSHOTD_HOME elsewhere")
        return root

    def _refuse_zero_setup(self, root: Path, req: SnapshotRequest) -> None:
        reason = None
        if root == Path("/"):
            reason = "it is the filesystem root"
        elif root == _resolve(Path.home()):
            reason = "it is your home directory"
        else:
            limit = self.config.max_zero_setup_files
            if _count_files(root, limit) > limit:
                reason = (f"it holds more than {limit} files (raise max_zero_setup_files in "
                          "config.toml, or run `snapshotd attempt begin` for it)")
        if reason is not None:
            detail = (f"refusing to adopt {root} as a zero-setup worktree: {reason}; begin an "
                      "attempt for a project directory instead")
            self._gap(req, None, "worktree-refused", detail)
            raise ServiceError("worktree-refused", detail)

    def _fenced(self, req: SnapshotRequest, attempt: Attempt, current: Attempt | None) -> None:
        state = current.state if current else "missing"
        detail = f"attempt {attempt.key} is {state}; its captures are refused"
        self._gap(req, attempt, "fenced", detail)
        raise ServiceError("fenced", detail)

    def _ledger_failed(self, req: SnapshotRequest, attempt: Attempt | None,
                       exc: Exception) -> None:
        """A ledger read or write failed before the capture (a full or failing disk under the
        ledger, a database gone): a ``ledger-failed`` gap and ``capture-failed``, never an
        ``internal`` error with no gap. Any other exception is left alone."""
        if isinstance(exc, ServiceError) or not _ledger_failure(exc):
            return
        self._gap(req, attempt, "ledger-failed", f"{type(exc).__name__}: {exc}")
        raise ServiceError("capture-failed", f"the ledger cannot be used: {exc}") from exc

    def _gap(self, req: SnapshotRequest, attempt: Attempt | None, reason: str,
             detail: str) -> None:
        self.counters["errors"] += reason != "fenced"
        key = attempt.key if attempt else None
        fb = req.fallback or {}
        self.gaps.record(
            reason=reason, detail=detail,
            run_id=key.run_id if key else (req.run_id or fb.get("run_id")),
            node_id=key.node_id if key else (req.node_id or fb.get("node_id")),
            iteration=key.iteration if key else req.iteration,
            attempt=key.attempt if key else (req.attempt or fb.get("attempt")),
            worktree=attempt.worktree if attempt else str(fb.get("worktree") or req.cwd),
            tier=req.tier, source=req.source, tool_use_id=req.tool_use_id)

    def _next_seq(self, head: pygit2.Commit | None, last: dict | None) -> int:
        candidates = [-1]
        if last is not None:
            candidates.append(int(last["seq"]))
        if head is not None:
            candidates.append(int(parse_trailers(head.message).get("Snapshotd-Seq", "-1")))
        return max(candidates) + 1

    def _changes(self, head: pygit2.Commit | None, tree: str) -> tuple[int, int, int]:
        """Files added, modified and deleted against the previous checkpoint: walks only the
        subtrees whose ids differ, so the cost follows the change."""
        with self.store.lock:
            return tree_changes(self.store.repo, str(head.tree_id) if head else None, tree)

    def _head_commit(self, attempt: Attempt) -> str | None:
        head = self.store.head(attempt.key)
        return str(head.id) if head else None

    def announce_active(self, attempt: Attempt) -> None:
        for listener in self.on_attempt_active:
            try:
                listener(attempt)
            except Exception:  # noqa: BLE001
                log.exception("attempt-active listener failed for %s", attempt.worktree)

    def announce_inactive(self, attempt: Attempt) -> None:
        for listener in self.on_attempt_inactive:
            try:
                listener(attempt)
            except Exception:  # noqa: BLE001
                log.exception("attempt-inactive listener failed for %s", attempt.worktree)


def list_run(ledger: Ledger, gaps: GapSpool, run_id: str, node_id: str | None = None,
             attempt: int | None = None) -> dict:
    """A run's checkpoints and its gaps; a gap whose tool call later got a checkpoint is
    marked resolved."""
    checkpoints = ledger.checkpoints(run_id, node_id, attempt)
    covered = ledger.tool_use_ids(run_id)
    gap_rows = []
    for gap in gaps.for_run(run_id):
        if node_id is not None and gap.get("node_id") != node_id:
            continue
        if attempt is not None and gap.get("attempt") not in (None, attempt):
            continue
        gap = dict(gap)
        gap["resolved"] = bool(gap.get("tool_use_id")) and gap["tool_use_id"] in covered
        gap_rows.append(gap)
    return {"run_id": run_id, "checkpoints": checkpoints, "gaps": gap_rows}


def _ledger_failure(exc: BaseException) -> bool:
    """Whether ``exc`` came from the ledger's database (SQLite or PostgreSQL)."""
    return isinstance(exc, (LedgerError, sqlite3.Error)) \
        or type(exc).__module__.startswith("psycopg")


def _resolve(path: Path) -> Path:
    try:
        return path.resolve(strict=False)
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def _count_files(root: Path, limit: int) -> int:
    """Files under root (skipping .git and dependency folders), counting stops past ``limit``."""
    skip = {".git", "node_modules", ".venv", "venv", "__pycache__", ".tox", ".mypy_cache"}
    count = 0
    stack = [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        if entry.name not in skip:
                            stack.append(entry.path)
                    else:
                        count += 1
                        if count > limit:
                            return count
        except OSError:
            continue
    return count


def _percentiles(samples: list[float]) -> dict:
    if not samples:
        return {"count": 0, "p50": None, "p99": None}
    ordered = sorted(samples)
    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)
    return {"count": len(ordered), "p50": at(0.5), "p99": at(0.99)}


def _json(value: object) -> str:
    import json

    return json.dumps(value, ensure_ascii=False)
