"""What the ledger and its backends share: the row types, the error types, the backend interface.

Owns ``Attempt`` (an attempt row), the attempt states, ``LedgerError`` and its subclasses (the only
exceptions a ledger call raises for a database failure: a backend turns its driver's errors into
them through ``LedgerBackend.translate``), and ``LedgerBackend``/``Tx``, the interface each backend
module (``ledger_sqlite``, ``ledger_postgres``) implements. ``snapshotd.ledger.ledger`` re-exports the
public names; callers import them from there.

Promises: ``LedgerBackend.translate`` maps every error of its driver to a ``LedgerError`` (a lost
or unreachable database to ``LedgerUnavailable``), and returns None for anything else, which then
propagates unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from snapshotd.core import AttemptKey

ACTIVE = "active"
ENDED_STATES = ("finished", "failed", "cancelled", "superseded", "abandoned")


@dataclass(frozen=True)
class Attempt:
    """An attempt row as read. Frozen: the ledger hands the same object to every reader of
    its read cache (``snapshotd.ledger.cache``)."""

    pk: int
    key: AttemptKey
    worktree: str
    state: str
    epoch: int
    owner_pid: int | None
    zero_setup: bool
    settle_ms: int | None
    max_wait_ms: int | None
    started_at: float
    ended_at: float | None
    final_commit: str | None
    # When the attempt's agent last ended its turn and began waiting for its user (an agent
    # session's ``Stop``); None while it works. Only an active attempt is ever idle.
    idle_since: float | None = None
    # The host id of the daemon whose worktree and store hold this attempt's work (None: any).
    host: str | None = None

    def elsewhere(self, host: str | None) -> bool:
        """Whether this attempt belongs to another daemon than the one whose host id is
        ``host`` (sharing a PostgreSQL ledger): its worktree path names a directory there."""
        return self.host is not None and host is not None and self.host != host

    @property
    def working(self) -> bool:
        """Active and not waiting for its user: restoring under it would fight its agent."""
        return self.state == ACTIVE and self.idle_since is None

    def as_dict(self) -> dict:
        d = self.key.as_dict()
        d.update(worktree=self.worktree, state=self.state, epoch=self.epoch,
                 owner_pid=self.owner_pid, zero_setup=self.zero_setup, settle_ms=self.settle_ms,
                 max_wait_ms=self.max_wait_ms, started_at=self.started_at,
                 ended_at=self.ended_at, final_commit=self.final_commit,
                 idle_since=self.idle_since)
        return d


class LedgerError(Exception):
    """The ledger could not do what was asked; a database driver's error is its ``__cause__``."""


class LedgerUnavailable(LedgerError):
    """The ledger cannot be opened or reached (no psycopg, PostgreSQL down, bad URL, a SQLite file
    that cannot be opened)."""


class LedgerDamaged(LedgerUnavailable):
    """The ledger's file is damaged (truncated, overwritten, pages that do not parse): its
    message says where it is and how to rebuild it (``snapshotd repair``)."""


def damaged_message(location: str, what: str) -> str:
    """The one sentence for a damaged ledger: what is wrong, where, and what to do."""
    return (f"the ledger {location} is damaged ({what}); stop the daemon if one runs and run "
            "`snapshotd repair` to rebuild it from the store's commits (the damaged file is "
            "kept beside it, renamed)")


class SeqConflict(LedgerError):
    """A checkpoint row whose seq is not after the attempt's last one: another daemon sharing
    the ledger recorded into this attempt first."""


class DuplicateToolCall(LedgerError):
    """A checkpoint for a tool call that already has one in this attempt (another daemon won)."""

    def __init__(self, tool_use_id: str, seq: int) -> None:
        super().__init__(f"tool call {tool_use_id!r} is already recorded at seq {seq}")
        self.tool_use_id = tool_use_id
        self.seq = seq


class Tx:
    """One open transaction: ``execute`` with ``?`` placeholders, plus the dialect's locks."""

    def __init__(self, conn: Any, backend: LedgerBackend) -> None:
        self._conn = conn
        self._backend = backend

    def execute(self, sql: str, args: Any = ()) -> Any:
        return self._backend.execute(self._conn, sql, args)

    def lock_attempt(self, pk: int) -> None:
        self._backend.lock_attempt(self, pk)

    def migration_lock(self) -> None:
        self._backend.migration_lock(self)


class LedgerBackend:
    """One database connection in one dialect. Not thread-safe: ``Ledger`` serializes calls."""

    dialect = ""
    location = ""

    def execute(self, conn: Any, sql: str, args: Any) -> Any:
        return conn.execute(sql, args)

    def lock_attempt(self, tx: Tx, pk: int) -> None:
        """Serialize writers of one attempt until the transaction ends."""

    def migration_lock(self, tx: Tx) -> None:
        """Serialize migrators of one database until the transaction ends."""

    def transaction(self, *, pipeline: bool = False) -> Any:
        raise NotImplementedError

    def read(self, sql: str, args: Any, *, one: bool) -> Any:
        raise NotImplementedError

    def data_version(self) -> int:
        """A number that changes when another connection commits to the database (what lets
        ``snapshotd.ledger.cache`` trust its entries); backends without a cheap one never cache."""
        raise NotImplementedError

    def translate(self, exc: BaseException) -> LedgerError | None:
        """``exc`` as a ``LedgerError`` when it is this backend's driver error, else None."""
        return None

    def counters(self) -> dict[str, int]:
        """Events worth a figure in ``status`` (e.g. reconnections)."""
        return {}

    def set_full_durability(self, full: bool) -> None:
        pass

    def close(self) -> None:
        pass


def attempt_from_row(row: Any) -> Attempt:
    return Attempt(
        pk=row["pk"],
        key=AttemptKey(row["run_id"], row["node_id"], row["iteration"], row["attempt"]),
        worktree=row["worktree"], state=row["state"], epoch=row["epoch"],
        owner_pid=row["owner_pid"], zero_setup=bool(row["zero_setup"]),
        settle_ms=row["settle_ms"], max_wait_ms=row["max_wait_ms"],
        started_at=row["started_at"], ended_at=row["ended_at"],
        final_commit=row["final_commit"], idle_since=row["idle_since"], host=row["host"])


# A tool call's row (schema 6 added ``outcome``, 7 ``label``, ``started_at``, ``kind``): columns
# named, so older rows' order is moot.
TOOL_CALL_INSERT = ("INSERT INTO tool_calls (attempt_pk, tool_use_id, seq, deduped, created_at,"
                    " outcome, label, started_at, kind) VALUES (?,?,?,?,?,?,?,?,?)"
                    " ON CONFLICT DO NOTHING")


# A call's ids are written this many seconds apart, its own id first: ``tool_calls`` reads
# them in that order and a reader groups the rows of one call by it (``service.tool_calls``).
ALIAS_STEP = 1e-6


def tool_ids(tool_use_id: str | None, aliases: list[str] | None) -> list[str]:
    """A tool call's ids, each once: its own, then the others its payload named (issue 43:
    Qwen Code's model call id); a lookup by any of them finds the call (one row each)."""
    found: list[str] = []
    for tool_id in [tool_use_id, *(aliases or ())]:
        if tool_id and tool_id not in found:
            found.append(tool_id)
    return found


def outcome_of(text: str | None) -> dict:
    """A row's ``outcome`` column as listings show it: ``{"failed", "exit_code", "error"}``
    (``failed`` False and the others ``None`` for a call not said to fail; ``None`` also
    where a failed call's payload had none)."""
    try:
        found = json.loads(text) if text else None
    except ValueError:  # a column another tool wrote: shown as no outcome, never a crash
        found = None
    if not isinstance(found, dict) or not found.get("failed"):
        return {"failed": False, "exit_code": None, "error": None}
    return {"failed": True, "exit_code": found.get("exit_code"), "error": found.get("error")}


def checkpoint_from_row(row: Any) -> dict:
    return {
        "run_id": row["run_id"], "node_id": row["node_id"], "iteration": row["iteration"],
        "attempt": row["attempt"], "seq": row["seq"], "commit": row["commit_id"],
        "tree": row["tree"], "parent": row["parent"], "source": row["source"],
        "tier": row["tier"], "label": row["label"], "tool_use_id": row["tool_use_id"],
        "worktree": row["worktree"], "added": row["added"], "modified": row["modified"],
        "deleted": row["deleted"],
        "skipped": json.loads(row["skipped"]) if row["skipped"] else [],
        "created_at": row["created_at"],
        "pruned_at": row["pruned_at"],
        "pruned_reason": row["pruned_reason"],
        "secrets": json.loads(row["secrets"]) if row["secrets"] else [],
        **outcome_of(row["outcome"]),
        "owner": row["owner"], "owner_how": row["owner_how"],
    }


def percentiles(samples: list[float]) -> dict:
    """``{"count", "p50", "p99"}`` of latency samples (``status``)."""
    if not samples:
        return {"count": 0, "p50": None, "p99": None}
    ordered = sorted(samples)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)

    return {"count": len(ordered), "p50": at(0.5), "p99": at(0.99)}


def run_filter(run_id: str, node_id: str | None, attempt: int | None) -> tuple[str, list]:
    """The ``WHERE`` clause and arguments selecting a run's rows (of one node, one attempt
    number)."""
    where = "run_id=?"
    args: list = [run_id]
    if node_id is not None:
        where += " AND node_id=?"
        args.append(node_id)
    if attempt is not None:
        where += " AND attempt=?"
        args.append(attempt)
    return where, args
