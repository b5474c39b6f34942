"""Reconciliation: bringing the ledger level with the store's attempt refs.

Owns the repair of a crash (or a ledger fault) between a checkpoint's ref update and its ledger
row: the rows the ref's chain holds but the ledger lacks are rebuilt from the commits' trailers
(``Snapshotd-Seq``, ``-Source``, ``-Tier``, ``-Label``, ``-Tool-Use-Id``, ``-Worktree``). An
attempt the ledger does not know at all is recreated ``interrupted``.

Promises: a seq the store holds is never reused or renumbered; rows are inserted oldest first; a
chain is walked back only to the newest seq the ledger already has.
"""

from __future__ import annotations

import logging
import time

import pygit2

from snapshotd.keys import AttemptKey
from snapshotd.ledger import Ledger
from snapshotd.store import Store, parse_trailers

log = logging.getLogger("snapshotd.reconcile")


def reconcile(store: Store, ledger: Ledger) -> dict:
    """Every attempt ref against the ledger; ``{"rebuilt_rows", "at"}`` for ``status``."""
    rebuilt = 0
    for key, tip in store.attempt_refs():
        rebuilt += reconcile_attempt(store, ledger, key, tip)
    if rebuilt:
        log.warning("reconciliation rebuilt %d checkpoint rows from store refs", rebuilt)
    return {"rebuilt_rows": rebuilt, "at": time.time()}


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
            "tool_use_id": t.get("Snapshotd-Tool-Use-Id"), "secrets": t.get("Snapshotd-Secrets"),
            "worktree": t.get("Snapshotd-Worktree", attempt.worktree),
            "created_at": float(c.commit_time),
        })
    return len(missing)
