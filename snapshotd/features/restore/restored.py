"""The state an in-place restore leaves, captured, and the restore recorded as an event.

Owns ``record_restore``: called by ``restore.restore_checkpoint`` under the worktree's lock right
after a restore was applied. It captures the restored worktree into the attempt that holds the
safety checkpoint (tier 1, source ``restore``, label ``restored seq N``; it deduplicates onto the
newest checkpoint when that already holds the state) and records the restore as an event
(``features.events``, kind ``restore``, label ``restore to seq N (safety checkpoint seq S)``) at
the seq that holds the restored state, so a restore whose checkpoints all deduplicated is still
listed. Promises: never raises once the restore is applied; a capture that fails is a gap (the
capture path records it) and the reply's ``restored`` says why, with no event.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

from snapshotd.core import ServiceError
from snapshotd.features import record_event
from snapshotd.service import SnapshotRequest

if TYPE_CHECKING:
    from pathlib import Path

    from snapshotd.ledger import Attempt
    from snapshotd.service import Service

log = logging.getLogger("snapshotd.restore")


def record_restore(service: Service, owner: Attempt, root: Path, cp: dict,
                   safety: dict | None) -> dict:
    """``{"restored": {"seq", "commit", "deduped"} | {"error"}, "event": {...} | None}``."""
    current = service.ledger.get_attempt(owner.key) or owner
    req = SnapshotRequest(cwd=root, tier=1, source="restore", label=f"restored seq {cp['seq']}",
                          run_id=owner.key.run_id, node_id=owner.key.node_id,
                          iteration=owner.key.iteration, attempt=owner.key.attempt)
    try:
        # The caller holds the worktree's lock: capture_locked, not capture_attempt.
        after = service.capture_locked(current, req, time.perf_counter())
    except ServiceError as exc:
        log.warning("%s: the state restored from seq %d was not captured (%s): %s; the "
                    "restore is not recorded as an event", owner.key, cp["seq"], exc.code,
                    exc.message)
        return {"restored": {"error": f"{exc.code}: {exc.message}"}, "event": None}
    label = f"restore to seq {cp['seq']}"
    if safety is not None:
        label += f" (safety checkpoint seq {safety['seq']})"
    event = record_event(service.ledger, current, "restore", after["seq"], label)
    return {"restored": {"seq": after["seq"], "commit": after["commit"],
                         "deduped": bool(after.get("deduped"))}, "event": event}
