"""Damaged attempts: damage to one attempt's ref or rows stays with that attempt.

Owns finding what is wrong with an attempt (a ref that cannot be parsed or names a commit the
store does not hold: ``Store.ref_problem``; rows or a chain the ledger or store cannot read:
whatever reconciling it raised), repairing a ref for certain broken (``repair_ref``), and the
record of the damage (``DamageRegistry``): one ``attempt-damaged`` gap per damage found, logged,
listed by ``status`` (``damaged_attempts``) and, through the gap, by ``runs`` and ``snapshots``.

Promises:
- Nothing is deleted but a ref that names nothing readable, and no seq is ever reused: a broken
  ref is moved to the newest checkpoint of the attempt whose commit the store still holds (or
  removed when none is), so the next capture continues the chain from there with a seq after
  every seq the ledger holds. Rows whose commits are gone stay listed; the gap names them.
- The same damage found again (at every start-up while it lasts) is not recorded twice.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from snapshotd.core import AttemptKey

if TYPE_CHECKING:
    from snapshotd.ledger import Ledger
    from snapshotd.service.gaps import GapSpool
    from snapshotd.store import Store

log = logging.getLogger("snapshotd.damage")

# The gap reason for an attempt found damaged (a gap reason, not an error code).
ATTEMPT_DAMAGED = "attempt-damaged"
MISSING_SEQS_SHOWN = 20


def repair_ref(store: Store, ledger: Ledger, key: AttemptKey) -> str | None:
    """Repair the attempt's ref when it is broken for certain; what was wrong and what was
    done, or None when the ref is fine (or absent)."""
    problem = store.ref_problem(key)
    if problem is None:
        return None
    attempt = ledger.get_attempt(key)
    rows = [r for r in ledger.attempt_checkpoints(attempt.pk) if r["pruned_at"] is None] \
        if attempt is not None else []
    missing = [r["seq"] for r in rows if not store.has_object(r["commit"])]
    readable = [r for r in rows if r["seq"] not in set(missing)]
    next_seq = max((r["seq"] for r in rows), default=-1) + 1
    # Removed first: libgit2 will not overwrite a ref file it cannot parse.
    store.remove_attempt_ref(key)
    if readable:
        base = readable[-1]
        store.set_attempt_ref(key, base["commit"])
        done = (f"its ref now names seq {base['seq']} ({base['commit'][:12]}), the newest "
                f"checkpoint the store holds; the next capture continues from it as seq "
                f"{next_seq}")
    else:
        done = (f"no checkpoint of it is in the store; its ref was removed and the next capture "
                f"starts a new chain at seq {next_seq}")
    if missing:
        shown = ", ".join(str(s) for s in missing[-MISSING_SEQS_SHOWN:])
        done += f"; seq {shown} have no commit in the store (not restorable)"
    return f"{problem}; {done}"


class DamageRegistry:
    """The damaged attempts this daemon knows of, and their gaps."""

    def __init__(self, gaps: GapSpool) -> None:
        self.gaps = gaps
        self._lock = threading.Lock()
        self._items: dict[str, dict] = {}

    def note(self, key: AttemptKey, detail: str, worktree: str | None = None) -> None:
        """Record damage of ``key``: logged at error, listed, and one gap unless the spool
        already holds this very record."""
        with self._lock:
            self._items[str(key)] = {**key.as_dict(), "detail": detail, "at": time.time()}
        log.error("attempt %s is damaged: %s", key, detail)
        try:
            known = any(g.get("reason") == ATTEMPT_DAMAGED and g.get("detail") == detail
                        and g.get("node_id") == key.node_id and g.get("attempt") == key.attempt
                        and g.get("iteration") == key.iteration
                        for g in self.gaps.for_run(key.run_id))
        except (OSError, ValueError) as exc:
            log.warning("could not read the gap spool to check for %s's damage gap: %s", key, exc)
            known = False
        if not known:
            self.gaps.record(reason=ATTEMPT_DAMAGED, detail=detail, run_id=key.run_id,
                             node_id=key.node_id, iteration=key.iteration,
                             attempt=key.attempt, worktree=worktree)

    def listing(self) -> list[dict]:
        """Every damaged attempt found since start-up, oldest first (for ``status``)."""
        with self._lock:
            return sorted(self._items.values(), key=lambda d: d["at"])
