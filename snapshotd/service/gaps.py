"""The daemon's side of the gap spool: every capture it could not take, on record.

Owns the counting of gaps by reason (for ``status``) and the reading of the spool for listings.
The record format and the torn-line-free append are ``snapshotd_client.gaps``'s: one definition.

Promises: ``record`` never raises: a gap that cannot be written is logged at error and counted in
``unwritten`` (``status`` shows it as ``gaps_unwritten``), and the capture's own error still reaches
the caller; ``for_run`` returns a run's gaps in spool order; no token ``secrets.redact_secrets``
finds is written into or shown from a gap's detail.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from pathlib import Path

from snapshotd.core import check_fault, redact_secrets
from snapshotd_client import append_gap, make_gap, read_gaps

log = logging.getLogger("snapshotd.gaps")


class GapSpool:
    """The daemon's handle on the gap spool file, safe to share between threads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.counts: Counter[str] = Counter()
        # Gaps that could not be appended to the spool: the only trace they leave is the log.
        self.unwritten = 0
        self._lock = threading.Lock()

    def record(self, *, reason: str, detail: str, run_id: str | None = None,
               node_id: str | None = None, iteration: int | None = None,
               attempt: int | None = None, worktree: str | None = None, tier: int | None = None,
               source: str | None = None, tool_use_id: str | None = None) -> dict:
        gap = make_gap(run_id=run_id, node_id=node_id, iteration=iteration, attempt=attempt,
                       worktree=worktree, tier=tier, source=source, tool_use_id=tool_use_id,
                       reason=reason, detail=redact_secrets(detail))
        detail = gap["detail"]
        with self._lock:
            self.counts[reason] += 1
        try:
            check_fault("gaps")
            append_gap(gap, self.path)
        except OSError as exc:
            with self._lock:
                self.unwritten += 1
            log.error("could not write gap %s for %s: %s", reason, worktree, exc)
        else:
            log.warning("gap %s run=%s node=%s worktree=%s: %s", reason, run_id, node_id,
                        worktree, detail)
        return gap

    def for_run(self, run_id: str) -> list[dict]:
        if not self.path.exists():
            return []
        return [_redacted(g) for g in read_gaps(self.path) if g.get("run_id") == run_id]

    def all(self) -> list[dict]:
        if not self.path.exists():
            return []
        return [_redacted(g) for g in read_gaps(self.path)]


def _redacted(gap: dict) -> dict:
    """A spooled gap as shown: the hook writes its own gaps without the daemon's secret rules
    (it stays stdlib-light), so a token a message echoed is redacted on the way out."""
    detail = gap.get("detail")
    if isinstance(detail, str):
        gap["detail"] = redact_secrets(detail)
    return gap
