"""Reconciliation: bringing the ledger level with the store's attempt refs. Owns the repair of a
crash (or a ledger fault) between a checkpoint's ref update and its ledger row: the rows the
ref's chain holds but the ledger lacks are rebuilt from the commits' trailers
(``Checkpoint.from_commit``: seq, source, tier, label, tool call, worktree, secrets). An attempt
the ledger lost is recreated as ``repair`` does (``active`` when its worktree's newest, else
``interrupted``); one that cannot be reconciled (a broken ref, a missing commit, an unreadable
row) goes to ``service.damage``, the others go on. And of a power cut with ``durability =
"process"``, which can take an attempt's newest commits while rows (or the ref) still name
them: such rows are dropped newest first until one whose commit is whole, each reported through
``on_lost`` (a ``checkpoint-lost`` gap), and the ref points at the newest left (or is removed);
a ref that ``store.recovery`` removed is pointed back.

Promises: a seq the store holds is never reused or renumbered (nor one that was dropped:
``service.seqmarks``); rows are inserted oldest first; a chain is walked back only to the newest
seq the ledger already has; a row is never left naming a commit the store lacks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import pygit2

from snapshotd.core import AttemptKey, Checkpoint, Trailers, worktree_id
from snapshotd.ledger import ACTIVE, Attempt, Ledger, LedgerDamaged
from snapshotd.service.damage import DamageRegistry, repair_ref
from snapshotd.service.gaps import GapSpool
from snapshotd.store import Store

log = logging.getLogger("snapshotd.reconcile")


def reconcile(store: Store, ledger: Ledger, damage: DamageRegistry | None = None,
              on_lost: Callable[[Attempt, list[int]], None] | None = None) -> dict:
    """Every attempt ref against the ledger; ``{"rebuilt_rows", "damaged_attempts",
    "dropped_rows", "at"}`` for ``status``. An attempt whose ref is broken, whose chain or rows
    cannot be read, is recorded as damaged (``snapshotd.service.damage``) and skipped: every other
    attempt is reconciled. Then rows whose commits the store lost (a power loss in process
    mode) are dropped, each attempt's through ``on_lost`` (None: nothing is dropped)."""
    rebuilt = 0
    damaged = 0
    for key in store.attempt_keys():
        try:
            detail = repair_ref(store, ledger, key)
            head = store.head(key)
            if head is not None:
                rebuilt += reconcile_attempt(store, ledger, key, str(head.id))
        except LedgerDamaged:
            raise  # the whole ledger, not this attempt: `snapshotd repair`
        except Exception as exc:  # noqa: BLE001 - contained to this attempt, recorded below
            detail = f"it could not be reconciled: {type(exc).__name__}: {exc}"
        if detail is None:
            continue
        damaged += 1
        if damage is not None:
            damage.note(key, detail, _worktree_of(ledger, key))
        else:
            log.error("attempt %s is damaged: %s", key, detail)
    if rebuilt:
        log.warning("reconciliation rebuilt %d checkpoint rows from store refs", rebuilt)
    dropped = drop_lost_checkpoints(store, ledger, on_lost) if on_lost is not None else 0
    return {"rebuilt_rows": rebuilt, "damaged_attempts": damaged, "dropped_rows": dropped,
            "at": time.time()}


def drop_lost_checkpoints(store: Store, ledger: Ledger,
                          on_lost: Callable[[Attempt, list[int]], None]) -> int:
    """Drop the rows whose commits the store lost and point each ref at a commit it has; how
    many rows were dropped. Only attempts whose newest row or ref tip is missing are read."""
    tips = dict(store.attempt_refs())
    dropped = 0
    for attempt in ledger.attempts():
        last = ledger.last_checkpoint(attempt.pk)
        tip = tips.get(attempt.key)
        last_ok = last is None or store.has_checkpoint(last["commit"])
        tip_ok = tip is not None and store.has_checkpoint(tip)
        if last_ok and (tip_ok or (tip is None and last is None)):
            continue
        rows = [r for r in ledger.attempt_checkpoints(attempt.pk) if r["pruned_at"] is None]
        gone: list[int] = []
        while rows and not store.has_checkpoint(rows[-1]["commit"]):
            gone.append(rows.pop()["seq"])
        if gone:
            ledger.drop_checkpoints(attempt, gone)
            log.warning("attempt %s: dropped %d row(s) whose commits the store lost (seqs %s)",
                        attempt.key, len(gone), sorted(gone))
            on_lost(attempt, sorted(gone))
            dropped += len(gone)
        if tip_ok:
            continue  # the ref is whole (and maybe ahead: its rows are rebuilt next)
        if rows:
            store.set_attempt_ref(attempt.key, rows[-1]["commit"])
        elif tip is not None:
            store.delete_attempt_refs([attempt.key])
    return dropped


def reconcile_attempt(store: Store, ledger: Ledger, key: AttemptKey, tip: str) -> int:
    """Insert the rows of the commits on ``tip``'s chain that the ledger lacks; how many."""
    attempt = ledger.get_attempt(key)
    known = ledger.seqs(attempt.pk) if attempt else set()
    missing: list[pygit2.Commit] = []
    commit = store.read_commit(tip)
    while True:
        seq = Trailers(commit.message).seq
        if seq is None or seq in known or seq < 0:  # no seq: not a checkpoint, the chain ends
            break
        missing.append(commit)
        if not commit.parents:
            break
        commit = commit.parents[0]
    if not missing:
        return 0
    if attempt is None:
        attempt = _recreate_attempt(ledger, key, missing)
    for c in reversed(missing):
        checkpoint = Checkpoint.from_commit(c, key, worktree=attempt.worktree)
        ledger.record_checkpoint(attempt, checkpoint.to_row())
    return len(missing)


def _recreate_attempt(ledger: Ledger, key: AttemptKey, missing: list[pygit2.Commit]) -> Attempt:
    """The row of an attempt the store holds and the ledger lost (its first writes did not
    survive a power cut), as ``snapshotd repair`` rebuilds it: ``active`` when no attempt on its
    worktree began after its newest commit (else it would be fenced for good while it still
    works), ``interrupted`` when one did. Commit times are whole seconds: an attempt begun in
    the same second does not count as newer (a ledger loses its newest writes first, so the
    lost attempt is the newer one)."""
    worktree = Trailers(missing[-1].message).worktree or ""
    newest = missing[0].commit_time
    newer = [a for a in ledger.attempts() if a.worktree == worktree and a.key != key
             and a.started_at >= newest + 1]
    state = "interrupted" if newer or not worktree else ACTIVE
    if state == ACTIVE:
        ledger.ensure_worktree(worktree_id(Path(worktree)), worktree)
    log.warning("attempt %s was not in the ledger: recreated %s from the store", key, state)
    return ledger.create_attempt(key, worktree, state=state)


def _worktree_of(ledger: Ledger, key: AttemptKey) -> str | None:
    try:
        attempt = ledger.get_attempt(key)
    except Exception:  # noqa: BLE001 - the gap is still written, without the worktree
        log.warning("could not read attempt %s from the ledger for its damage gap", key)
        return None
    return attempt.worktree if attempt else None


def lost_gap_writer(gaps: GapSpool) -> Callable[[Attempt, list[int]], None]:
    """The ``on_lost`` of ``reconcile``: each attempt's lost checkpoints as one
    ``checkpoint-lost`` gap."""
    def record(attempt: Attempt, seqs: list[int]) -> None:
        gaps.record(
            reason="checkpoint-lost", run_id=attempt.key.run_id, node_id=attempt.key.node_id,
            iteration=attempt.key.iteration, attempt=attempt.key.attempt,
            worktree=attempt.worktree,
            detail=f"seqs {', '.join(map(str, seqs))} named commits the store no longer has "
                   "(lost to a power cut with durability = \"process\"); their rows were "
                   "dropped and their seqs are not reused")
    return record
