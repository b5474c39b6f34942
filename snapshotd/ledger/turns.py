"""The ledger's turns: each prompt of an agent session's attempt, numbered 1, 2, 3, ...
(issue 44, docs/review.md "Turns").

Owns the ``turns`` rows, as a mixin of ``Ledger``. Promises: a turn's number is the attempt's
next one, allocated in the transaction that writes the row (two prompts never share a number);
a row is never edited once written; its text is whatever the caller gives (the ``session`` op
redacts and caps it, or leaves it out with ``record_prompts = false``); the ledger is local
state, never written into the store, so nothing here reaches a commit or a push.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from snapshotd.core import check_fault
from snapshotd.ledger.base import Attempt, Tx, run_filter

TURN_FIELDS = ("turn", "started_at", "first_line", "transcript_path", "transcript_pos",
               "agent_turn_id", "agent_session")


class TurnRows:
    """``Ledger``'s turn methods. What the mixin needs of its host, ``Ledger``, is declared
    here (annotations only: the host defines them)."""

    _all: Callable[[str, Any], list]
    _write: Callable[..., AbstractContextManager[Tx]]

    def record_turn(self, attempt: Attempt, started_at: float, *, first_line: str | None = None,
                    transcript_path: str | None = None, transcript_pos: int | None = None,
                    agent_turn_id: str | None = None, agent_session: str | None = None) -> int:
        """Record the attempt's next turn (a prompt submitted at ``started_at``); its number."""
        with self._write(keeps_cache=True) as db:
            check_fault("ledger")
            db.lock_attempt(attempt.pk)
            row = db.execute("SELECT MAX(turn) AS n FROM turns WHERE attempt_pk=?",
                             (attempt.pk,)).fetchone()
            turn = int((row["n"] if row is not None else None) or 0) + 1
            db.execute(
                "INSERT INTO turns (attempt_pk, turn, started_at, first_line, transcript_path,"
                " transcript_pos, agent_turn_id, agent_session) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (attempt.pk, turn, started_at, first_line, transcript_path, transcript_pos,
                 agent_turn_id, agent_session))
            return turn

    def turns(self, run_id: str, node_id: str | None = None,
              attempt: int | None = None) -> list[dict]:
        """Every turn row of a run (of one node, one attempt number), by attempt and number:
        the attempt's key fields and ``TURN_FIELDS``."""
        where, args = run_filter(run_id, node_id, attempt)
        where = " AND ".join(f"a.{part.strip()}" for part in where.split(" AND "))
        rows = self._all(
            "SELECT a.run_id, a.node_id, a.iteration, a.attempt, t.turn, t.started_at,"
            " t.first_line, t.transcript_path, t.transcript_pos, t.agent_turn_id,"
            " t.agent_session FROM turns t JOIN attempts a ON a.pk = t.attempt_pk"
            f" WHERE {where} ORDER BY a.pk, t.turn", args)
        keys = ("run_id", "node_id", "iteration", "attempt", *TURN_FIELDS)
        return [{k: r[k] for k in keys} for r in rows]
