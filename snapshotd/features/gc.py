"""Retention: which checkpoints may go, dropping them consistently, and reclaiming the space.

Owns the retention policy (``Policy``), planning which checkpoints and runs go, the gc journal
(``<home>/gc-journal.json``), ``git gc`` and the automatic policy thread; it decides, ``Store``
methods write. Promises (in full, with the reasons: docs/durability.md, "Retention"):
- Never dropped: any checkpoint of an active attempt, the newest of every attempt, a final
  pointer, a restore's safety checkpoint younger than the policy's age (default 7 days). Whole
  runs go only when asked or for ``--max-store-size``, never while an attempt is active.
- Pruning a middle checkpoint rewrites the later kept ones into a fresh chain: their commit ids
  change, their seq, tree and content do not (the seq is the identity).
- Crash safety: commits, then journal, then ledger, then ref; a left journal is completed at the
  next start or gc, under the worktree lock. Only ended attempts are pruned.
- ``git gc`` never removes an object reachable from an attempt ref or a stat cache, nor one
  younger than the prune grace (shorter grace: ``maintenance.prune_unreachable``); one at a time;
  libgit2 handles are reopened after it. Pruned rows stay in the ledger, marked when and why.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from snapshotd.core import (
    BAD_REQUEST,
    CONFLICT,
    INTERNAL,
    NOT_FOUND,
    AttemptKey,
    Config,
    ServiceError,
    crash_point,
    opt_id_field,
    opt_int_field,
    parse_duration,
    parse_size,
)
from snapshotd.features import maintenance
from snapshotd.features.disk_usage import du_op
from snapshotd.features.maintenance import RUN_LOCK
from snapshotd.ledger import ACTIVE, Attempt
from snapshotd.service import Service
from snapshotd.store import drop_kept, read_journal, write_journal

if TYPE_CHECKING:
    from snapshotd.core import Registry

log = logging.getLogger("snapshotd.gc")

RESTORE_PROTECT_S = 7 * 86400
SAFETY_INTERVAL_S = 3600.0
_RUN_LOCK = RUN_LOCK


@dataclass
class Policy:
    keep_last: int | None = None
    older_than_s: float | None = None
    max_store_bytes: int | None = None
    run_id: str | None = None
    whole_run: bool = False
    safety_interval_s: float = SAFETY_INTERVAL_S
    # ``--prune-grace`` given: alone, a policy of its own (reclaim only, after a purge).
    grace_given: bool = False

    def describe(self) -> dict:
        return {"keep_last": self.keep_last, "older_than_s": self.older_than_s,
                "max_store_bytes": self.max_store_bytes, "run_id": self.run_id,
                "whole_run": self.whole_run, "safety_interval_s": self.safety_interval_s}

    @property
    def empty(self) -> bool:
        return (self.keep_last is None and self.older_than_s is None
                and self.max_store_bytes is None and not self.whole_run)


@dataclass
class AttemptPlan:
    attempt: Attempt
    prune: list[int]
    reasons: dict[int, str] = field(default_factory=dict)


def run_gc(service: Service, policy: Policy, *, dry_run: bool = False) -> dict:
    """Apply ``policy``: plan, prune (unless ``dry_run``), reclaim. Returns a report."""
    if policy.empty and not policy.grace_given:
        raise ServiceError(BAD_REQUEST, "name a policy: --keep-last N, --older-than "
                           "DURATION, --max-store-size SIZE, or --run R --all; or "
                           "--prune-grace DURATION alone to reclaim unreachable objects only")
    with _RUN_LOCK:
        # One gc at a time (the automatic one and a requested one): a prune's rewritten chain
        # is unreferenced until its ref moves, and another gc's `git gc` must not see it so.
        return _run_gc(service, policy, dry_run=dry_run)


def _run_gc(service: Service, policy: Policy, *, dry_run: bool) -> dict:
    recover_journal(service)
    size_before = store_bytes(service)
    report: dict = {"policy": policy.describe(), "dry_run": dry_run, "pruned": [],
                    "deleted_runs": [], "store_bytes_before": size_before}
    if policy.whole_run:
        if policy.run_id is None:
            raise ServiceError(BAD_REQUEST,
                               "--all deletes a whole run: name it with --run R")
        _check_run_deletable(service, policy.run_id)
        report["deleted_runs"].append(_run_summary(service, policy.run_id))
        if not dry_run:
            delete_run(service, policy.run_id)
    elif policy.keep_last is not None or policy.older_than_s is not None:
        for plan in plan_prune(service, policy):
            report["pruned"].append({**plan.attempt.key.as_dict(), "seqs": plan.prune,
                                     "reasons": {str(k): v for k, v in plan.reasons.items()}})
            if not dry_run:
                prune_attempt(service, plan)
    if not dry_run:
        reclaim(service, policy.safety_interval_s)
    if policy.max_store_bytes is not None:
        report["deleted_runs"].extend(
            _enforce_size(service, policy, dry_run=dry_run))
    report["checkpoints_pruned"] = sum(len(p["seqs"]) for p in report["pruned"])
    report["store_bytes_after"] = store_bytes(service)
    return report


def plan_prune(service: Service, policy: Policy) -> list[AttemptPlan]:
    """The checkpoints the policy drops, attempt by attempt (protected ones excluded)."""
    now = time.time()
    plans = []
    restore_protect = policy.older_than_s if policy.older_than_s is not None else RESTORE_PROTECT_S
    for attempt in service.ledger.attempts(policy.run_id):
        if attempt.state == ACTIVE:
            continue
        rows = [r for r in service.ledger.attempt_checkpoints(attempt.pk) if r["pruned_at"] is None]
        if len(rows) <= 1:
            continue
        keep: set[int] = {rows[-1]["seq"]}
        keep |= {r["seq"] for r in rows
                 if attempt.final_commit and r["commit"] == attempt.final_commit}
        keep |= {r["seq"] for r in rows
                 if r["source"] == "restore" and now - r["created_at"] < restore_protect}
        if policy.keep_last is not None:
            keep |= {r["seq"] for r in rows[-policy.keep_last:]} if policy.keep_last > 0 else set()
        prune, reasons = [], {}
        for r in rows:
            if r["seq"] in keep:
                continue
            if policy.older_than_s is not None and now - r["created_at"] < policy.older_than_s:
                continue
            prune.append(r["seq"])
            reasons[r["seq"]] = _reason(policy)
        if prune:
            plans.append(AttemptPlan(attempt, prune, reasons))
    return plans


def prune_attempt(service: Service, plan: AttemptPlan) -> None:
    """Drop ``plan.prune`` from an ended attempt: rewrite the chain, ledger, then the ref."""
    attempt = plan.attempt
    with service.worktree_lock(Path(attempt.worktree)):
        current = service.ledger.get_attempt(attempt.key)
        if current is None or current.state == ACTIVE:
            return  # it became active again: never prune it
        rows = [r for r in service.ledger.attempt_checkpoints(current.pk) if r["pruned_at"] is None]
        dropping = set(plan.prune)
        # The kept checkpoints before the first dropped one stay as they are; every kept one
        # after it is rewritten onto the last kept commit before it.
        first = next((i for i, r in enumerate(rows) if r["seq"] in dropping), len(rows))
        parent: str | None = rows[first - 1]["commit"] if first > 0 else None
        rewrite = [r for r in rows[first:] if r["seq"] not in dropping]
        remap: dict[int, tuple[str, str | None]] = {}
        new_ids = service.store.rewrite_chain([r["commit"] for r in rewrite], parent)
        for row, new in zip(rewrite, new_ids, strict=True):
            remap[row["seq"]] = (new, parent)
            parent = new
        final = current.final_commit
        new_final = None
        if final is not None:
            for row in rows:
                if row["commit"] == final and row["seq"] in remap:
                    new_final = remap[row["seq"]][0]
        old_tip = rows[-1]["commit"]
        journal = {"ref": attempt.key.ref, "key": attempt.key.as_dict(), "old_tip": old_tip,
                   "new_tip": parent, "pruned": sorted(dropping),
                   "remap": {str(k): list(v) for k, v in remap.items()},
                   "reason": plan.reasons.get(next(iter(dropping))) if dropping else "policy",
                   "final_commit": new_final, "at": time.time()}
        _write_journal(service, journal)
        crash_point("gc-after-journal")
        _complete(service, journal)
        _journal_path(service).unlink(missing_ok=True)


def delete_run(service: Service, run_id: str) -> int:
    """Remove a whole run: refs, ledger rows and its gap records."""
    _check_run_deletable(service, run_id)
    keys = [a.key for a in service.ledger.attempts(run_id)]
    removed = service.ledger.delete_run(run_id)
    service.store.delete_attempt_refs(keys)
    drop_kept(service.store, keys)  # a guard's kept ignored files (docs/guard.md)
    drop_run_gaps(service.gaps.path, {run_id})
    return removed


def drop_run_gaps(path: Path, run_ids: set[str]) -> int:
    """Rewrite the gap spool without the given runs' records, in place under its flock (so a
    concurrent appender, which locks the same file, is never lost)."""
    if not path.exists():
        return 0
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        data = b""
        while chunk := os.read(fd, 1 << 20):
            data += chunk
        kept, dropped = [], 0
        for line in data.splitlines(keepends=True):
            try:
                record = json.loads(line)
            except ValueError:
                kept.append(line)
                continue
            if isinstance(record, dict) and record.get("run_id") in run_ids:
                dropped += 1
            else:
                kept.append(line)
        if dropped:
            body = b"".join(kept)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, body)
            os.ftruncate(fd, len(body))
        return dropped
    finally:
        os.close(fd)


def reclaim(service: Service, safety_interval_s: float = SAFETY_INTERVAL_S) -> None:
    """Keep every stat cache's blobs reachable, then let git drop unreachable objects older
    than the safety interval.

    ``git gc`` reads the refs, then deletes what they do not reach. A capture that writes a
    commit and moves its ref in between is safe only while the grace covers its objects (they
    are younger than it). A grace shorter than ``SAFETY_INTERVAL_S`` does not vouch for that, so
    then the prune is ``maintenance.prune_unreachable``: git's whole-store work runs beside
    live captures, which wait only for its two short steps under the store's object gate
    (docs/durability.md, "Maintenance")."""
    if safety_interval_s >= SAFETY_INTERVAL_S:
        service.caches.refresh_keep_refs(service.worktree_lock)
        _git_gc(service, safety_interval_s)
        return
    report = maintenance.prune_unreachable(service)
    log.info("pruned unreachable objects: %d bytes of cruft freed, captures held back %.3fs "
             "at most", report["cruft_bytes_freed"], report["longest_gate_hold_s"])


def _git_gc(service: Service, safety_interval_s: float) -> None:
    # The store runs it, and reopens its handles even after a failure (a failed gc may have
    # deleted packs, which libgit2 handles keep: ``Store.replaced_objects``).
    proc = service.store.collect_garbage(safety_interval_s)
    if proc.returncode != 0:
        raise ServiceError(INTERNAL, "git gc failed: "
                           f"{proc.stderr.decode(errors='replace').strip()}")


def recover_journal(service: Service) -> bool:
    """Finish a prune that a crash interrupted (idempotent)."""
    path = _journal_path(service)
    journal = read_journal(path, "gc", "the prune it recorded is not completed")
    if journal is None:
        return False
    attempt = service.ledger.get_attempt(AttemptKey(**journal["key"]))
    # Only ended attempts are pruned and nothing captures those, so the watcher's start-up
    # captures cannot meet this chain; the worktree lock keeps that true should either change.
    lock = (service.worktree_lock(Path(attempt.worktree)) if attempt is not None
            else contextlib.nullcontext())
    with lock:
        _complete(service, journal)
    path.unlink(missing_ok=True)
    log.warning("completed an interrupted gc of %s", journal.get("ref"))
    return True


def store_bytes(service: Service) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(service.store.path):
        for name in files:
            try:
                total += os.lstat(os.path.join(dirpath, name)).st_size
            except OSError:
                continue  # removed since the listing (a pack `git gc` replaced): no bytes
    return total


def reclaimable_bytes(service: Service, policy: Policy) -> int:
    """Bytes on disk held only by the checkpoints ``policy`` would prune."""
    plans = plan_prune(service, policy)
    doomed = [cp["commit"] for p in plans for cp in service.ledger.attempt_checkpoints(p.attempt.pk)
              if cp["seq"] in set(p.prune)]
    if not doomed:
        return 0
    doomed_set = set(doomed)
    kept = [cp["commit"] for a in service.ledger.attempts() for cp in
            service.ledger.attempt_checkpoints(a.pk)
            if cp["pruned_at"] is None and cp["commit"] not in doomed_set]
    cmd = ["git", "-C", str(service.store.path), "rev-list", "--objects", "--disk-usage",
           "--no-walk", "--stdin"]
    stdin = "\n".join(doomed + [f"^{c}" for c in kept]) + "\n"
    proc = subprocess.run(cmd, input=stdin, capture_output=True, text=True)
    try:
        if proc.returncode == 0:
            return int(proc.stdout.strip() or 0)
    except ValueError:
        pass  # not a number: reported just below, like a failed run
    # An estimate only (a dry run's figure): reported as unknown-zero, never as a failed gc.
    log.warning("could not measure the bytes a gc would reclaim (git rev-list exit %d): %s",
                proc.returncode, (proc.stderr or proc.stdout).strip()[:300])
    return 0


def attach(service: Service, server: Registry, config: Config) -> None:
    """Serve the ``gc`` op, finish an interrupted gc, and run the automatic policy."""
    recover_journal(service)
    server.register("gc", lambda fields: run_gc(service, policy_from_fields(fields),
                                                 dry_run=bool(fields.get("dry_run"))))
    auto = policy_from_config(config)
    state: dict = {"policy": auto.describe() if auto else None, "last_run": None,
                   "last_error": None, "store_bytes": None, "warn_bytes": None}
    # Config has validated the size already: a bad one never gets here.
    state["warn_bytes"] = parse_size(config.store_size_warn) if config.store_size_warn else None
    stop = threading.Event()
    interval = float(config.gc_interval_s)

    def loop() -> None:
        while not stop.wait(interval):
            tick(service, auto, state)

    threading.Thread(target=loop, name="snapshotd-gc", daemon=True).start()
    server.shutdown_hooks.append(stop.set)
    cache: dict = {"at": 0.0, "value": None}

    def status() -> dict:
        # Walking the store and the reachability of prunable commits is not free: once a minute.
        if time.time() - cache["at"] > 60:
            state["store_bytes"] = store_bytes(service)
            cache["value"] = reclaimable_bytes(service, auto) if auto else None
            cache["at"] = time.time()
        out = {k: v for k, v in state.items() if k != "last_report"}
        out["reclaimable_bytes"] = cache["value"]
        return {"retention": out}

    server.status_extras.append(status)
    server.register("du", lambda fields: du_op(service, fields))
    # The disk budget deletes runs as ``--max-store-size`` does, with a zero grace: with the
    # default one a deleted run's young objects stay, the store does not shrink, and run after
    # run would go. The zero-grace prune does not hold captures back.
    maintenance.attach(service, server, config, (
        lambda: store_bytes(service),
        lambda target: run_gc(service, Policy(max_store_bytes=target, safety_interval_s=0.0,
                                              grace_given=True))))


def tick(service: Service, auto: Policy | None, state: dict) -> None:
    """One pass of the automatic policy: warn over the size cap, prune when configured."""
    try:
        size = store_bytes(service)
        state["store_bytes"] = size
        if state.get("warn_bytes") and size > state["warn_bytes"]:
            log.warning("store %s is %d bytes, over the %d-byte warning cap; run `snapshotd gc`",
                        service.store.path, size, state["warn_bytes"])
        if auto is not None:
            state["last_report"] = run_gc(service, auto)
        state["last_run"] = time.time()
        state["last_error"] = None
    except Exception as exc:  # noqa: BLE001 - a failed pass is reported, never fatal
        state["last_error"] = f"{type(exc).__name__}: {exc}"
        log.error("automatic gc failed: %s", exc)


def policy_from_fields(fields: dict) -> Policy:
    """A policy from request fields (``keep_last``, ``older_than``, ``max_store_size``,
    ``run_id``, ``all``, ``safety_interval_s``)."""
    keep_last = opt_int_field(fields, "keep_last", 0)
    run_id = opt_id_field(fields, "run_id")
    try:
        policy = Policy(
            keep_last=keep_last,
            older_than_s=parse_duration(fields["older_than"]) if fields.get("older_than") else None,
            max_store_bytes=parse_size(fields["max_store_size"]) if fields.get("max_store_size")
            else None,
            run_id=run_id,
            whole_run=bool(fields.get("all")),
        )
        if fields.get("safety_interval_s") is not None:
            policy.safety_interval_s = float(fields["safety_interval_s"])
            policy.grace_given = True
    except (ValueError, TypeError) as exc:
        raise ServiceError(BAD_REQUEST, str(exc)) from None
    return policy


def policy_from_config(config: Config) -> Policy | None:
    """The automatic policy the configuration names (``gc_keep_last``, ``gc_older_than``,
    ``gc_max_store_size``), or None when it names none."""
    keep = config.gc_keep_last or None
    older = config.gc_older_than or None
    size = config.gc_max_store_size or None
    if keep is None and older is None and size is None:
        return None
    return Policy(keep_last=keep, older_than_s=parse_duration(older) if older else None,
                  max_store_bytes=parse_size(size) if size else None)


# -- helpers ---------------------------------------------------------------------------------


def _reason(policy: Policy) -> str:
    parts = []
    if policy.keep_last is not None:
        parts.append(f"keep-last {policy.keep_last}")
    if policy.older_than_s is not None:
        parts.append(f"older-than {int(policy.older_than_s)}s")
    return "gc " + ", ".join(parts)


def _complete(service: Service, journal: dict) -> None:
    """Ledger transaction, then the ref: idempotent, so a crash anywhere in it is finished by
    running it again from the journal."""
    key = AttemptKey(**journal["key"])
    attempt = service.ledger.get_attempt(key)
    if attempt is None:
        return
    remap = {int(k): (v[0], v[1]) for k, v in journal["remap"].items()}
    service.ledger.apply_prune(attempt, [int(s) for s in journal["pruned"]], remap,
                               journal.get("reason") or "gc", journal.get("final_commit"))
    crash_point("gc-after-ledger")
    if journal.get("new_tip"):
        service.store.set_attempt_ref(key, journal["new_tip"])


def _write_journal(service: Service, journal: dict) -> None:
    write_journal(_journal_path(service), journal)


def _journal_path(service: Service) -> Path:
    return service.home / "gc-journal.json"


def _check_run_deletable(service: Service, run_id: str) -> None:
    attempts = service.ledger.attempts(run_id)
    if not attempts:
        known = ", ".join(service.ledger.run_ids()[-20:]) or "none"
        raise ServiceError(NOT_FOUND, f"unknown run {run_id!r}; known runs: {known}")
    active = [a for a in attempts if a.state == ACTIVE]
    if active:
        a = active[0]
        raise ServiceError(CONFLICT, f"run {run_id!r} has an active attempt "
                           f"({a.key.node_id} attempt {a.key.attempt}); end it first with "
                           "`snapshotd attempt end`")


def _run_summary(service: Service, run_id: str) -> dict:
    attempts = service.ledger.attempts(run_id)
    return {"run_id": run_id, "attempts": len(attempts),
            "checkpoints": len(service.ledger.checkpoints(run_id))}


def _enforce_size(service: Service, policy: Policy, *, dry_run: bool) -> list[dict]:
    """Delete the oldest fully ended runs until the store is under the cap."""
    deleted: list[dict] = []
    assert policy.max_store_bytes is not None
    candidates = [r for r in service.ledger.run_activity() if not r["active"]]
    if policy.run_id is not None:
        candidates = [r for r in candidates if r["run_id"] == policy.run_id]
    for run in candidates:
        if store_bytes(service) <= policy.max_store_bytes:
            break
        summary = _run_summary(service, run["run_id"])
        summary["reason"] = f"max-store-size {policy.max_store_bytes}"
        deleted.append(summary)
        if dry_run:
            continue
        delete_run(service, run["run_id"])
        reclaim(service, policy.safety_interval_s)
    return deleted
