"""Coverage: how many of an attempt's tool calls have their changes on record as theirs.

Owns the coverage figures every front end shows (issue 43; docs/review.md, "Coverage"): per
attempt, the tool calls seen (each distinct call the ledger maps — an alias is one more id of
the same call — or owns a checkpoint, plus each call an open gap names that the ledger never
mapped), those captured as theirs (an own checkpoint, a capture deduplicated onto the state that
holds it, or owned tier-2 checkpoints, in-flight or inferred), the inferred ones, the open gaps
(the newest named), and the changes from outside (tier-2 or before-tool checkpoints no call
owns); ``summary`` says them in one line. ``attempt_coverage`` is the one computation;
``run_coverage``, ``total_coverage`` and ``active_coverage`` feed it, and ``GapFollower`` reads
the spool for ``status`` incrementally, keeping only the active runs' gaps.
Promises: reads only; a resolved gap (its tool call was captured later) never lowers a figure:
it is counted apart (``resolved_gaps``); snapshotd's own events (restore, revert, purge) are
not tool calls; a gap that names no attempt of the run gets an entry of its own.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from snapshotd.ledger import IN_FLIGHT, INFERRED
from snapshotd.service.tool_calls import group_calls
from snapshotd.service.turns import gap_time as turn_gap_time

if TYPE_CHECKING:
    from snapshotd.ledger import Attempt, Ledger

# Ids of missed tool calls listed in a figure (the count is always whole).
MISSED_SHOWN = 20
KEY_FIELDS = ("run_id", "node_id", "iteration", "attempt")


def attempt_coverage(key: dict, owners: list[tuple[str, str]], outside: int,
                     tool_calls: list[dict], gaps: list[dict]) -> dict:
    """The figures of one attempt (``key``: run_id, node_id, iteration, attempt) from the
    (owner, how) of its owned checkpoints, its count of changes from outside, its
    ``tool_calls`` rows and its gaps (each marked ``resolved``)."""
    # Each id the ledger maps, to its call's number (a call's aliases share it); every call
    # with a row is captured as its (own checkpoint, or deduplicated onto its state).
    by_id: dict[str, int] = {}
    count = 0
    for call in group_calls(tool_calls):
        if not call["kind"]:  # snapshotd's own events are not tool calls
            for tool_id in (call["id"], *call["aliases"]):
                by_id[tool_id] = count
            count += 1
    hows: dict[int, set[str]] = defaultdict(set)
    for owner, how in owners:
        if owner not in by_id:  # its end was never captured, but what it changed was
            by_id[owner] = count
            count += 1
        hows[by_id[owner]].add(how)
    open_gaps = [g for g in gaps if not g.get("resolved")]
    missed: list[str] = []
    for gap in open_gaps:
        tool_id = gap.get("tool_use_id")
        if tool_id and tool_id not in by_id and tool_id not in missed:
            missed.append(tool_id)
    figures = {k: key.get(k) for k in KEY_FIELDS}
    figures.update(
        tool_calls_seen=count + len(missed), tool_calls_captured=count,
        in_flight=sum(1 for h in hows.values() if IN_FLIGHT in h),
        inferred=sum(1 for h in hows.values() if INFERRED in h),
        missed=missed[:MISSED_SHOWN], gaps=len(open_gaps),
        resolved_gaps=len(gaps) - len(open_gaps),
        last_gap=_named(max(open_gaps, key=gap_time)) if open_gaps else None,
        changes_from_outside=outside)
    return _finished(figures)


def run_coverage(ledger: Ledger, gaps: list[dict], run_id: str, node_id: str | None = None,
                 attempt: int | None = None, *, call_rows: list[dict] | None = None
                 ) -> list[dict]:
    """Every attempt's figures (of one node, one attempt number) in attempt order; ``gaps``
    are the run's gaps as the listing marks them (``resolved``); ``call_rows`` the same
    selection's tool call rows when the caller read them already. The checkpoints are added
    up by the ledger (``checkpoint_owners``), never read whole."""
    attempts = [a for a in ledger.attempts(run_id)
                if (node_id is None or a.key.node_id == node_id)
                and (attempt is None or a.key.attempt == attempt)]
    found = ledger.checkpoint_owners(run_id, node_id, attempt)
    owners: dict[tuple, list[tuple[str, str]]] = defaultdict(list)
    for row in found["owners"]:
        owners[(row["node_id"], row["iteration"], row["attempt"])].append(
            (row["owner"], row["owner_how"]))
    outside = {(r["node_id"], r["iteration"], r["attempt"]): r["n"] for r in found["outside"]}
    calls: dict[tuple, list[dict]] = defaultdict(list)
    if call_rows is None:
        call_rows = ledger.tool_calls(run_id, node_id, attempt)
    for row in call_rows:
        calls[(row["node_id"], row["iteration"], row["attempt"])].append(row)
    keys = [(a.key.node_id, a.key.iteration, a.key.attempt) for a in attempts]
    keys += [k for k in dict.fromkeys([*owners, *outside, *calls]) if k not in keys]
    by_key = _gaps_by_key(gaps, keys)
    keys += [k for k in by_key if k not in keys]
    return [attempt_coverage(dict(zip(KEY_FIELDS, (run_id, *k), strict=True)),
                             owners.get(k, []), outside.get(k, 0), calls.get(k, []),
                             by_key.get(k, [])) for k in keys]


def active_coverage(ledger: Ledger, attempts: list[Attempt],
                    gaps_by_run: dict[str, list[dict]]) -> dict:
    """``status``'s figures: one per active attempt, and their ``total``."""
    out = []
    for run_id in dict.fromkeys(a.key.run_id for a in attempts):
        covered = ledger.tool_use_ids(run_id)
        gaps = [dict(g, resolved=bool(g.get("tool_use_id")) and g["tool_use_id"] in covered)
                for g in gaps_by_run.get(run_id, [])]
        mine = {(a.key.node_id, a.key.iteration, a.key.attempt) for a in attempts
                if a.key.run_id == run_id}
        out += [c for c in run_coverage(ledger, gaps, run_id)
                if (c["node_id"], c["iteration"], c["attempt"]) in mine]
    return {"attempts": out, "total": total_coverage(out)}


def total_coverage(items: list[dict]) -> dict:
    """The figures of several attempts added up (``status``'s total, a run in ``runs``)."""
    counts = ("tool_calls_seen", "tool_calls_captured", "in_flight", "inferred", "gaps",
              "resolved_gaps", "changes_from_outside")
    figures: dict = {name: sum(int(c.get(name) or 0) for c in items) for name in counts}
    figures["attempts"] = len(items)
    figures["missed"] = [m for c in items for m in c.get("missed") or []][:MISSED_SHOWN]
    named = [c["last_gap"] for c in items if c.get("last_gap")]
    figures["last_gap"] = max(named, key=gap_time) if named else None
    return _finished(figures)


def summary(figures: dict) -> str:
    """The one line: ``coverage: 12/12 tool calls captured (100 %), 0 gaps`` or ``coverage:
    11/12 tool calls captured (92 %) · 1 inferred · 1 gap: timeout at 12:03:04 [toolu_x] ·
    2 changes from outside``."""
    seen, captured = figures["tool_calls_seen"], figures["tool_calls_captured"]
    head = (f"coverage: {captured}/{seen} tool calls captured ({figures['percent']} %)"
            if seen else "coverage: no tool calls seen")
    gaps = figures.get("gaps") or 0
    if not gaps:
        head += ", 0 gaps"
    parts = [f"{figures['inferred']} inferred"] if figures.get("inferred") else []
    last = figures.get("last_gap")
    if gaps and last:
        at = time.strftime("%H:%M:%S", time.localtime(gap_time(last))) if gap_time(last) else "?"
        parts.append(f"{gaps} gap{'s' if gaps != 1 else ''}" + (", the last" if gaps > 1 else "")
                     + f": {last.get('reason')} at {at}"
                     + (f" [{last['tool_use_id']}]" if last.get("tool_use_id") else ""))
    outside = figures.get("changes_from_outside") or 0
    if outside:
        parts.append(f"{outside} change{'s' if outside != 1 else ''} from outside")
    return " · ".join([head, *parts])


def gap_time(gap: dict) -> float:
    """A gap record's ``ts`` in epoch seconds; 0 when unreadable (``turns.gap_time``)."""
    return turn_gap_time(gap) or 0.0


def _gaps_by_key(gaps: list[dict], keys: list[tuple]) -> dict[tuple, list[dict]]:
    """Each gap under the attempt it names; one naming no iteration or attempt under the
    newest of its node that fits, one naming no known attempt under its own key."""
    out: dict[tuple, list[dict]] = defaultdict(list)
    for gap in gaps:
        node, iteration, number = gap.get("node_id"), gap.get("iteration"), gap.get("attempt")
        fits = [k for k in keys if (node is None or k[0] == node)
                and (iteration is None or k[1] == iteration)
                and (number is None or k[2] == number)]
        key = max(fits, key=lambda k: (k[1], k[2])) if fits else (
            node, iteration if iteration is not None else 0, number)
        out[key].append(gap)
    return out


def _named(gap: dict) -> dict:
    # No detail: the listing shows it, redacted; the spool's raw text is not repeated here.
    return {"reason": gap.get("reason"), "ts": gap.get("ts"), "tool_use_id": gap.get("tool_use_id")}


def _finished(figures: dict) -> dict:
    seen, captured = figures["tool_calls_seen"], figures["tool_calls_captured"]
    # Never "100 %" while a call is missing: 199 of 200 is 99.
    figures["percent"] = (100 if captured >= seen else min(99, round(100 * captured / seen))) \
        if seen else None
    figures["complete"] = captured >= seen
    figures["summary"] = summary(figures)
    return figures


class GapFollower:
    """The gap records of the runs ``status`` asks about, read from the spool incrementally:
    a run asked about for the first time costs one read of the spool, later calls read only
    what was appended; runs no longer asked about are dropped (memory follows what is active)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._identity: tuple[int, int] | None = None
        self._offset = 0
        self._runs: dict[str, list[dict]] = {}

    def gaps(self, run_ids: set[str]) -> dict[str, list[dict]]:
        with self._lock:
            try:
                st = os.stat(self.path)
            except OSError:
                self._identity, self._offset, self._runs = None, 0, {}
                return {}
            identity = (st.st_dev, st.st_ino)
            if identity != self._identity or st.st_size < self._offset:
                self._identity, self._offset, self._runs = identity, 0, {}
            self._runs = {r: g for r, g in self._runs.items() if r in run_ids}
            new = run_ids - set(self._runs)
            if new and self._offset:
                self._read(0, self._offset, new)  # what was read before they were asked about
            for run_id in run_ids:
                self._runs.setdefault(run_id, [])
            self._offset = self._read(self._offset, st.st_size, set(self._runs))
            return {r: list(g) for r, g in self._runs.items()}

    def _read(self, start: int, end: int, runs: set[str]) -> int:
        """Whole lines of [start, end) of the runs ``runs`` added; the offset read up to."""
        if end <= start or not runs:
            return start  # nothing asked about: read it when a run is
        try:
            with open(self.path, "rb") as f:
                f.seek(start)
                data = f.read(end - start)
        except OSError:
            return start
        stop = data.rfind(b"\n") + 1  # a writer may be half-way through its append
        for line in data[:stop].splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # counted as unreadable by the spool's summary
            if isinstance(record, dict) and record.get("run_id") in runs:
                self._runs.setdefault(record["run_id"], []).append(record)
        return start + stop
