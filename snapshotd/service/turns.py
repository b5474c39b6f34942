"""Which turn each checkpoint and gap belongs to, computed when read (docs/review.md, "Turns").

Owns ``TurnIndex`` and ``with_turns``: a checkpoint's or gap's turn is the last prompt of its
attempt submitted at or before it (``created_at``, a gap's ``ts``); before an attempt's first
prompt (a session's baseline, an attempt with no prompt events) it is None. Nothing is stored
per checkpoint: the turns rows (``Ledger.turns``) and the times already in the ledger and the
spool decide it, so rows written before turns existed, and gaps the hook wrote, get one too.
Promises: reads only; a listing or row it is given gains keys (``turn``, ``turns``) and
loses none.
"""

from __future__ import annotations

import bisect
import calendar
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from snapshotd.ledger import Ledger

Key = tuple[str, int, int]  # node, iteration, attempt (within one run)

PUBLIC_FIELDS = ("node_id", "iteration", "attempt", "turn", "started_at", "first_line",
                 "transcript_path", "transcript_pos", "agent_turn_id", "agent_session")


class TurnIndex:
    """A run's turn rows, by attempt and time."""

    def __init__(self, turn_rows: Iterable[dict]) -> None:
        self.rows: dict[Key, list[dict]] = {}
        for row in turn_rows:
            self.rows.setdefault(_key(row), []).append(row)
        for rows in self.rows.values():
            rows.sort(key=lambda r: r["turn"])
        self._times = {k: [r["started_at"] for r in rows] for k, rows in self.rows.items()}

    def at(self, item: dict, when: float | None) -> int | None:
        """The turn of ``item`` (a checkpoint or gap row) taken at ``when``, or None."""
        times = self._times.get(_key(item))
        if not times or when is None:
            return None
        i = bisect.bisect_right(times, when)
        return self.rows[_key(item)][i - 1]["turn"] if i else None

    def of_checkpoint(self, cp: dict) -> int | None:
        return self.at(cp, cp.get("created_at"))

    def of_gap(self, gap: dict) -> int | None:
        return self.at(gap, gap_time(gap))


def with_turns(listing: dict, turn_rows: Iterable[dict]) -> dict:
    """``listing`` (the ``list`` op's shape) with ``turn`` on each checkpoint and gap and
    ``turns``, the run's turns (``PUBLIC_FIELDS``)."""
    rows = list(turn_rows)
    index = TurnIndex(rows)
    out = dict(listing)
    out["checkpoints"] = [dict(cp, turn=index.of_checkpoint(cp))
                          for cp in listing.get("checkpoints") or []]
    out["gaps"] = [dict(g, turn=index.of_gap(g)) for g in listing.get("gaps") or []]
    out["turns"] = [public_turn(r) for r in rows]
    return out


def set_turns(ledger: Ledger, rows: list[dict]) -> list[dict]:
    """``rows`` (checkpoint rows of any runs: ``run_id``, ``node_id``, ``iteration``,
    ``attempt``, ``created_at``), each given its ``turn`` in place (``log``, ``show``,
    ``find``); one read of the turns per run."""
    indexes: dict[str, TurnIndex] = {}
    for row in rows:
        run = str(row.get("run_id"))
        if run not in indexes:
            indexes[run] = TurnIndex(ledger.turns(run))
        row["turn"] = indexes[run].of_checkpoint(row)
    return rows


def public_turn(row: dict) -> dict:
    return {k: row.get(k) for k in PUBLIC_FIELDS}


def gap_time(gap: dict) -> float | None:
    """A gap's ``ts`` (ISO 8601 UTC with milliseconds, as both spools write it) in seconds;
    None when unreadable. Parsed by hand, not ``time.strptime``: that imports ``_strptime``
    on first use, which a daemon whose disk fails (or runs as another user) may not load."""
    ts = str(gap.get("ts") or "")
    base, _, frac = ts.rstrip("Z").partition(".")
    day, _, clock = base.partition("T")
    try:
        year, month, mday = (int(x) for x in day.split("-"))
        hour, minute, second = (int(x) for x in clock.split(":"))
        if not (0 <= hour < 24 and 0 <= minute < 60 and 0 <= second < 61):
            return None
        seconds = calendar.timegm((year, month, mday, hour, minute, second, 0, 0, 0))
    except (ValueError, OverflowError):
        return None
    return seconds + (int(frac[:3].ljust(3, "0")) / 1000 if frac.isdigit() else 0.0)


def _key(row: dict) -> Key:
    # A hook's gap may name no iteration or attempt: a zero-setup session's are 0 and 1.
    iteration = row.get("iteration")
    attempt = row.get("attempt")
    return (str(row.get("node_id")), 0 if iteration is None else int(iteration),
            1 if attempt is None else int(attempt))
