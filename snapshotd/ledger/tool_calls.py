"""The ledger's tool calls: which checkpoint holds each tool call's state, how it ended, and
which checkpoints it owns (issue 43, docs/review.md "Who changed what").

Owns the ``tool_calls`` rows (one per id a call's payload carries: its own and its aliases) and
the ``owner``/``owner_how`` columns of checkpoints, as a mixin of ``Ledger``. Promises: a tool
call's row keeps its label, start time and kind (a deduplicated call is listed by them); a
checkpoint's owner is set once (``set_owner`` never moves a checkpoint from one call to
another) and only on a tier-2 checkpoint the call did not capture itself; snapshotd's own
events (``kind`` "restore", "revert", "purge") are rows here too, so a restore whose checkpoints
deduplicate is still listed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from snapshotd.core import check_fault
from snapshotd.ledger.base import (
    ALIAS_STEP,
    TOOL_CALL_INSERT,
    Attempt,
    Tx,
    outcome_of,
    run_filter,
    tool_ids,
)
from snapshotd.ledger.cache import TOOL_CALLS_KEPT, ReadCache

# How a checkpoint came to be owned by a tool call it was not the capture of.
IN_FLIGHT = "in-flight"  # taken between the call's start event and its end
INFERRED = "inferred"  # no start event: the session was working and the call's end came next
OWNER_HOWS = (IN_FLIGHT, INFERRED)


class ToolCallRows:
    """``Ledger``'s tool-call methods. What the mixin needs of its host, ``Ledger``, is
    declared here (annotations only: the host defines them)."""

    _cache: ReadCache
    _one: Callable[[str, Any], Any]
    _all: Callable[[str, Any], list]
    _write: Callable[..., AbstractContextManager[Tx]]
    _cached: Callable[[str, Any, Callable[[], Any]], Any]

    def tool_call(self, attempt_pk: int, tool_use_id: str) -> dict | None:
        """The checkpoint a tool call of the attempt maps to, or None (for a new one, nearly
        every one, the cached set of the attempt's recorded tool calls answers)."""
        if self._cache.enabled:
            known: set[str] | None = self._cached("tool_calls", attempt_pk,
                                                  lambda: self._tool_use_ids_of(attempt_pk))
            if known is not None and tool_use_id not in known:
                return None
        row = self._one(
            "SELECT t.seq, t.deduped, t.outcome, c.commit_id, c.tree FROM tool_calls t"
            " JOIN checkpoints c ON c.attempt_pk = t.attempt_pk AND c.seq = t.seq"
            " WHERE t.attempt_pk=? AND t.tool_use_id=?", (attempt_pk, tool_use_id))
        if row is None:
            return None
        return {"seq": row["seq"], "commit": row["commit_id"], "tree": row["tree"],
                **outcome_of(row["outcome"])}

    def record_tool_call(self, attempt: Attempt, tool_use_id: str, seq: int,
                         outcome: str | None = None, aliases: list[str] | None = None, *,
                         label: str | None = None, started_at: float | None = None,
                         kind: str | None = None) -> None:
        """A deduplicated capture (or one of snapshotd's own events, ``kind``) still maps its
        tool call (each of its ids, its label, start and how it ended: ``outcome``, JSON) to
        the seq that holds its state."""
        ids = tool_ids(tool_use_id, aliases)
        with self._write(keeps_cache=True, on_end=lambda committed: self._cache.
                         tool_calls_recorded(attempt.pk, ids, committed)) as db:
            check_fault("ledger")
            now = time.time()
            for i, tool_id in enumerate(ids):  # ALIAS_STEP apart, its own id first
                db.execute(TOOL_CALL_INSERT, (attempt.pk, tool_id, seq, 1, now + i * ALIAS_STEP,
                                              outcome, label, started_at, kind))

    def tool_calls(self, run_id: str, node_id: str | None = None,
                   attempt: int | None = None) -> list[dict]:
        """Every tool call row of a run (of one node, one attempt number), by attempt and
        creation: the attempt's key, ``tool_use_id``, ``seq``, ``deduped``, ``created_at``,
        ``label``, ``started_at``, ``kind`` and the outcome's fields. A call with aliases has
        one row per id, all with the same seq and creation time."""
        where, args = run_filter(run_id, node_id, attempt)
        where = " AND ".join(f"a.{part.strip()}" for part in where.split(" AND "))
        rows = self._all(
            "SELECT a.run_id, a.node_id, a.iteration, a.attempt, t.tool_use_id, t.seq,"
            " t.deduped, t.created_at, t.label, t.started_at, t.kind, t.outcome"
            f" FROM tool_calls t JOIN attempts a ON a.pk = t.attempt_pk WHERE {where}"
            " ORDER BY a.pk, t.created_at, t.seq", args)
        return [{"run_id": r["run_id"], "node_id": r["node_id"], "iteration": r["iteration"],
                 "attempt": r["attempt"], "tool_use_id": r["tool_use_id"], "seq": r["seq"],
                 "deduped": bool(r["deduped"]), "created_at": r["created_at"],
                 "label": r["label"], "started_at": r["started_at"], "kind": r["kind"],
                 **outcome_of(r["outcome"])} for r in rows]

    def set_owner(self, attempt: Attempt, seqs: list[int], owner: str, how: str) -> int:
        """Give the attempt's tier-2 checkpoints ``seqs`` that have no owner yet to the tool
        call ``owner`` (``how``: ``IN_FLIGHT`` or ``INFERRED``); how many it gave."""
        if how not in OWNER_HOWS:
            raise ValueError(f"owner_how {how!r} is not one of {OWNER_HOWS}")
        if not seqs:
            return 0
        marks = ",".join("?" * len(seqs))
        # The cached newest checkpoint may be one of them: drop it (read again next time).
        with self._write(keeps_cache=True, on_end=lambda committed: self._cache.put(
                "last_checkpoints", attempt.pk, None, keep=False)) as db:
            check_fault("ledger")
            cur = db.execute(
                f"UPDATE checkpoints SET owner=?, owner_how=? WHERE attempt_pk=? AND tier=2"
                f" AND owner IS NULL AND seq IN ({marks})", (owner, how, attempt.pk, *seqs))
            return int(cur.rowcount or 0)

    def tool_use_ids(self, run_id: str) -> set[str]:
        rows = self._all(
            "SELECT t.tool_use_id FROM tool_calls t JOIN attempts a ON a.pk = t.attempt_pk"
            " WHERE a.run_id=?", (run_id,))
        return {r["tool_use_id"] for r in rows}

    def covered_tool_calls(self) -> set[tuple[str, str]]:
        """Every (run, tool_use_id) that maps to a checkpoint."""
        rows = self._all("SELECT a.run_id AS run_id, t.tool_use_id AS tool_use_id FROM"
                         " tool_calls t JOIN attempts a ON a.pk = t.attempt_pk")
        return {(r["run_id"], r["tool_use_id"]) for r in rows}

    def checkpoint_owners(self, run_id: str, node_id: str | None = None,
                          attempt: int | None = None) -> dict[str, list[dict]]:
        """What coverage needs of a run's checkpoints, added up in SQL (no row is read
        whole): ``owners``, each attempt's distinct (``owner``, ``owner_how``), and
        ``outside``, each attempt's count (``n``) of tier-2 or ``outside`` checkpoints with
        neither a tool call id nor an owner."""
        where, args = run_filter(run_id, node_id, attempt)
        owners = self._all(
            "SELECT node_id, iteration, attempt, owner, owner_how FROM checkpoints"
            f" WHERE {where} AND owner IS NOT NULL"
            " GROUP BY node_id, iteration, attempt, owner, owner_how", args)
        outside = self._all(
            "SELECT node_id, iteration, attempt, COUNT(*) AS n FROM checkpoints"
            f" WHERE {where} AND owner IS NULL AND (tool_use_id IS NULL OR tool_use_id = '')"
            " AND (tier = 2 OR source = 'outside') GROUP BY node_id, iteration, attempt", args)
        keys = ("node_id", "iteration", "attempt")
        return {"owners": [{k: r[k] for k in (*keys, "owner", "owner_how")} for r in owners],
                "outside": [{**{k: r[k] for k in keys}, "n": int(r["n"])} for r in outside]}

    def _tool_use_ids_of(self, attempt_pk: int) -> set[str] | None:
        """The attempt's recorded tool use ids, or None when there are more than the cache
        keeps (``TOOL_CALLS_KEPT``: memory bounded by what is active, not by history)."""
        rows = self._all("SELECT tool_use_id FROM tool_calls WHERE attempt_pk=? LIMIT ?",
                         (attempt_pk, TOOL_CALLS_KEPT + 1))
        return {r["tool_use_id"] for r in rows} if len(rows) <= TOOL_CALLS_KEPT else None
