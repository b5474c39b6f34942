"""Replication: checkpoints pushed to a git remote, fetched back and verified by digest.

Owns the ``remote`` setting's behaviour (docs/scale-out.md): the background pusher attached to
the daemon (``attach``), the daemon ops ``push``, ``fetch`` and ``handoff``, the ``replication``
block of ``status``, the fetch of a run's refs into the local store (``fetch_run``), the fetch of
one missing checkpoint for a restore (``ensure_commit``), and the handoff manifest
(``build_handoff``, ``verify_handoff``).

Promises:
- Never on the reply path: a recorded checkpoint only notes its attempt ref in memory and wakes
  the pusher thread. The pusher waits ``push_interval_ms`` for more checkpoints, then pushes every
  noted ref in one ``git push``; on failure it retries with exponential backoff (0.5 s doubling to
  30 s) and ``status`` shows each attempt's unpushed checkpoints, the age of the oldest, and the
  last error.
- Nothing is lost while the remote (or the daemon) is down: at start-up, and after every failure,
  the pusher compares the local attempt refs with the remote's and pushes every ref the remote
  lacks or holds at an ancestor. A ref the remote holds at a commit this store does not descend
  from is never overwritten by that comparison (another host may own it); it is reported.
- Refs are never deleted on the remote (other hosts share it), and only ``refs/snapshotd/runs/``
  is replicated (stat-cache refs are per host).
- Nothing fetched is trusted: git checks every object it receives (``transfer.fsckObjects``), so
  content that does not hash to its name is refused; fetched refs land in a private staging
  namespace, each chain's trailers must name its ref's attempt with strictly decreasing seqs, and
  every commit whose seq the ledger already records must carry the ledger's commit and tree ids.
  Only then does a ref move, and only forward (created, or fast-forwarded).
- A checkpoint a restore needs and the local store lacks is fetched from the remote and its
  commit and tree ids compared with the ledger row before anything is written; one that exists
  nowhere reachable is an error naming the store and the remote that were searched.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import re
import shutil
import socket
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from snapshotd.keys import REF_PREFIX, AttemptKey
from snapshotd.ledger import ACTIVE, Attempt
from snapshotd.service import Service, ServiceError, list_run
from snapshotd.store import parse_trailers
from snapshotd_client.protocol import validate_id, validate_int

TYPE_CHECKING = False
if TYPE_CHECKING:
    from snapshotd.config import Config
    from snapshotd.server import Server

log = logging.getLogger("snapshotd.replication")

HANDOFF_FORMAT = "snapshotd-handoff"
HANDOFF_VERSION = 1
BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 30.0
# Refspecs per `git push`: keeps the command line short with thousands of attempts.
PUSH_CHUNK = 200
# A push waits for captures to pause this long (s), bounded by push_interval_ms.
PUSH_QUIET_S = 0.03
GIT_TIMEOUT_S = 300.0
STAGING_PREFIX = "refs/snapshotd-fetch/"
_ZERO = "0" * 40
_counter = itertools.count()
_NICE = shutil.which("nice") is not None


# -- public entry --------------------------------------------------------------------------------


def attach(service: Service, server: Server, config: Config) -> None:
    """Start the pusher (when ``remote`` is set) and register ``push``, ``fetch``, ``handoff``."""
    replicator = Replicator(service, config.remote, config.push_interval_ms) \
        if config.remote else None

    def need() -> Replicator:
        if replicator is None:
            raise ServiceError("no-remote", NO_REMOTE)
        return replicator

    def push_op(fields: dict) -> dict:
        return need().sync(_opt_run(fields))

    def fetch_op(fields: dict) -> dict:
        need()
        return fetch_run(service, _run(fields))

    def handoff_op(fields: dict) -> dict:
        return build_handoff(service, _run(fields), _node(fields),
                             iteration=_opt_int(fields, "iteration", 0),
                             attempt=_opt_int(fields, "attempt", 1), to=_opt_str(fields, "to"),
                             replicator=replicator)

    server.register("push", push_op)
    server.register("fetch", fetch_op)
    server.register("handoff", handoff_op)
    if replicator is None:
        server.status_extras.append(lambda: {"replication": {"enabled": False, "remote": ""}})
        return
    service.on_checkpoint.append(replicator.note)
    server.status_extras.append(lambda: {"replication": replicator.status()})
    server.shutdown_hooks.append(replicator.stop)
    replicator.start()


NO_REMOTE = ("no remote is configured: set remote = \"<git url or path>\" in config.toml "
             "or SNAPSHOTD_REMOTE")


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
                log.warning("final push to %s failed: %s", self.display_remote, exc)

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
                remote_refs = ls_remote(self.remote, _run_pattern(run_id))
            except ServiceError as exc:
                self._failed(exc.message)
                raise
            repo = pygit2.Repository(str(self.service.store.path))
            extra: set[str] = set()
            for key, local in self.service.store.attempt_refs():
                if run_id is not None and key.run_id != run_id:
                    continue
                ref = key.ref
                theirs = remote_refs.get(ref)
                if theirs == local:
                    self.diverged.pop(ref, None)
                    continue
                if theirs is None or _descends(repo, local, theirs):
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
        specs: dict[str, str] = {}
        gone: list[str] = []
        repo = pygit2.Repository(str(self.service.store.path))  # this thread's own handle
        for ref in batch:
            found = repo.references.get(ref)
            if found is None:
                gone.append(ref)  # deleted locally (retention): nothing to push
            else:
                specs[ref] = str(found.target)
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
            raise ServiceError("push-failed", f"could not push to {self.display_remote}: "
                               f"{error}")
        self.failures = 0
        self.next_retry_at = None
        return {"remote": self.display_remote, "pushed": [
            {**batch[r][0].as_dict(), "commit": specs[r]} for r in pushed],
            "unpushed": self.unpushed_count(run_id)}

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
        return redact(self.remote)

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
            }


# -- fetching ------------------------------------------------------------------------------------


def fetch_run(service: Service, run_id: str, remote: str | None = None) -> dict:
    """Bring every attempt ref of ``run_id`` from the remote into the local store (verified, see
    the module docstring), then rebuild the ledger rows from the commit trailers."""
    run_id = _valid_id("run_id", run_id)
    url = normalize_remote(remote if remote is not None else service.config.remote)
    if not url:
        raise ServiceError("no-remote", NO_REMOTE)
    src = _run_pattern(run_id)
    outcome = _fetch_and_adopt(service, url, src)
    if not outcome["refs"] and not outcome["conflicts"]:
        raise ServiceError("not-found", f"the remote {redact(url)} holds no checkpoints of run "
                           f"{run_id!r} (looked for {src})")
    outcome["rebuilt_rows"] = rebuild_rows(service, outcome["refs"])
    outcome["run_id"] = run_id
    outcome["checkpoints"] = len(service.ledger.checkpoints(run_id))
    return outcome


def rebuild_rows(service: Service, refs: list[dict]) -> int:
    """Ledger rows for the adopted refs, rebuilt from their commit trailers (the start-up
    reconciliation, run only on those attempts: a capture racing it on another attempt is never
    disturbed; one on the same attempt is serialized by the worktree lock)."""
    rebuilt = 0
    for ref in refs:
        key = AttemptKey(ref["run_id"], ref["node_id"], ref["iteration"], ref["attempt"])
        head = service.store.head(key)
        if head is None:
            continue
        attempt = service.ledger.get_attempt(key)
        if attempt is None:
            rebuilt += service.reconcile_attempt(key, str(head.id))
            continue
        with service.worktree_lock(Path(attempt.worktree)):
            head = service.store.head(key)
            if head is not None:
                rebuilt += service.reconcile_attempt(key, str(head.id))
    return rebuilt


def ensure_commit(service: Service, commit_id: str, tree_id: str, *,
                  ref: str | None = None) -> dict:
    """Make sure the local store holds checkpoint ``commit_id`` whose tree is ``tree_id`` (the
    ledger's ids), fetching ``ref`` (the attempt's ref) from the remote when it does not.
    Raises ServiceError: ``not-found`` when it exists nowhere reachable, ``verify-failed`` when
    what is found does not match the ledger, ``fetch-failed`` when the remote refused or sent bad
    objects. Returns where the commit came from."""
    store = service.store
    found = _local_commit(store.path, commit_id)
    if found is not None:
        _check_tree(found, commit_id, tree_id, str(store.path))
        return {"source": "local"}
    url = normalize_remote(service.config.remote)
    where = f"the local store {store.path}"
    if not url:
        raise ServiceError("not-found", f"checkpoint commit {commit_id[:12]} (tree "
                           f"{tree_id[:12]}) exists nowhere reachable: not in {where}, and no "
                           f"remote is configured (set remote in config.toml or "
                           f"SNAPSHOTD_REMOTE)")
    outcome = None
    if ref is not None:
        outcome = _fetch_and_adopt(service, url, ref)
    found = _local_commit(store.path, commit_id)
    if found is None:
        remote_tip = None
        if outcome is not None and outcome["conflicts"]:
            remote_tip = outcome["conflicts"][0].get("remote")
        elif outcome is not None and outcome["refs"]:
            remote_tip = outcome["refs"][0]["commit"]
        detail = (f"its ref {ref} there points to {remote_tip[:12]}, which does not contain it"
                  if remote_tip else f"it has no {ref}" if ref else "no ref was named")
        conflicts = "; ".join(c["reason"] for c in (outcome or {}).get("conflicts", []))
        raise ServiceError("not-found", f"checkpoint commit {commit_id[:12]} (tree "
                           f"{tree_id[:12]}) exists nowhere reachable: not in {where}, nor on "
                           f"the remote {redact(url)} ({detail})"
                           + (f"; the remote's history was refused: {conflicts}"
                              if conflicts else ""))
    _check_tree(found, commit_id, tree_id, f"the remote {redact(url)}")
    return {"source": "remote", "remote": redact(url)}


def ls_remote(url: str, pattern: str) -> dict[str, str]:
    """The remote's refs matching ``pattern`` (ref -> commit id). ServiceError on failure."""
    proc = _git(["ls-remote", "--refs", url, pattern], timeout=60.0)
    if proc.returncode != 0:
        raise ServiceError("push-failed", f"cannot reach {redact(url)}: {_last_lines(proc)}")
    out = {}
    for line in proc.stdout.decode(errors="replace").splitlines():
        sha, _, name = line.partition("\t")
        if name:
            out[name] = sha
    return out


def push_refs(store: Path, url: str, refs: dict[str, str], *,
              timeout: float = GIT_TIMEOUT_S) -> tuple[list[str], str | None]:
    """Push each ``ref`` at its commit (forced: this host owns the attempts it captures; a
    retention rewrite is not a fast-forward). Returns the refs now on the remote and an error."""
    if not refs:
        return [], None
    specs = [f"+{sha}:{ref}" for ref, sha in refs.items()]
    try:
        proc = _git(["-C", str(store), "push", "--porcelain", "--no-verify", url, *specs],
                    timeout=timeout, background=True)
    except subprocess.TimeoutExpired:
        return [], f"git push timed out after {timeout:.0f}s"
    ok = []
    for line in proc.stdout.decode(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0] in (" ", "+", "*", "=") and ":" in parts[1]:
            ok.append(parts[1].rsplit(":", 1)[1])
    if proc.returncode != 0:
        return ok, _last_lines(proc)
    return ok, None


# -- handoff -------------------------------------------------------------------------------------


def build_handoff(service: Service, run_id: str, node_id: str, *, iteration: int | None = None,
                  attempt: int | None = None, to: str | None = None,
                  replicator: Replicator | None = None) -> dict:
    """The versioned handoff manifest of a node's current attempt (docs/scale-out.md)."""
    run_id = _valid_id("run_id", run_id)
    node_id = _valid_id("node_id", node_id)
    ledger = service.ledger
    attempts = [a for a in ledger.attempts(run_id) if a.key.node_id == node_id
                and (iteration is None or a.key.iteration == iteration)
                and (attempt is None or a.key.attempt == attempt)]
    if not attempts:
        raise ServiceError("not-found", f"no attempt of run {run_id!r} node {node_id!r} matches"
                           + (f" iteration {iteration}" if iteration is not None else "")
                           + (f" attempt {attempt}" if attempt is not None else ""))
    current = max(attempts, key=lambda a: (a.key.iteration, a.key.attempt))
    cp = ledger.last_checkpoint(current.pk)
    cp_attempt = current
    if cp is None:  # a fresh attempt with no capture yet: its predecessor's newest
        for other in sorted(attempts, key=lambda a: (a.key.iteration, a.key.attempt),
                            reverse=True):
            cp = ledger.last_checkpoint(other.pk)
            if cp is not None:
                cp_attempt = other
                break
    gaps = [g for g in list_run(ledger, service.gaps, run_id, node_id)["gaps"]
            if not g.get("resolved") and g.get("attempt") in (None, current.key.attempt)
            and g.get("iteration") in (None, current.key.iteration)]
    url = normalize_remote(service.config.remote)
    replication: dict = {"remote": redact(url) if url else None}
    checkpoint = None
    if cp is not None:
        checkpoint = {"attempt": cp_attempt.key.attempt, "iteration": cp_attempt.key.iteration,
                      "seq": cp["seq"], "commit": cp["commit"], "tree": cp["tree"],
                      "parent": cp["parent"], "source": cp["source"],
                      "created_at": cp["created_at"], "ref": cp_attempt.key.ref}
        replication.update(_replication_of(service, url, cp_attempt.key, cp["commit"],
                                           replicator))
    manifest = {
        "format": HANDOFF_FORMAT, "version": HANDOFF_VERSION, "created_at": time.time(),
        "run_id": run_id, "node_id": node_id, "iteration": current.key.iteration,
        "attempt": current.key.attempt,
        "owner": {"host": socket.gethostname(), "pid": current.owner_pid,
                  "worktree": current.worktree, "state": current.state},
        "epoch": current.epoch, "to": to, "checkpoint": checkpoint,
        "gaps": gaps[:100], "gaps_total": len(gaps), "replication": replication,
    }
    manifest["next_action"] = _next_action(manifest)
    manifest["digest"] = manifest_digest(manifest)
    return manifest


def manifest_digest(manifest: dict) -> str:
    """sha256 of the manifest's canonical JSON without its ``digest`` field."""
    body = {k: v for k, v in manifest.items() if k != "digest"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def check_manifest(manifest: object) -> dict:
    """Validate a handoff manifest's shape, version and digest; ServiceError otherwise."""
    if not isinstance(manifest, dict) or manifest.get("format") != HANDOFF_FORMAT:
        raise ServiceError("bad-request", "not a snapshotd handoff manifest (write one with "
                           "`snapshotd handoff RUN --node X --output FILE`)")
    if manifest.get("version") != HANDOFF_VERSION:
        raise ServiceError("bad-request", f"handoff manifest version {manifest.get('version')!r}"
                           f" is not supported (this snapshotd reads version {HANDOFF_VERSION})")
    if manifest.get("digest") != manifest_digest(manifest):
        raise ServiceError("verify-failed", "the handoff manifest's digest does not match its "
                           "content: it was edited or damaged; write a new one")
    cp = manifest.get("checkpoint")
    if cp is not None:
        for name in ("commit", "tree"):
            if not isinstance(cp.get(name), str) or not re.fullmatch(r"[0-9a-f]{40}", cp[name]):
                raise ServiceError("bad-request", f"handoff checkpoint {name} is not a sha-1 id")
    return manifest


def verify_handoff(service: Service, fields: dict) -> dict:
    """Before ``attempt_begin … resume`` with ``handoff``: check the manifest, fetch the run
    from the remote as needed, verify every digest against store and ledger, check that resume
    will restore exactly the manifest's checkpoint, and fence the previous owner's attempt."""
    manifest = check_manifest(fields.get("handoff"))
    if fields.get("resume") is not True:
        raise ServiceError("bad-request", "a handoff is resumed: pass --resume with --handoff")
    run_id = _valid_id("run_id", fields.get("run_id"))
    node_id = _valid_id("node_id", fields.get("node_id"))
    iteration = _opt_int(fields, "iteration", 0) or 0
    if (manifest["run_id"], manifest["node_id"], manifest["iteration"]) != (run_id, node_id,
                                                                           iteration):
        raise ServiceError("conflict", f"the handoff is for {manifest['run_id']}/"
                           f"{manifest['node_id']} iteration {manifest['iteration']}, not "
                           f"{run_id}/{node_id} iteration {iteration}")
    cp = manifest.get("checkpoint")
    if cp is None:
        raise ServiceError("not-found", "the handoff names no checkpoint: there is nothing to "
                           "resume from; begin the attempt without --resume")
    key = AttemptKey(run_id, node_id, int(cp["iteration"]), int(cp["attempt"]))
    fetched = None
    if normalize_remote(service.config.remote):
        try:
            fetched = fetch_run(service, run_id)
        except ServiceError as exc:
            if _local_commit(service.store.path, cp["commit"]) is None:
                raise
            log.warning("handoff: fetch failed (%s); the checkpoint is local", exc.message)
    source = ensure_commit(service, cp["commit"], cp["tree"], ref=key.ref)
    if service.ledger.get_attempt(key) is None and service.store.head(key) is not None:
        rebuild_rows(service, [key.as_dict()])
    owner = service.ledger.get_attempt(key)
    rows = {r["seq"]: r for r in service.ledger.attempt_checkpoints(owner.pk)} if owner else {}
    row = rows.get(cp["seq"])
    if row is None:
        raise ServiceError("verify-failed", f"the ledger has no row for {_fmt(key)} seq "
                           f"{cp['seq']}, which the handoff names")
    if (row["commit"], row["tree"]) != (cp["commit"], cp["tree"]):
        raise ServiceError("verify-failed", f"{_fmt(key)} seq {cp['seq']}: the ledger says commit "
                           f"{row['commit'][:12]} tree {row['tree'][:12]}, the handoff says "
                           f"{cp['commit'][:12]} tree {cp['tree'][:12]}")
    # What resume will restore: the newest checkpoint of the newest earlier attempt.
    ledger = service.ledger
    number = fields.get("attempt")
    if number is None:
        number = ledger.last_attempt_number(run_id, node_id, iteration) + 1
    earlier = sorted((a for a in ledger.attempts(run_id) if a.key.node_id == node_id
                      and a.key.iteration == iteration and a.key.attempt < number),
                     key=lambda a: a.key.attempt, reverse=True)
    for candidate in earlier:
        last = ledger.last_checkpoint(candidate.pk)
        if last is not None:
            if (candidate.key, last["commit"]) != (key, cp["commit"]):
                raise ServiceError("conflict", f"the handoff is stale: the node's newest "
                                   f"checkpoint is now {_fmt(candidate.key)} seq {last['seq']} "
                                   f"({last['commit'][:12]}), not seq {cp['seq']}; write a new "
                                   "handoff, or resume without --handoff")
            break
    # Take over: the previous owner's attempt stops being active, so its later captures are
    # fenced wherever the ledger is shared.
    fenced = None
    if owner is not None and owner.state == ACTIVE:
        ledger.set_attempt_state(key, "superseded", ended=True, final_commit=cp["commit"])
        ended = ledger.get_attempt(key)
        if ended is not None:
            service.announce_inactive(ended)
        fenced = _fmt(key)
    return {"verified": {"commit": cp["commit"], "tree": cp["tree"], "seq": cp["seq"],
                         "attempt": key.attempt, "digest": manifest["digest"]},
            "source": source["source"], "fetched_refs": len(fetched["refs"]) if fetched else 0,
            "fenced": fenced, "from_host": manifest.get("owner", {}).get("host"),
            "to": manifest.get("to")}


# -- helpers -------------------------------------------------------------------------------------


def normalize_remote(remote: str | None) -> str:
    """A local path becomes absolute (git runs in the store); URLs and scp-like ``host:path``
    are kept as given."""
    remote = (remote or "").strip()
    if not remote or "://" in remote:
        return remote
    colon, slash = remote.find(":"), remote.find("/")
    if colon > 0 and (slash < 0 or colon < slash):
        return remote  # scp-like ssh: user@host:path
    return os.path.abspath(os.path.expanduser(remote))


def redact(url: str) -> str:
    """The remote without a password (``https://user:secret@host`` → ``https://user:***@host``)."""
    return re.sub(r"(://[^/:@]+:)[^/@]*@", r"\1***@", url)


def _fetch_and_adopt(service: Service, url: str, src: str) -> dict:
    """Fetch ``src`` (a ref or a ``…/*`` pattern) into staging, verify, adopt. Returns
    ``{"remote", "refs": [{attempt…, commit, action}], "conflicts": [...]}``."""
    store = service.store.path
    staging = f"{STAGING_PREFIX}{os.getpid()}-{next(_counter)}-{time.time_ns()}/"
    dst = staging + src[len("refs/"):]
    try:
        proc = _git(["-C", str(store), "-c", "transfer.fsckObjects=true",
                     "-c", "fetch.fsckObjects=true", "fetch", "--no-tags",
                     "--no-write-fetch-head", "--no-auto-gc", url, f"+{src}:{dst}"],
                    timeout=GIT_TIMEOUT_S)
        if proc.returncode != 0:
            text = _last_lines(proc)
            if "couldn't find remote ref" in text:
                return {"remote": redact(url), "refs": [], "conflicts": []}
            raise ServiceError("fetch-failed", f"could not fetch {src} from {redact(url)}; "
                               f"nothing was restored or changed: {text}")
        repo = pygit2.Repository(str(store))
        staged = [(r, str(repo.references[r].target)) for r in repo.references
                  if r.startswith(staging)]
        refs, conflicts = [], []
        for name, tip in sorted(staged):
            real = "refs/" + name[len(staging):]
            try:
                key = _key_of(real)
                _verify_chain(service, repo, key, tip)
                action = _adopt(repo, store, real, tip)
            except _Refused as exc:
                conflicts.append({"ref": real, "remote": tip, "reason": str(exc)})
                continue
            refs.append({**key.as_dict(), "commit": tip, "action": action})
        for c in conflicts:
            log.warning("fetch from %s refused %s: %s", redact(url), c["ref"], c["reason"])
        return {"remote": redact(url), "refs": refs, "conflicts": conflicts}
    finally:
        _drop_staging(store, staging)


class _Refused(Exception):
    pass


def _key_of(ref: str) -> AttemptKey:
    try:
        key = AttemptKey.from_ref(ref)
        validate_id("run_id", key.run_id)
        validate_id("node_id", key.node_id)
    except ValueError as exc:
        raise _Refused(f"not an attempt ref: {exc}") from None
    if key.ref != ref:
        raise _Refused("not an attempt ref in canonical form")
    return key


def _verify_chain(service: Service, repo: pygit2.Repository, key: AttemptKey, tip: str) -> None:
    """The chain's trailers name ``key`` with strictly decreasing seqs, and every commit whose
    seq the ledger records carries the ledger's commit and tree ids."""
    attempt = service.ledger.get_attempt(key)
    rows = {r["seq"]: r for r in service.ledger.attempt_checkpoints(attempt.pk)} \
        if attempt else {}
    expected = {"Snapshotd-Run": key.run_id, "Snapshotd-Node": key.node_id,
                "Snapshotd-Iteration": str(key.iteration), "Snapshotd-Attempt": str(key.attempt)}
    commit = repo[tip].peel(pygit2.Commit)
    previous_seq: int | None = None
    while True:
        t = parse_trailers(commit.message)
        for name, value in expected.items():
            if t.get(name) != value:
                raise _Refused(f"commit {str(commit.id)[:12]} says {name} {t.get(name)!r}, "
                               f"not {value!r}")
        try:
            seq = int(t["Snapshotd-Seq"])
        except (KeyError, ValueError):
            raise _Refused(f"commit {str(commit.id)[:12]} has no valid Snapshotd-Seq") from None
        if seq < 0 or (previous_seq is not None and seq >= previous_seq):
            raise _Refused(f"commit {str(commit.id)[:12]} has seq {seq} out of order")
        row = rows.get(seq)
        if row is not None and not row.get("pruned_at") and (
                row["commit"] != str(commit.id) or row["tree"] != str(commit.tree_id)):
            raise _Refused(f"seq {seq}: the remote has commit {str(commit.id)[:12]} tree "
                           f"{str(commit.tree_id)[:12]}, the ledger records commit "
                           f"{row['commit'][:12]} tree {row['tree'][:12]}")
        previous_seq = seq
        if not commit.parents:
            return
        commit = commit.parents[0]


def _adopt(repo: pygit2.Repository, store: Path, ref: str, tip: str) -> str:
    """Create or fast-forward the local ref to ``tip`` (compare-and-swap); never rewind it."""
    current = repo.references.get(ref)
    local = str(current.target) if current is not None else None
    if local == tip:
        return "unchanged"
    if local is not None:
        if _descends(repo, local, tip):
            return "local-ahead"
        if not _descends(repo, tip, local):
            raise _Refused(f"the remote's history of {ref} ({tip[:12]}) and the local one "
                           f"({local[:12]}) diverge; the local one is kept")
    proc = _git(["-C", str(store), "update-ref", ref, tip, local or _ZERO], timeout=60.0)
    if proc.returncode != 0:
        raise _Refused(f"the local ref moved meanwhile: {_last_lines(proc)}")
    return "updated" if local else "created"


def _drop_staging(store: Path, staging: str) -> None:
    proc = _git(["-C", str(store), "for-each-ref", "--format=%(refname)", staging], timeout=60.0)
    names = proc.stdout.decode(errors="replace").split()
    if names:
        script = "".join(f"delete {n}\n" for n in names).encode()
        _git(["-C", str(store), "update-ref", "--stdin"], timeout=60.0, stdin=script)


def _descends(repo: pygit2.Repository, commit: str, ancestor: str) -> bool:
    """``commit`` contains ``ancestor`` (or is it); False when either is unknown locally."""
    if commit == ancestor:
        return True
    try:
        return repo.descendant_of(commit, ancestor)
    except (KeyError, ValueError, pygit2.GitError):
        return False


def _local_commit(store: Path, commit_id: str) -> pygit2.Commit | None:
    try:
        repo = pygit2.Repository(str(store))
        return repo[commit_id].peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        return None


def _check_tree(commit: pygit2.Commit, commit_id: str, tree_id: str, where: str) -> None:
    if str(commit.id) != commit_id or str(commit.tree_id) != tree_id:
        raise ServiceError("verify-failed", f"checkpoint commit {commit_id[:12]} from {where} has "
                           f"tree {str(commit.tree_id)[:12]}, the ledger records "
                           f"{tree_id[:12]}; refusing to restore it")


def _replication_of(service: Service, url: str, key: AttemptKey, commit: str,
                    replicator: Replicator | None) -> dict:
    if not url:
        return {"replicated": False, "state": "no-remote"}
    out: dict = {"ref": key.ref}
    if replicator is not None:
        out.update(replicator.attempt_state(key))
    try:
        theirs = ls_remote(url, key.ref).get(key.ref)
    except ServiceError as exc:
        out.update(replicated=False, state="unreachable", error=exc.message)
        return out
    repo = pygit2.Repository(str(service.store.path))
    replicated = theirs is not None and _descends(repo, theirs, commit)
    out.update(remote_commit=theirs, replicated=replicated,
               state="replicated" if replicated else "missing" if theirs is None else "behind")
    return out


def _next_action(m: dict) -> str:
    cp, rep = m["checkpoint"], m["replication"]
    begin = (f"snapshotd attempt begin --run {m['run_id']} --node {m['node_id']} --iteration "
             f"{m['iteration']} --resume --handoff FILE --cwd DIR")
    if cp is None:
        return ("nothing to hand off yet (no checkpoint); begin a fresh attempt with "
                f"`snapshotd attempt begin --run {m['run_id']} --node {m['node_id']}`")
    if not rep.get("remote"):
        return "configure a remote (remote = \"<git url>\") and run `snapshotd push`, then " + begin
    if not rep.get("replicated"):
        return (f"run `snapshotd push {m['run_id']}` on this host until the checkpoint is on "
                f"the remote ({rep.get('state')}), then on the new host: {begin}")
    note = f" ({m['gaps_total']} unresolved gap(s): review them first)" if m["gaps_total"] else ""
    return f"on the new host: {begin}{note}"


def _git(args: list[str], *, timeout: float, stdin: bytes | None = None,
         background: bool = False) -> subprocess.CompletedProcess:
    # The daemon's environment must not redirect git (GIT_DIR, GIT_INDEX_FILE…), and a remote
    # that wants a password fails instead of waiting on a terminal that is not there.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.setdefault("SSH_ASKPASS_REQUIRE", "never")
    # Background pushes yield the CPU to captures (the budget is capture latency, not lag).
    nice = ["nice", "-n", "10"] if background and _NICE else []
    return subprocess.run([*nice, "git", *args], env=env, capture_output=True, timeout=timeout,
                          input=stdin, stdin=None if stdin is not None else subprocess.DEVNULL)


def _last_lines(proc: subprocess.CompletedProcess, n: int = 4) -> str:
    text = (proc.stderr or b"").decode(errors="replace").strip().splitlines()
    return " | ".join(line.strip() for line in text[-n:]) or f"git exited {proc.returncode}"


def _run_pattern(run_id: str | None) -> str:
    if run_id is None:
        return REF_PREFIX + "*"
    return AttemptKey(run_id, "x", 0, 1).ref.rsplit("/", 3)[0] + "/*"


def _valid_id(name: str, value: object) -> str:
    try:
        return validate_id(name, value)
    except ValueError as exc:
        raise ServiceError("bad-id", str(exc)) from None


def _run(fields: dict) -> str:
    return _valid_id("run_id", fields.get("run_id"))


def _node(fields: dict) -> str:
    return _valid_id("node_id", fields.get("node_id"))


def _opt_run(fields: dict) -> str | None:
    return None if fields.get("run_id") is None else _run(fields)


def _opt_int(fields: dict, name: str, minimum: int) -> int | None:
    value = fields.get(name)
    if value is None:
        return None
    try:
        return validate_int(name, value, minimum)
    except ValueError as exc:
        raise ServiceError("bad-request", str(exc)) from None


def _opt_str(fields: dict, name: str) -> str | None:
    value = fields.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 200 or "\0" in value:
        raise ServiceError("bad-request", f"{name} must be a short string")
    return value


def _fmt(key: AttemptKey) -> str:
    return f"{key.run_id}/{key.node_id}/{key.iteration}/{key.attempt}"
