"""Reconciliation: bringing the ledger level with the store's attempt refs.

Owns the repair of a crash (or a ledger fault) between a checkpoint's ref update and its ledger
row: the rows the ref's chain holds but the ledger lacks are rebuilt from the commits' trailers
(``Snapshotd-Seq``, ``-Source``, ``-Tier``, ``-Label``, ``-Tool-Use-Id``, ``-Worktree``). An
attempt the ledger does not know at all is recreated ``interrupted``. An attempt that cannot be
reconciled (a broken ref, a missing commit, an unreadable row) is handed to ``snapshotd.damage``
and the others go on.

Promises: a seq the store holds is never reused or renumbered; rows are inserted oldest first; a
chain is walked back only to the newest seq the ledger already has.
"""

from __future__ import annotations

import logging
import time

import pygit2

from snapshotd.damage import DamageRegistry, repair_ref
from snapshotd.keys import AttemptKey
from snapshotd.ledger import Ledger, LedgerDamaged
from snapshotd.store import Store, parse_trailers

log = logging.getLogger("snapshotd.reconcile")


def reconcile(store: Store, ledger: Ledger, damage: DamageRegistry | None = None) -> dict:
    """Every attempt ref against the ledger; ``{"rebuilt_rows", "damaged_attempts", "at"}``
    for ``status``. An attempt whose ref is broken, whose chain or rows cannot be read, is
    recorded as damaged (``snapshotd.damage``) and skipped: every other attempt is reconciled."""
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
    return {"rebuilt_rows": rebuilt, "damaged_attempts": damaged, "at": time.time()}


def reconcile_attempt(store: Store, ledger: Ledger, key: AttemptKey, tip: str) -> int:
    """Insert the rows of the commits on ``tip``'s chain that the ledger lacks; how many."""
    attempt = ledger.get_attempt(key)
    known = ledger.seqs(attempt.pk) if attempt else set()
    missing: list[pygit2.Commit] = []
    commit = store.read_commit(tip)
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
        attempt = ledger.create_attempt(key, worktree, state="interrupted")
    for c in reversed(missing):
        t = parse_trailers(c.message)
        ledger.record_checkpoint(attempt, {
            "seq": int(t["Snapshotd-Seq"]), "commit": str(c.id), "tree": str(c.tree_id),
            "parent": str(c.parents[0].id) if c.parents else None,
            "source": t.get("Snapshotd-Source", "hook"),
            "tier": int(t.get("Snapshotd-Tier", "1")), "label": t.get("Snapshotd-Label"),
            "tool_use_id": t.get("Snapshotd-Tool-Use-Id"),
            "worktree": t.get("Snapshotd-Worktree", attempt.worktree),
            "created_at": float(c.commit_time),
        })
    return len(missing)


def _worktree_of(ledger: Ledger, key: AttemptKey) -> str | None:
    try:
        attempt = ledger.get_attempt(key)
    except Exception:  # noqa: BLE001 - the gap is still written, without the worktree
        log.warning("could not read attempt %s from the ledger for its damage gap", key)
        return None
    return attempt.worktree if attempt else None
