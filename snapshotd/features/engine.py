"""The thin engine inside the daemon: attempt liveness, ``--resume``, and the final flush. Owns,
for attempts that name an owner process (``owner_pid``; every ``snapshotd exec`` attempt), the
watch over it: once gone, one last capture, the attempt ``abandoned`` (with its final pointer),
its worktree unwatched and later captures fenced. Owns ``attempt_begin … resume: true`` (the
worktree first put back to the node's previous attempt's newest checkpoint through ``restore``;
a different directory holding files is restored after the begin, its safety checkpoint the new
attempt's first, a failure ending it ``failed``) and the flush before ``attempt_end``. Both wrap
the core ops at the server's ``engine`` layer. Promises (in full: docs/agents.md, "From an
engine"):
- An owner is gone when its pid is gone or reused; one we may not inspect is alive; a zombie
  keeps its attempt ``ZOMBIE_GRACE_S``; a session's attempt with no owner ends alike after
  ``ownerless_idle_s`` without a capture. A dead owner is noticed within ``LIVENESS_INTERVAL_S``
  plus one capture; abandoning happens under the worktree's lock, only to an ``active`` attempt.
- ``resume`` restores the previous attempt's newest seq as it stood at the request (superseding
  it first if still active elsewhere); none: ``resumed_from: null``; no restore: ``restore-failed``.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

from snapshotd.core import (
    BAD_REQUEST,
    RESTORE_FAILED,
    AttemptKey,
    Config,
    Registry,
    ServiceError,
    abs_path_field,
    id_field,
    int_field,
)
from snapshotd.ledger import ACTIVE, Attempt
from snapshotd.service import Service

log = logging.getLogger("snapshotd.engine")

LIVENESS_INTERVAL_S = 0.5
# How long an exited but unreaped owner (a zombie) still holds its attempt.
ZOMBIE_GRACE_S = 5.0
ALIVE, ZOMBIE, GONE = "alive", "zombie", "gone"
_RESTORE_SUMMARY = ("applied", "counts", "safety", "undo_command", "elapsed_ms")
# psutil derives a process's start time from the boot time, which /proc gives in whole seconds:
# a process older than the attempt can look up to a second or so younger than it is.
_START_SLACK_S = 2.0


def attach(service: Service, server: Registry, config: Config) -> None:
    """Wire the engine into a daemon: liveness monitor, ``resume`` on begin, flush on end."""
    engine = Engine(service, server, ownerless_idle_s=config.ownerless_idle_s)
    server.wrap("attempt_begin", engine.attempt_begin, layer="engine")
    server.wrap("attempt_end", engine.attempt_end, layer="engine")
    server.status_extras.append(engine.status)
    server.shutdown_hooks.append(engine.stop)
    engine.start()


class Engine:
    """The liveness monitor thread and the ``resume`` step of ``attempt_begin``."""

    def __init__(self, service: Service, server: Registry | None = None, *,
                 interval_s: float = LIVENESS_INTERVAL_S,
                 ownerless_idle_s: float = 3600.0) -> None:
        self.service = service
        self.server = server
        self.interval_s = interval_s
        self.ownerless_idle_s = ownerless_idle_s
        self.abandoned = 0
        self.resumed = 0
        self._zombies: dict[int, float] = {}  # owner pid -> when first seen exited, unreaped
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- public entry points ---------------------------------------------------------------

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="snapshotd-liveness", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def status(self) -> dict:
        owned = [a for a in self.service.ledger.active_attempts() if a.owner_pid]
        return {"engine": {"liveness_interval_s": self.interval_s,
                           "ownerless_idle_s": self.ownerless_idle_s,
                           "watched_owners": len(owned), "abandoned": self.abandoned,
                           "resumed": self.resumed}}

    def attempt_begin(self, fields: dict, begin: Callable[[dict], dict]) -> dict:
        """``attempt_begin`` with ``resume`` support; ``begin`` is the handler it extends."""
        resume = fields.get("resume", False)
        if not isinstance(resume, bool):
            raise ServiceError(BAD_REQUEST, "resume must be true or false")
        handoff = None
        if fields.get("handoff") is not None:
            # Another host's handoff: verify every digest (fetching as needed) first.
            from snapshotd.features.replication import verify_handoff

            handoff = verify_handoff(self.service, fields)
        source = self._resume_source(fields) if resume else None
        if source is not None and source.into_new_attempt:
            # A directory of its own that already holds files (a fresh `git worktree add` or
            # clone): the new attempt is begun first, so the restore's safety checkpoint of what
            # the directory held belongs to it.
            result = begin(fields)
            resumed_from = self._restore_into_new_attempt(source, result)
        else:
            resumed_from = self._restore_for_resume(source) if source is not None else None
            result = begin(fields)
        result["resumed_from"] = resumed_from
        if handoff is not None:
            result["handoff"] = handoff
        if resumed_from is not None:
            self.resumed += 1
        return result

    def attempt_end(self, fields: dict, end: Callable[[dict], dict]) -> dict:
        """``attempt_end`` after the server's flush (the watcher's, read at call time), so
        pending tier-2 work lands before the final pointer; ``end`` is the handler it extends."""
        flush = self.server.flush_hook if self.server is not None else None
        if flush is not None:
            attempt = self.service.named_attempt(fields)
            if attempt.state == ACTIVE:
                flush(Path(attempt.worktree))
        return end(fields)

    def _resume_source(self, fields: dict) -> _ResumeSource | None:
        """What a resume restores, and where: the newest checkpoint of the node's newest earlier
        attempt that has one. An attempt still active in another directory is superseded first."""
        run_id = id_field("run_id", fields.get("run_id"))
        node_id = id_field("node_id", fields.get("node_id"))
        iteration = int_field(fields, "iteration", 0, 0)
        cwd = abs_path_field(fields, "cwd")
        if cwd is None:
            raise ServiceError(BAD_REQUEST, "cwd must be an absolute path")
        ledger = self.service.ledger
        if fields.get("attempt") is None:
            number = ledger.last_attempt_number(run_id, node_id, iteration) + 1
        else:
            number = int_field(fields, "attempt", 1, 1)
        previous = self._previous_with_checkpoint(run_id, node_id, iteration, number)
        if previous is None:
            return None
        attempt, checkpoint = previous
        _load_restore()  # fail before anything changes when restore is unavailable
        target = cwd.resolve()
        fenced = None
        if attempt.state == ACTIVE and Path(attempt.worktree) != target:
            # The node moves on from an attempt still active elsewhere (another worktree, or
            # another host sharing the ledger): it is superseded before its state is copied,
            # so its later captures are fenced, never silently left out of the new attempt.
            fenced = self._supersede(attempt)
            current = ledger.last_checkpoint(attempt.pk)
            if current is not None:
                checkpoint = current
        elsewhere = target != Path(attempt.worktree)
        return _ResumeSource(attempt=attempt, checkpoint=checkpoint, target=target,
                             fenced=fenced,
                             into_new_attempt=elsewhere and _non_empty_dir(target))

    def _restore_for_resume(self, source: _ResumeSource) -> dict:
        """Same directory: restore in place (with the restore's safety checkpoint). A new or
        empty directory gets the checkpoint materialized into it."""
        to = None if source.target == Path(source.attempt.worktree) else str(source.target)
        return self._run_restore(source, to=to, into=None)

    def _restore_into_new_attempt(self, source: _ResumeSource, begun: dict) -> dict:
        key = AttemptKey(begun["run_id"], begun["node_id"], begun["iteration"], begun["attempt"])
        new = self.service.ledger.get_attempt(key)
        assert new is not None
        try:
            return self._run_restore(source, to=None, into=new)
        except ServiceError:
            # The attempt was begun for a resume that did not happen: it must not look like
            # one that works from the resumed state.
            self.service.ledger.set_attempt_state(key, "failed", ended=True)
            ended = self.service.ledger.get_attempt(key)
            if ended is not None:
                self.service.announce_inactive(ended)
            raise

    def _run_restore(self, source: _ResumeSource, *, to: str | None,
                     into: Attempt | None) -> dict:
        attempt, checkpoint, target = source.attempt, source.checkpoint, source.target
        k = attempt.key
        restore_checkpoint = _load_restore()
        try:
            outcome = restore_checkpoint(
                self.service, run_id=k.run_id, node_id=k.node_id, iteration=k.iteration,
                attempt=k.attempt, seq=checkpoint["seq"], to=to, into=into, force=True)
        except ServiceError:
            raise
        except Exception as exc:  # noqa: BLE001 - reported to the caller, never a daemon crash
            log.exception("resume of %s/%s failed", k.run_id, k.node_id)
            raise ServiceError(RESTORE_FAILED, f"could not restore attempt {k.attempt} seq "
                               f"{checkpoint['seq']} into {target}: "
                               f"{type(exc).__name__}: {exc}") from exc
        log.info("resumed %s/%s/%d from attempt %d seq %d into %s", k.run_id, k.node_id,
                 k.iteration, k.attempt, checkpoint["seq"], target)
        # A summary only: the restore's full plan lists every path and could overflow a frame.
        summary = {key: outcome.get(key) for key in _RESTORE_SUMMARY} \
            if isinstance(outcome, dict) else None
        return {"attempt": k.attempt, "seq": checkpoint["seq"],
                "commit": checkpoint["commit"], "tree": checkpoint["tree"],
                "worktree": str(target), "restore": summary, "fenced": source.fenced}

    def _supersede(self, attempt: Attempt) -> str | None:
        """Mark an active attempt superseded under its worktree's lock; its name, or None if it
        ended meanwhile."""
        ledger = self.service.ledger
        with self.service.worktree_lock(Path(attempt.worktree)):
            current = ledger.get_attempt(attempt.key)
            if current is None or current.state != ACTIVE:
                return None
            last = ledger.last_checkpoint(current.pk)
            ledger.set_attempt_state(current.key, "superseded", ended=True,
                                     final_commit=last["commit"] if last else None)
            ledger.bump_epoch(current.worktree)
            ended = ledger.get_attempt(current.key)
        if ended is not None:
            self.service.announce_inactive(ended)
        return str(current.key)

    def check_owners(self) -> list[Attempt]:
        """One pass of the monitor: abandon every active attempt whose owner is gone, and every
        session attempt with no owner that had no capture for ``ownerless_idle_s``."""
        abandoned = []
        zombies: dict[int, float] = {}
        now = time.monotonic()
        for attempt in self.service.ledger.active_attempts():
            if attempt.elsewhere(self.service.ledger.host):
                continue  # another host's (a shared ledger): its owner is no process of ours
            pid = attempt.owner_pid
            if not pid:
                quiet = self._ownerless_quiet(attempt)
                ended = self._abandon(attempt, quiet) if quiet else None
                if ended is not None:
                    abandoned.append(ended)
                continue
            state = owner_state(pid, attempt.started_at)
            if state == ALIVE:
                continue
            if state == ZOMBIE:
                # Exited but not yet reaped: `snapshotd exec` keeps its command so while it
                # takes the last capture and ends the attempt itself. A parent that never reaps
                # gets the attempt abandoned after a grace period.
                first = zombies[pid] = self._zombies.get(pid, now)
                if now - first < ZOMBIE_GRACE_S:
                    continue
            ended = self._abandon(attempt)
            if ended is not None:
                abandoned.append(ended)
        self._zombies = zombies
        return abandoned

    # -- helpers ---------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check_owners()
            except Exception:  # noqa: BLE001 - the monitor must outlive any one bad pass
                log.exception("liveness pass failed")

    def _ownerless_quiet(self, attempt: Attempt) -> str | None:
        """Why an attempt with no owner is over, or None. Only a session's (zero-setup) attempt:
        nothing would ever end it, and the session's next tool call goes on in a new attempt;
        one begun by ``attempt_begin`` is its runner's to end (its later captures are fenced)."""
        if not attempt.zero_setup:
            return None
        wall = time.time()
        if wall - attempt.started_at < self.ownerless_idle_s:
            return None
        last = self.service.ledger.last_checkpoint(attempt.pk)
        since = max(attempt.started_at, last["created_at"] if last else 0.0)
        if wall - since < self.ownerless_idle_s:
            return None
        return f"no owner process and no capture for {self.ownerless_idle_s:g} s"

    def _abandon(self, attempt: Attempt, why: str | None = None) -> Attempt | None:
        root = Path(attempt.worktree)
        label = why or f"owner process {attempt.owner_pid} exited"
        # What the dead owner left is exactly what a crash must not cost: commit pending
        # tier-2 work, then one last capture (deduplicated when nothing changed since).
        # Both take the worktree lock themselves, so they run before we take it below.
        flush = self.server.flush_hook if self.server is not None else None
        if flush is not None:
            try:
                flush(root)
            except Exception:  # noqa: BLE001
                log.exception("flush before abandoning %s failed", attempt.key)
        try:
            self.service.capture_attempt(attempt, tier=2, source="watch", label=label)
        except ServiceError as exc:
            log.warning("last capture of %s failed: %s", attempt.key, exc.message)
        except Exception:  # noqa: BLE001
            log.exception("last capture of %s failed", attempt.key)
        with self.service.worktree_lock(root):
            current = self.service.ledger.get_attempt(attempt.key)
            if current is None or current.state != ACTIVE:
                return None  # ended or superseded meanwhile: its owner's fate no longer matters
            head = self.service.store.head(current.key)
            self.service.ledger.set_attempt_state(
                current.key, "abandoned", ended=True,
                final_commit=str(head.id) if head is not None else None)
            ended = self.service.ledger.get_attempt(current.key)
        assert ended is not None
        self.abandoned += 1
        log.warning("attempt %s abandoned: %s", ended.key, label)
        self.service.announce_inactive(ended)
        return ended

    def _previous_with_checkpoint(self, run_id: str, node_id: str, iteration: int,
                                  number: int) -> tuple[Attempt, dict] | None:
        """The newest attempt of the node before ``number`` that holds a checkpoint, with its
        newest checkpoint."""
        candidates = [a for a in self.service.ledger.attempts(run_id)
                      if a.key.node_id == node_id and a.key.iteration == iteration
                      and a.key.attempt < number]
        for attempt in sorted(candidates, key=lambda a: a.key.attempt, reverse=True):
            last = self.service.ledger.last_checkpoint(attempt.pk)
            if last is not None:
                return attempt, last
        return None


def owner_state(pid: int, since: float) -> str:
    """``ALIVE``, ``ZOMBIE`` (exited, not yet reaped) or ``GONE`` for the process ``pid`` that
    owned an attempt begun at ``since``."""
    try:
        proc = psutil.Process(pid)
        # A process started after the attempt began cannot be its owner: the pid was reused.
        if proc.create_time() > since + _START_SLACK_S:
            return GONE
        return ZOMBIE if proc.status() == psutil.STATUS_ZOMBIE else ALIVE
    except psutil.NoSuchProcess:
        return GONE
    except psutil.AccessDenied:
        return ALIVE


@dataclass
class _ResumeSource:
    attempt: Attempt  # the earlier attempt resumed from
    checkpoint: dict  # its newest checkpoint row
    target: Path  # the new attempt's worktree
    fenced: str | None  # the attempt superseded to resume, if it was still active
    into_new_attempt: bool  # restore in place into the new attempt's own (non-empty) directory


def _non_empty_dir(path: Path) -> bool:
    try:
        with os.scandir(path) as entries:
            return any(True for _ in entries)
    except OSError:
        return False


def _load_restore() -> Callable[..., dict]:
    try:
        from snapshotd.features.restore import restore_checkpoint
    except ModuleNotFoundError as exc:
        if exc.name != "snapshotd.features.restore.restore":
            raise
        raise ServiceError(RESTORE_FAILED, "resume needs the restore of checkpoints, which "
                           "this snapshotd does not have (no snapshotd.features.restore.restore); begin the "
                           "attempt without --resume") from None
    except ImportError as exc:
        raise ServiceError(RESTORE_FAILED, f"resume needs snapshotd.features.restore.restore."
                           f"restore_checkpoint, which could not be loaded: {exc}; begin the "
                           "attempt without --resume") from None
    return restore_checkpoint

