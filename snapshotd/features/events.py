"""snapshotd's own events in the ledger: a restore, a purge (and, with issue 45, a revert).

Owns ``record_event``: one labelled ``tool_calls`` row of kind ``restore``/``purge``/``revert``
(``Ledger.record_tool_call``) in the attempt the event changed, mapped to the seq that holds the
state after it. The row exists even when every checkpoint the event took deduplicated onto an
earlier (say an unlabelled tier-2) one, so listings, ``show`` and the web app name the event
(docs/review.md, "Other sessions' changes and snapshotd's events"). Promises: an event id is
``<kind>-<unix ms>``, unique in its attempt (the next free millisecond when taken); a row that
cannot be written is logged and returned as None, never raised: the event itself (the restore
or purge) has already happened and must not be reported as failed.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from snapshotd.ledger import LedgerError

if TYPE_CHECKING:
    from snapshotd.ledger import Attempt, Ledger

log = logging.getLogger("snapshotd.events")

EVENT_KINDS = ("restore", "revert", "purge")
# Tries at the next millisecond when an id is taken (two events of one attempt in one ms).
ID_TRIES = 1000


def record_event(ledger: Ledger, attempt: Attempt, kind: str, seq: int, label: str) -> dict | None:
    """Record event ``kind`` of ``attempt`` at ``seq`` with ``label``: ``{"id", "kind",
    "seq", "label"}``, or None when the ledger refused (logged with the reason)."""
    if kind not in EVENT_KINDS:
        raise ValueError(f"event kind {kind!r} is not one of {EVENT_KINDS}")
    now = time.time()
    try:
        stamp = int(now * 1000)
        for _ in range(ID_TRIES):
            event_id = f"{kind}-{stamp}"
            if ledger.tool_call(attempt.pk, event_id) is None:
                break
            stamp += 1
        ledger.record_tool_call(attempt, event_id, seq, label=label, started_at=now, kind=kind)
    except (LedgerError, OSError) as exc:
        log.warning("%s: the %s event at seq %d (%s) was not recorded: %s", attempt.key, kind,
                    seq, label, exc)
        return None
    return {"id": event_id, "kind": kind, "seq": seq, "label": label}
