"""The ledger: rows for worktrees, attempts, checkpoints and tool calls, on SQLite or PostgreSQL.

Owns ``<home>/snapshotd.db`` (SQLite, WAL: the default) or, for a ``postgresql://``
``ledger_url``, the snapshotd tables there (psycopg 3), which daemons on several hosts may share.
``open_ledger(home, config)`` picks the backend (``Ledger(path)`` is SQLite, ``Ledger(url=...)``
either); the SQL is written here once, ``sqlite`` and ``postgres`` run it, ``schema`` holds it.
Promises (both backends; how each is kept: docs/durability.md, "The ledger's promises"):
``seq`` is per attempt, from 0, strictly increasing, never reused (two daemons recording one
attempt serialize and the later is refused, never renumbered; a crash between ref and row cannot
renumber); ``(attempt, tool_use_id)`` is unique (a repeat maps to its seq, another daemon's is
``DuplicateToolCall``); epoch bumps are row-locked; one schema version sequence, the same
migrations on both dialects; a database failure leaves only as ``LedgerError``
(``LedgerUnavailable`` when unreachable) with the driver's error as ``__cause__``; what is
absorbed is logged at warning and counted in ``counters()``; reads from memory (SQLite) are
never older than the last commit before the read (or its request) began.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snapshotd.core import AttemptKey, check_fault, redact_url
from snapshotd.ledger.base import (  # noqa: F401  (the ledger's vocabulary, re-exported)
    ACTIVE,
    ALIAS_STEP,
    ENDED_STATES,
    TOOL_CALL_INSERT,
    Attempt,
    DuplicateToolCall,
    LedgerBackend,
    LedgerDamaged,
    LedgerError,
    LedgerUnavailable,
    SeqConflict,
    Tx,
    attempt_from_row,
    checkpoint_from_row,
    damaged_message,
    outcome_of,
    run_filter,
    tool_ids,
)
from snapshotd.ledger.cache import ReadCache
from snapshotd.ledger.postgres import PostgresBackend
from snapshotd.ledger.schema import SCHEMA_VERSION, migration_sql
from snapshotd.ledger.sqlite import SqliteBackend, refuse_emptied, sqlite_path, sqlite_size
from snapshotd.ledger.tool_calls import ToolCallRows
from snapshotd.ledger.turns import TurnRows

if TYPE_CHECKING:
    from snapshotd.core import Config

__all__ = [
    "ACTIVE", "ENDED_STATES", "POSTGRES_SCHEMES", "SCHEMA_VERSION", "SQLITE_FILE", "Attempt",
    "DuplicateToolCall", "Ledger", "LedgerDamaged", "LedgerError", "LedgerUnavailable", "SeqConflict",
    "describe_ledger", "ledger_exists", "ledger_url", "migration_sql", "open_ledger",
]

log = logging.getLogger("snapshotd.ledger")

SQLITE_FILE = "snapshotd.db"
POSTGRES_SCHEMES = ("postgresql", "postgres")


# -- choosing the backend ------------------------------------------------------------------------


def open_ledger(home: Path, config: Config | None = None) -> Ledger:
    """The ledger the configuration names: ``ledger_url`` or ``<home>/snapshotd.db``.

    ``config`` defaults to the effective configuration (file < environment), so read-side
    commands see the same ledger as the daemon without being told.
    """
    url = ledger_url(home, config)
    if _scheme(url) == "sqlite":
        refuse_emptied(home, sqlite_path(url))
    return Ledger(url=url)


def ledger_url(home: Path, config: Config | None = None) -> str:
    """The configured ledger as a URL (``sqlite:///…`` for the embedded default)."""
    if config is None:
        from snapshotd.core import load_config

        config = load_config()
    url = getattr(config, "ledger_url", "") or ""
    if not url:
        return "sqlite://" + str((home / SQLITE_FILE).expanduser().absolute())
    return url


def ledger_exists(home: Path, config: Config | None = None) -> bool:
    """Whether there is a ledger to read. A PostgreSQL ledger always "exists": opening it says
    whether it is reachable; a SQLite one exists once something was captured."""
    url = ledger_url(home, config)
    if _scheme(url) in POSTGRES_SCHEMES:
        return True
    return sqlite_path(url).exists()


def describe_ledger(home: Path, config: Config | None = None) -> str:
    """Where the ledger is, for messages: the file, or the URL without its password."""
    url = ledger_url(home, config)
    if _scheme(url) in POSTGRES_SCHEMES:
        return redact_url(url)
    return str(sqlite_path(url))


# -- the ledger ----------------------------------------------------------------------------------


class Ledger(ToolCallRows, TurnRows):
    """Thread-safe access to the ledger (one connection, one lock, short transactions).

    ``Ledger(path)`` opens the SQLite file ``path``; ``Ledger(url=...)`` opens ``sqlite:///…`` or
    ``postgresql://…``. SQL is written once with ``?`` placeholders; the backend adapts it.
    """

    def __init__(self, path: Path | None = None, *, url: str | None = None) -> None:
        if path is None and url is None:
            raise TypeError("Ledger needs a path or a url")
        if path is not None:
            url = "sqlite://" + str(Path(path))
        assert url is not None
        scheme = _scheme(url)
        self._lock = threading.RLock()
        # Stamped on every attempt this handle creates (``Attempt.host``); the daemon sets it.
        self.host: str | None = None
        self.backend: LedgerBackend
        if scheme in POSTGRES_SCHEMES:
            self.path: Path | None = None
            self.backend = PostgresBackend(url)
        elif scheme == "sqlite":
            self.path = sqlite_path(url)
            self.backend = SqliteBackend(self.path)
        else:
            raise LedgerUnavailable(
                f"ledger_url {redact_url(url)!r} is neither postgresql://… nor sqlite:///…")
        self.dialect = self.backend.dialect
        self.location = self.backend.location
        self._size_errors = 0
        # Attempt rows and newest checkpoints answered from memory (SQLite only: see
        # ``snapshotd.ledger.cache`` for when it is emptied).
        self._cache = ReadCache(self.dialect == "sqlite", self.backend.data_version)
        try:
            self._migrate()
        except BaseException:
            self.backend.close()
            raise

    def close(self) -> None:
        with self._lock, self._translated():
            self.backend.close()

    @contextmanager
    def transaction(self, *, pipeline: bool = False) -> Iterator[Tx]:
        """One transaction. ``pipeline``: the statements may be sent without waiting for each
        other's results until one is fetched (PostgreSQL: fewer network round trips; only for
        callers that read no ``rowcount``). It may write any table: the read cache is emptied
        before the ledger's lock is released."""
        with self._write(pipeline=pipeline, keeps_cache=False) as tx:
            yield tx

    def reads_since(self, began_ns: int) -> AbstractContextManager[None]:
        """Within the block, this thread's cached reads need only be as new as ``began_ns``
        (``time.monotonic_ns`` at a request's start): every read of one request shares one
        check for other connections' commits, and many are answered without the ledger's lock
        (``snapshotd.ledger.cache``). Reads are still never older than the request."""
        return self._cache.reads_since(began_ns)

    def set_full_durability(self, full: bool) -> None:
        with self._lock, self._translated():
            self.backend.set_full_durability(full)

    def counters(self) -> dict[str, int]:
        """What the ledger absorbed instead of raising, for ``status``: ``size_errors`` (a size
        it could not read) and the backend's own figures (PostgreSQL: ``reconnects``)."""
        with self._lock:
            return {"size_errors": self._size_errors, **self._cache.counters(),
                    **self.backend.counters()}

    def size_bytes(self) -> int | None:
        """What the ledger occupies: the SQLite file with its WAL and shared-memory files, or
        the PostgreSQL database's ``pg_database_size``. None when it cannot be read now."""
        if self.path is not None:
            return sqlite_size(self.path)
        try:
            row = self._one("SELECT pg_database_size(current_database()) AS bytes")
        except LedgerError as exc:
            # A size is only a figure for status, but a ledger that cannot answer this cannot
            # record checkpoints either: say so rather than show a blank.
            with self._lock:
                self._size_errors += 1
            log.warning("could not read the size of the ledger %s: %s", self.location, exc)
            return None
        return int(row["bytes"]) if row else None

    def schema_version(self) -> int:
        row = self._one("SELECT version FROM schema_version")
        return int(row["version"]) if row else 0

    # -- worktrees -------------------------------------------------------------------------

    def ensure_worktree(self, wt_id: str, path: str) -> None:
        with self._write(keeps_cache=True) as db:  # the worktrees table: nothing cached
            db.execute("INSERT INTO worktrees (id, path, created_at) VALUES (?, ?, ?)"
                       " ON CONFLICT DO NOTHING", (wt_id, path, time.time()))

    def bump_epoch(self, path: str) -> int:
        # The UPDATE takes the row lock: concurrent bumps from several daemons serialize and
        # each reads back its own increment.
        with self._write(keeps_cache=True) as db:  # the worktrees table: nothing cached
            db.execute("UPDATE worktrees SET epoch = epoch + 1 WHERE path = ?", (path,))
            row = db.execute("SELECT epoch FROM worktrees WHERE path = ?", (path,)).fetchone()
            return int(row["epoch"]) if row else 0

    # -- attempts --------------------------------------------------------------------------

    def get_attempt(self, key: AttemptKey) -> Attempt | None:
        def read() -> Attempt | None:
            row = self._one(
                "SELECT * FROM attempts WHERE run_id=? AND node_id=? AND iteration=? AND"
                " attempt=?", (key.run_id, key.node_id, key.iteration, key.attempt))
            return attempt_from_row(row) if row else None

        return self._cached("attempts", key, read)

    def create_attempt(self, key: AttemptKey, worktree: str, *, state: str = ACTIVE,
                       epoch: int = 0, owner_pid: int | None = None, zero_setup: bool = False,
                       settle_ms: int | None = None, max_wait_ms: int | None = None) -> Attempt:
        with self.transaction() as db:
            db.execute(
                "INSERT INTO attempts (run_id, node_id, iteration, attempt, worktree,"
                " state, epoch, owner_pid, zero_setup, settle_ms, max_wait_ms, started_at, host)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                (key.run_id, key.node_id, key.iteration, key.attempt, worktree, state, epoch,
                 owner_pid, int(zero_setup), settle_ms, max_wait_ms, time.time(), self.host))
        attempt = self.get_attempt(key)
        assert attempt is not None
        return attempt

    def set_attempt_state(self, key: AttemptKey, state: str, *, final_commit: str | None = None,
                          ended: bool = False) -> None:
        # Two statements rather than ``CASE WHEN ?``: PostgreSQL will not take an integer
        # parameter as a boolean.
        # An ended attempt is no longer idle: it no longer works at all.
        ended_sql = ", ended_at=?, idle_since=NULL" if ended else ""
        args: list = [state, final_commit] + ([time.time()] if ended else [])
        with self.transaction() as db:
            db.execute(
                f"UPDATE attempts SET state=?, final_commit=COALESCE(?, final_commit){ended_sql}"
                " WHERE run_id=? AND node_id=? AND iteration=? AND attempt=?",
                (*args, key.run_id, key.node_id, key.iteration, key.attempt))

    def set_attempt_idle(self, key: AttemptKey, idle: bool) -> bool:
        """Mark an active attempt idle (its agent waits for its user; the first moment is kept)
        or working again. Returns False when no active attempt has that key."""
        with self.transaction() as db:
            cur = db.execute(
                f"UPDATE attempts SET idle_since={'COALESCE(idle_since, ?)' if idle else '?'}"
                " WHERE run_id=? AND node_id=? AND iteration=? AND attempt=? AND state=?",
                (time.time() if idle else None, key.run_id, key.node_id, key.iteration,
                 key.attempt, ACTIVE))
            return cur.rowcount > 0

    def active_attempts(self, worktree: str | None = None) -> list[Attempt]:
        """The active attempts (on ``worktree`` only, when given), oldest first."""
        def read() -> list[Attempt]:
            rows = self._all("SELECT * FROM attempts WHERE state = ? ORDER BY pk", [ACTIVE])
            return [attempt_from_row(r) for r in rows]

        active: list[Attempt] = self._cached("active", None, read)
        if worktree is None:
            return list(active)
        return [a for a in active if a.worktree == worktree]

    def attempts(self, run_id: str | None = None) -> list[Attempt]:
        if run_id is None:
            rows = self._all("SELECT * FROM attempts ORDER BY pk")
        else:
            rows = self._all("SELECT * FROM attempts WHERE run_id=? ORDER BY pk", (run_id,))
        return [attempt_from_row(r) for r in rows]

    def last_attempt_number(self, run_id: str, node_id: str, iteration: int) -> int:
        def read() -> int:
            row = self._one("SELECT MAX(attempt) AS a FROM attempts WHERE run_id=? AND"
                            " node_id=? AND iteration=?", (run_id, node_id, iteration))
            return int(row["a"]) if row and row["a"] is not None else 0

        return self._cached("last_numbers", (run_id, node_id, iteration), read)

    def run_ids(self) -> list[str]:
        rows = self._all(
            "SELECT run_id, MAX(started_at) AS t FROM attempts GROUP BY run_id ORDER BY t")
        return [r["run_id"] for r in rows]

    # -- checkpoints -----------------------------------------------------------------------

    def last_checkpoint(self, attempt_pk: int) -> dict | None:
        """The attempt's newest checkpoint that was not pruned (a copy the caller may keep)."""
        def read() -> dict | None:
            row = self._one(
                "SELECT * FROM checkpoints WHERE attempt_pk=? AND pruned_at IS NULL"
                " ORDER BY seq DESC LIMIT 1", (attempt_pk,))
            return checkpoint_from_row(row) if row else None

        found = self._cached("last_checkpoints", attempt_pk, read)
        return dict(found) if found is not None else None

    def record_checkpoint(self, attempt: Attempt, row: dict) -> None:
        """Insert one checkpoint row (and its tool call) in one transaction.

        Raises ``SeqConflict`` when ``row["seq"]`` is not after the attempt's last seq and
        ``DuplicateToolCall`` when its tool call already has a checkpoint; both are decided under
        the attempt's row lock, so racing daemons cannot both pass.
        """
        tool_use_id = row.get("tool_use_id")
        row = {**row, "created_at": row.get("created_at", time.time())}
        # Pipelined: BEGIN, the lock and the checks travel together, then the inserts and COMMIT
        # (two round trips to PostgreSQL instead of seven). The checks are a statement after
        # the lock, so under READ COMMITTED they see every competitor that committed before it.
        # The attempt's cached newest checkpoint becomes this row once it is committed, and
        # its tool call a known one; any failure drops both (``ReadCache.checkpoint_recorded``).
        with self._write(pipeline=True, keeps_cache=True, on_end=lambda committed:
                         self._cache.checkpoint_recorded(attempt, row, committed)) as db:
            check_fault("ledger")
            db.lock_attempt(attempt.pk)
            found = db.execute(
                "SELECT (SELECT MAX(seq) FROM checkpoints WHERE attempt_pk=?) AS s,"
                " (SELECT seq FROM tool_calls WHERE attempt_pk=? AND tool_use_id=?) AS t",
                (attempt.pk, attempt.pk, tool_use_id)).fetchone()
            last = found["s"]
            # The tool call first: a racing daemon that recorded it also took the seq.
            if tool_use_id and found["t"] is not None:
                raise DuplicateToolCall(tool_use_id, int(found["t"]))
            if last is not None and row["seq"] <= last:
                raise SeqConflict(f"seq {row['seq']} is not after the attempt's last seq {last}")
            db.execute(
                "INSERT INTO checkpoints (attempt_pk, run_id, node_id, iteration, attempt, seq,"
                " commit_id, tree, parent, source, tier, label, tool_use_id, worktree, added,"
                " modified, deleted, skipped, created_at, secrets, outcome, owner, owner_how)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (attempt.pk, attempt.key.run_id, attempt.key.node_id, attempt.key.iteration,
                 attempt.key.attempt, row["seq"], row["commit"], row["tree"], row.get("parent"),
                 row["source"], row["tier"], row.get("label"), tool_use_id,
                 row["worktree"], row.get("added", 0), row.get("modified", 0),
                 row.get("deleted", 0), row.get("skipped"), row["created_at"],
                 row.get("secrets"), row.get("outcome"), row.get("owner"),
                 row.get("owner_how")))
            now = time.time()
            for i, tool_id in enumerate(tool_ids(tool_use_id, row.get("tool_aliases"))):
                # Aliases: one row each, ALIAS_STEP apart after its own id (read in order).
                db.execute(TOOL_CALL_INSERT, (attempt.pk, tool_id, row["seq"], 0,
                                               now + i * ALIAS_STEP,
                                               row.get("outcome"), row.get("label"),
                                               row.get("started_at"), None))

    def checkpoints(self, run_id: str, node_id: str | None = None,
                    attempt: int | None = None, *, offset: int = 0,
                    limit: int | None = None) -> list[dict]:
        """A run's rows (of one node, one attempt number) by attempt and seq; ``offset`` and
        ``limit`` select a page of that order."""
        where, args = run_filter(run_id, node_id, attempt)
        sql = f"SELECT * FROM checkpoints WHERE {where} ORDER BY attempt_pk, seq"
        if limit is not None or offset:
            sql += " LIMIT ? OFFSET ?"
            args += [limit if limit is not None else -1 if self.dialect == "sqlite" else None,
                     offset]
        return [checkpoint_from_row(r) for r in self._all(sql, args)]

    def count_checkpoints(self, run_id: str, node_id: str | None = None,
                          attempt: int | None = None) -> int:
        """How many rows ``checkpoints`` lists with the same filters and no page."""
        where, args = run_filter(run_id, node_id, attempt)
        row = self._one(f"SELECT COUNT(*) AS n FROM checkpoints WHERE {where}", args)
        return int(row["n"]) if row else 0

    def seqs(self, attempt_pk: int) -> set[int]:
        rows = self._all("SELECT seq FROM checkpoints WHERE attempt_pk=?", (attempt_pk,))
        return {r["seq"] for r in rows}

    def attempt_checkpoints(self, attempt_pk: int) -> list[dict]:
        """Every row of one attempt (pruned ones too), by seq."""
        rows = self._all("SELECT * FROM checkpoints WHERE attempt_pk=? ORDER BY seq",
                         (attempt_pk,))
        return [checkpoint_from_row(r) for r in rows]

    def apply_prune(self, attempt: Attempt, pruned: list[int], remap: dict[int, tuple[str, str | None]],
                    reason: str, final_commit: str | None) -> None:
        """Mark seqs pruned and move kept rows to their rewritten commits, in one transaction."""
        now = time.time()
        with self.transaction() as db:
            check_fault("ledger")
            db.lock_attempt(attempt.pk)
            for seq in pruned:
                db.execute("UPDATE checkpoints SET pruned_at=COALESCE(pruned_at, ?), pruned_reason="
                           "COALESCE(pruned_reason, ?) WHERE attempt_pk=? AND seq=?",
                           (now, reason, attempt.pk, seq))
            for seq, (commit, parent) in remap.items():
                db.execute("UPDATE checkpoints SET commit_id=?, parent=? WHERE attempt_pk=? AND seq=?",
                           (commit, parent, attempt.pk, seq))
            if final_commit is not None:
                db.execute("UPDATE attempts SET final_commit=? WHERE pk=?", (final_commit, attempt.pk))

    def drop_checkpoints(self, attempt: Attempt, seqs: list[int]) -> None:
        """Delete the rows (and their tool calls) of ``seqs``: checkpoints whose commits a power
        cut took from the store. Their seqs stay used (``snapshotd.service.seqmarks``)."""
        with self.transaction() as db:
            check_fault("ledger")
            db.lock_attempt(attempt.pk)
            for seq in seqs:
                db.execute("DELETE FROM tool_calls WHERE attempt_pk=? AND seq=?",
                           (attempt.pk, seq))
                db.execute("DELETE FROM checkpoints WHERE attempt_pk=? AND seq=?",
                           (attempt.pk, seq))

    def apply_purge(self, attempt: Attempt, remap: dict[int, tuple], final_commit: str | None
                    ) -> None:
        """Move rows to the commits and trees of a chain rewritten without a path, in one
        transaction: ``remap`` is ``{seq: (commit, parent, tree)}``, or with the row's new
        ``secrets`` (JSON text or None), ``added``, ``modified`` and ``deleted`` after them."""
        with self.transaction() as db:
            check_fault("ledger")
            db.lock_attempt(attempt.pk)
            for seq, (commit, parent, tree, *marks) in remap.items():
                db.execute("UPDATE checkpoints SET commit_id=?, parent=?, tree=? WHERE attempt_pk=?"
                           " AND seq=?", (commit, parent, tree, attempt.pk, seq))
                if len(marks) == 4:  # a journal written before a purge also set these
                    db.execute("UPDATE checkpoints SET secrets=?, added=?, modified=?, deleted=?"
                               " WHERE attempt_pk=? AND seq=?", (*marks, attempt.pk, seq))
            if final_commit is not None:
                db.execute("UPDATE attempts SET final_commit=? WHERE pk=?", (final_commit, attempt.pk))

    def delete_run(self, run_id: str) -> int:
        """Remove a run's attempts, checkpoints, tool calls and turns; returns the checkpoints removed."""
        with self.transaction() as db:
            check_fault("ledger")
            pks = [r["pk"] for r in db.execute("SELECT pk FROM attempts WHERE run_id=?",
                                               (run_id,)).fetchall()]
            removed = 0
            for pk in pks:
                db.lock_attempt(pk)
                removed += db.execute("DELETE FROM checkpoints WHERE attempt_pk=?", (pk,)).rowcount
                db.execute("DELETE FROM tool_calls WHERE attempt_pk=?", (pk,))
                db.execute("DELETE FROM turns WHERE attempt_pk=?", (pk,))
                db.execute("DELETE FROM attempts WHERE pk=?", (pk,))
            return removed

    def run_activity(self) -> list[dict]:
        """Per run: last activity and whether any attempt is still active."""
        rows = self._all(
            "SELECT a.run_id AS run_id, MAX(COALESCE(c.created_at, a.started_at)) AS last,"
            " SUM(CASE WHEN a.state = 'active' THEN 1 ELSE 0 END) AS active FROM attempts a"
            " LEFT JOIN checkpoints c ON c.attempt_pk = a.pk GROUP BY a.run_id ORDER BY last")
        return [{"run_id": r["run_id"], "last_activity": r["last"], "active": bool(r["active"])}
                for r in rows]

    def counts(self) -> dict:
        row = self._one(
            "SELECT COUNT(*) AS n, SUM(CASE WHEN tier=1 THEN 1 ELSE 0 END) AS t1,"
            " SUM(CASE WHEN tier=2 THEN 1 ELSE 0 END) AS t2 FROM checkpoints")
        assert row is not None
        return {"checkpoints": int(row["n"] or 0), "tier1": int(row["t1"] or 0),
                "tier2": int(row["t2"] or 0)}

    def checkpoint_stats(self) -> dict[str, tuple[int, float | None]]:
        """Checkpoint count and newest time per run, in one aggregate query."""
        rows = self._all("SELECT run_id, COUNT(*) AS n, MAX(created_at) AS t FROM checkpoints"
                         " GROUP BY run_id")
        return {r["run_id"]: (int(r["n"]), r["t"]) for r in rows}

    # -- helpers ---------------------------------------------------------------------------

    @contextmanager
    def _write(self, *, pipeline: bool = False, keeps_cache: bool,
               on_end: Callable[[bool], None] | None = None) -> Iterator[Tx]:
        """A transaction, and the read cache brought level with it before the lock is
        released: emptied unless ``keeps_cache`` (the statements touch nothing cached, or
        only what ``on_end``, told whether the transaction committed, updates)."""
        with self._lock:
            committed = False
            try:
                with self._translated(), self.backend.transaction(pipeline=pipeline) as tx:
                    # Other threads' cached reads are answered without the lock until the
                    # block ends, before the backend's COMMIT (``ReadCache.window``).
                    with self._cache.window(time.monotonic_ns()):
                        yield tx
                committed = True
            finally:
                if not keeps_cache:
                    self._cache.clear()
                elif on_end is not None and self._cache.enabled:
                    on_end(committed)

    def _cached(self, table: str, key: Any, read: Callable[[], Any]) -> Any:
        """``read()``'s answer, from the read cache when it holds one that is still valid."""
        called = self._cache.called_ns()
        answered, value = self._cache.unlocked(table, key, called)
        if answered:
            return value
        with self._lock:
            with self._translated():
                usable = self._cache.usable(called)
            if not usable:
                return read()
            return self._cache.fetch(table, key, read)

    def _one(self, sql: str, args: Any = ()) -> Any:
        with self._lock, self._translated():
            return self.backend.read(sql, args, one=True)

    def _all(self, sql: str, args: Any = ()) -> list:
        with self._lock, self._translated():
            return self.backend.read(sql, args, one=False)

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """Every driver error leaving the block becomes the backend's ``LedgerError``, and so
        does an ``OSError`` (the ledger's own files failing, or the ``ledger`` fault seam)."""
        try:
            yield
        except LedgerError:
            raise
        except Exception as exc:
            wrapped = self.backend.translate(exc)
            if wrapped is None and isinstance(exc, OSError):
                wrapped = LedgerError(f"ledger {self.location}: {type(exc).__name__}: {exc}")
            if wrapped is None:
                raise
            raise wrapped from exc

    def _migrate(self) -> None:
        with self.transaction() as db:
            db.migration_lock()
            db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = db.execute("SELECT version FROM schema_version").fetchone()
            current = int(row["version"]) if row else 0
            if current > SCHEMA_VERSION:
                raise LedgerError(
                    f"ledger {self.location} has schema {current}, newer than this snapshotd "
                    f"({SCHEMA_VERSION}); upgrade snapshotd")
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in migration_sql(version, self.dialect):
                    db.execute(statement)
            if row is None:
                db.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
            elif current != SCHEMA_VERSION:
                db.execute("UPDATE schema_version SET version=?", (SCHEMA_VERSION,))


def _scheme(url: str) -> str:
    return url.split(":", 1)[0].lower() if ":" in url else ""
