"""What was captured, read from the ledger and the gap spool without a daemon.

Owns the ``list`` op (``list_op``/``list_page``: a page of a run's checkpoint rows, optionally
of one node or attempt, in attempt and seq order, then the run's gaps in spool order, each marked
``resolved`` when its tool call later got a checkpoint; pages keep a reply far under the frame
limit, docs/protocol.md), the whole listing (``list_run``: ``snapshots --json``, handoff), each
row with its ``tool_call`` and ``tool_calls``, one entry per tool call besides, the run summary
(``collect_runs``, behind ``snapshotd runs`` and the MCP ``list_runs``: it names the run's
damaged attempts from their ``attempt-damaged`` gaps, counts its tool calls and adds its
attempts' ``coverage`` up), the gap listing with each gap marked resolved or not
(``list_gaps``), a run's listing read from the ledger (``list_from_ledger``) and the one
sentence for an unknown run. Ledger and spool are safe to read beside a running daemon.
Promises: nothing here writes; an unknown run is a ``ServiceError(not-found)`` naming the
known runs; a spool or ledger that cannot be read raises (``OSError``, ``LedgerError``,
``ConfigError``) for the front end to report.
"""

from __future__ import annotations

import contextlib
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from snapshotd.core import NOT_FOUND, ServiceError, id_field, int_field, opt_int_field
from snapshotd.service.coverage import run_coverage, total_coverage
from snapshotd.service.damage import ATTEMPT_DAMAGED
from snapshotd.service.gaps import GapSpool
from snapshotd.service.tool_calls import annotate, count_calls, run_calls
from snapshotd_client import gaps_path, pack_plain

if TYPE_CHECKING:
    from snapshotd.ledger import Ledger

KNOWN_RUNS_SHOWN = 20
# A ``list`` page: at most this many items and about this many bytes, well under the 1 MiB
# frame (a row is a few hundred bytes; its skipped list can be longer).
PAGE_ROWS = 2000
PAGE_BYTES = 512 << 10


def list_op(ledger: Ledger, gaps: GapSpool, fields: dict) -> dict:
    """The ``list`` op: validates ``run_id`` (``node_id``, ``attempt``, ``offset``, ``limit``
    optional) and lists one page (``list_page``)."""
    run_id = id_field("run_id", fields.get("run_id"))
    node_id = fields.get("node_id")
    if node_id is not None:
        node_id = id_field("node_id", node_id)
    attempt = fields.get("attempt")
    if attempt is not None:
        attempt = int_field(fields, "attempt", 1, 1)
    offset = int_field(fields, "offset", 0, 0)
    limit = opt_int_field(fields, "limit", 1)
    return list_page(ledger, gaps, run_id, node_id, attempt, offset=offset, limit=limit)


def list_run(ledger: Ledger, gaps: GapSpool, run_id: str, node_id: str | None = None,
             attempt: int | None = None) -> dict:
    """A run's checkpoints and its gaps; a gap whose tool call later got a checkpoint is
    marked resolved."""
    checkpoints = annotate(ledger.checkpoints(run_id, node_id, attempt),
                           ledger.tool_calls(run_id, node_id, attempt))
    gap_rows = _run_gaps(ledger, gaps, run_id, node_id, attempt)
    return {"run_id": run_id, "checkpoints": checkpoints, "tool_calls": run_calls(checkpoints),
            "gaps": gap_rows,
            "coverage": run_coverage(ledger, gap_rows, run_id, node_id, attempt)}


def list_page(ledger: Ledger, gaps: GapSpool, run_id: str, node_id: str | None = None,
              attempt: int | None = None, *, offset: int = 0, limit: int | None = None,
              budget: int = PAGE_BYTES) -> dict:
    """One page of ``list_run``'s items: the checkpoints, then the gaps, counted as one
    sequence from ``offset``; at most ``limit`` (and ``PAGE_ROWS``) items and about ``budget``
    bytes of msgpack (always at least one item). ``next_offset`` is where the next page starts,
    None after the last; ``total`` counts every item. The first page (``offset`` 0) carries
    the run's ``coverage`` too (its size taken from the budget)."""
    count = ledger.count_checkpoints(run_id, node_id, attempt)
    cap = min(limit or PAGE_ROWS, PAGE_ROWS)
    rows = ledger.checkpoints(run_id, node_id, attempt, offset=offset, limit=cap) \
        if offset < count else []
    if rows:  # each row names its tool call (its own, its owner's, the calls held at it)
        rows = annotate(rows, ledger.tool_calls(run_id, node_id, attempt))
    gap_rows = _run_gaps(ledger, gaps, run_id, node_id, attempt)
    items = rows + (gap_rows[max(0, offset - count):] if offset + len(rows) >= count else [])
    extra: dict = {}
    if offset == 0:  # one list per reply: later pages would append it again (Client.pages)
        extra["coverage"] = run_coverage(ledger, gap_rows, run_id, node_id, attempt)
        budget -= len(pack_plain(extra) or b"")
    used = taken = 0
    for item in items[:cap]:
        size = len(pack_plain(item) or b"") or len(repr(item))
        if taken and used + size > budget:
            break
        used += size
        taken += 1
    total = count + len(gap_rows)
    end = offset + taken
    kept_rows = min(taken, len(rows))
    return {"run_id": run_id, "checkpoints": rows[:kept_rows],
            "gaps": items[kept_rows:taken], "offset": offset, "total": total,
            "checkpoints_total": count, "gaps_total": len(gap_rows),
            "next_offset": end if end < total else None, **extra}


def collect_runs(home: Path) -> list[dict]:
    """The run summaries, oldest activity first (none when nothing was captured)."""
    gaps: dict[str, list[dict]] = defaultdict(list)
    for gap in GapSpool(gaps_path(home)).all():
        if gap.get("run_id"):
            gaps[gap["run_id"]].append(gap)
    with open_ledger_if_any(home) as ledger:
        if ledger is None:
            return []
        attempts = ledger.attempts()
        stats = ledger.checkpoint_stats()
        covered = ledger.covered_tool_calls()
        calls: dict[str, dict] = {}
        coverage: dict[str, dict] = {}
        for run in dict.fromkeys(a.key.run_id for a in attempts):
            rows = ledger.tool_calls(run)
            calls[run] = count_calls(rows)
            coverage[run] = total_coverage(run_coverage(ledger, [
                dict(g, resolved=bool(g.get("tool_use_id")) and (run, g["tool_use_id"]) in covered)
                for g in gaps.get(run, [])], run, call_rows=rows))
    by_run: dict[str, list] = defaultdict(list)
    for a in attempts:
        by_run[a.key.run_id].append(a)
    out = []
    for run_id, items in by_run.items():
        count, last_cp = stats.get(run_id, (0, None))
        times = [a.started_at for a in items] + [a.ended_at for a in items if a.ended_at]
        if last_cp:
            times.append(last_cp)
        run_gaps = gaps.get(run_id, [])
        unresolved = sum(1 for g in run_gaps
                         if not (g.get("tool_use_id") and (run_id, g["tool_use_id"]) in covered))
        out.append({
            "run_id": run_id,
            "nodes": len({a.key.node_id for a in items}),
            "attempts": len(items),
            "states": dict(Counter(a.state for a in items)),
            # Active attempts whose agent waits for its user (issue 44: `runs` says `idle`).
            "idle": sum(1 for a in items if a.state == "active" and a.idle_since is not None),
            "checkpoints": count,
            **calls[run_id],
            "gaps": len(run_gaps),
            "unresolved_gaps": unresolved,
            "worktrees": sorted({a.worktree for a in items}),
            "damaged_attempts": _damaged(run_gaps),
            "coverage": coverage[run_id],
            "started_at": min(a.started_at for a in items),
            "last_activity": max(times),
        })
    out.sort(key=lambda r: r["last_activity"])
    return out


def list_gaps(home: Path, run_id: str | None = None, *, unresolved_only: bool = False,
              limit: int | None = None) -> dict:
    """The gap records (of ``run_id``, or all), oldest first, each marked ``resolved`` when a
    later checkpoint covered its tool call, with counts by reason."""

    spool = GapSpool(gaps_path(home))
    gaps = spool.for_run(run_id) if run_id is not None else spool.all()
    with open_ledger_if_any(home) as ledger:
        if run_id is not None and not gaps:
            if ledger is None or run_id not in ledger.run_ids():
                raise unknown_run(run_id, ledger)
        rows = _mark_resolved(gaps, ledger)
    by_reason = dict(Counter(str(gap.get("reason")) for gap in rows))
    unresolved = sum(1 for g in rows if not g["resolved"])
    if unresolved_only:
        rows = [g for g in rows if not g["resolved"]]
    total = len(rows)
    if limit is not None:
        rows = rows[-limit:]
    return {"gaps": rows, "total": total, "unresolved": unresolved, "by_reason": by_reason,
            "truncated": len(rows) < total}


def list_from_ledger(home: Path, run_id: str, node_id: str | None = None,
                     attempt: int | None = None) -> dict:
    """A run's checkpoints and gaps in the ``list`` op's shape, read without the daemon."""
    with open_ledger_if_any(home) as ledger:
        if ledger is None:
            raise unknown_run(run_id, None)
        return list_run(ledger, GapSpool(gaps_path(home)), run_id, node_id, attempt)


def require_known_run(home: Path, run_id: str) -> None:
    """``ServiceError(not-found)`` unless the ledger knows ``run_id``."""
    with open_ledger_if_any(home) as ledger:
        if ledger is None or run_id not in ledger.run_ids():
            raise unknown_run(run_id, ledger)


def unknown_run(run_id: str, ledger: Ledger | None) -> ServiceError:
    known = ledger.run_ids() if ledger is not None else []
    names = ", ".join(known[-KNOWN_RUNS_SHOWN:]) or "none"
    return ServiceError(NOT_FOUND, f"unknown run {run_id!r}; known runs: {names} "
                                   "(`snapshotd runs` or the list_runs tool shows them all)")


@contextlib.contextmanager
def open_ledger_if_any(home: Path) -> Iterator[Ledger | None]:
    """The configured ledger, opened for reading; None when nothing was captured yet."""
    from snapshotd.ledger import ledger_exists, open_ledger

    if not ledger_exists(home):
        yield None
        return
    ledger = open_ledger(home)
    try:
        yield ledger
    finally:
        ledger.close()


def _damaged(run_gaps: list[dict]) -> list[dict]:
    """The run's attempts found damaged (their ``attempt-damaged`` gaps), newest record each."""
    out: dict[tuple, dict] = {}
    for gap in run_gaps:
        if gap.get("reason") == ATTEMPT_DAMAGED:
            key = (gap.get("node_id"), gap.get("iteration"), gap.get("attempt"))
            out[key] = {"node_id": key[0], "iteration": key[1], "attempt": key[2],
                        "detail": gap.get("detail"), "ts": gap.get("ts")}
    return list(out.values())


def _run_gaps(ledger: Ledger, gaps: GapSpool, run_id: str, node_id: str | None,
              attempt: int | None) -> list[dict]:
    """The run's gaps (of a node, an attempt number) in spool order, each marked resolved."""
    covered = ledger.tool_use_ids(run_id)
    gap_rows = []
    for gap in gaps.for_run(run_id):
        if node_id is not None and gap.get("node_id") != node_id:
            continue
        if attempt is not None and gap.get("attempt") not in (None, attempt):
            continue
        gap = dict(gap)
        gap["resolved"] = bool(gap.get("tool_use_id")) and gap["tool_use_id"] in covered
        gap_rows.append(gap)
    return gap_rows


def _mark_resolved(gaps: list[dict], ledger: Ledger | None) -> list[dict]:
    covered: dict[str, set[str]] = {}
    rows = []
    for gap in gaps:
        gap = dict(gap)
        run = gap.get("run_id")
        tool = gap.get("tool_use_id")
        resolved = False
        if ledger is not None and isinstance(run, str) and tool:
            if run not in covered:
                covered[run] = ledger.tool_use_ids(run)
            resolved = tool in covered[run]
        gap["resolved"] = resolved
        rows.append(gap)
    return rows
