"""The shared ledger backend: the snapshotd tables in a PostgreSQL database (psycopg 3).

Owns the connection (autocommit outside explicit transactions, ``synchronous_commit`` per the
durability setting), reconnection after a lost connection, the translation of ``?`` placeholders,
the row lock on an attempt and the advisory lock that serializes migrators.

Promises:
- READ COMMITTED with explicit row locks: every transaction that decides from what it read (seq
  after the last one, tool call not yet recorded) first locks the attempt row with
  ``SELECT … FOR UPDATE``, so its reads after the lock see every committed competitor and no
  competitor can commit in between. Primary keys and unique constraints stay as the last line.
- A lost connection fails the call that found it (``LedgerUnavailable``) and is reopened on the
  next call, with a warning in the log and a count in ``counters()["reconnects"]``.
- Every ``psycopg.Error`` is translated to ``LedgerError`` (``translate``): a connection that is
  lost or cannot be made to ``LedgerUnavailable``, a unique violation to "conflicting ledger row".
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from snapshotd.core import redact_url
from snapshotd.ledger.base import LedgerBackend, LedgerError, LedgerUnavailable, Tx

log = logging.getLogger("snapshotd.ledger")

# Any constant works: it only has to be the same for every snapshotd migrating one database.
MIGRATION_LOCK_KEY = 0x736E6170  # "snap"
_PLACEHOLDER = re.compile(r"\?")


class PostgresBackend(LedgerBackend):
    dialect = "postgresql"

    def __init__(self, url: str) -> None:
        self.url = url
        self.location = redact_url(url)
        try:
            import psycopg
            from psycopg.rows import dict_row
        except ModuleNotFoundError as exc:
            raise LedgerUnavailable(
                f"ledger_url {self.location} needs psycopg 3: pip install 'snapshotd[postgres]'"
            ) from exc
        self._psycopg = psycopg
        self._row_factory = dict_row
        self._sql_cache: dict[str, str] = {}
        self._conn: Any = None
        self._synchronous_commit = "off"
        self._reconnects = 0
        self._connect()

    @contextmanager
    def transaction(self, *, pipeline: bool = False) -> Iterator[Tx]:
        conn = self._live()
        if pipeline:
            # Pipelined statements report their errors at the sync, not at execute: the caller's
            # translation sees them when the block ends.
            with conn.pipeline(), conn.transaction():
                yield Tx(conn, self)
        else:
            with conn.transaction():
                yield Tx(conn, self)

    def execute(self, conn: Any, sql: str, args: Any) -> Any:
        return conn.execute(self._sql(sql), args)

    def read(self, sql: str, args: Any, *, one: bool) -> Any:
        cur = self._live().execute(self._sql(sql), args)
        return cur.fetchone() if one else cur.fetchall()

    def lock_attempt(self, tx: Tx, pk: int) -> None:
        tx.execute("SELECT pk FROM attempts WHERE pk=? FOR UPDATE", (pk,))

    def migration_lock(self, tx: Tx) -> None:
        tx.execute("SELECT pg_advisory_xact_lock(?)", (MIGRATION_LOCK_KEY,))

    def translate(self, exc: BaseException) -> LedgerError | None:
        pg = self._psycopg
        if not isinstance(exc, pg.Error):
            return None
        if isinstance(exc, pg.errors.UniqueViolation):
            # The constraint, not the lock, caught a race (e.g. a writer that skipped the lock).
            return LedgerError(f"conflicting ledger row: {exc.diag.message_detail or exc}")
        text = str(exc).strip() or type(exc).__name__
        if isinstance(exc, (pg.OperationalError, pg.InterfaceError)):
            return LedgerUnavailable(f"PostgreSQL ledger {self.location}: {text}")
        return LedgerError(f"PostgreSQL ledger {self.location}: {type(exc).__name__}: {text}")

    def counters(self) -> dict[str, int]:
        return {"reconnects": self._reconnects}

    def set_full_durability(self, full: bool) -> None:
        # The same promise as SQLite's synchronous=NORMAL/FULL. "process": a commit is in the
        # server once acknowledged (it survives the daemon's death) and on disk within
        # 3 × wal_writer_delay; only a crash of the PostgreSQL host inside that window loses
        # the last rows, which the writing daemon re-derives from its store's refs. "full":
        # the commit's WAL is flushed before the reply.
        self._synchronous_commit = "on" if full else "off"
        self._live().execute(f"SET synchronous_commit = {self._synchronous_commit}")

    def close(self) -> None:
        conn, self._conn = self._conn, None  # a later call opens a new one, not a "lost" one
        if conn is not None:
            conn.close()

    # -- helpers ---------------------------------------------------------------------------

    def _connect(self) -> Any:
        psycopg = self._psycopg
        kwargs: dict[str, Any] = {"autocommit": True, "row_factory": self._row_factory,
                                  "application_name": "snapshotd"}
        if "connect_timeout" not in self.url:
            kwargs["connect_timeout"] = 10
        try:
            self._conn = psycopg.connect(self.url, **kwargs)
            self._conn.execute(f"SET synchronous_commit = {self._synchronous_commit}")
        except psycopg.Error as exc:
            raise LedgerUnavailable(
                f"cannot connect to the PostgreSQL ledger {self.location}: "
                f"{str(exc).strip() or type(exc).__name__}") from exc
        return self._conn

    def _live(self) -> Any:
        conn = self._conn
        if conn is None or conn.closed or conn.broken:
            if conn is not None:
                # A lost connection is worth knowing about: a ledger that keeps dropping its
                # connection fails captures (they become gaps) until it is reopened.
                self._reconnects += 1
                log.warning("the connection to the PostgreSQL ledger %s was lost; reconnecting",
                            self.location)
                self._conn = None
                try:
                    conn.close()
                except (self._psycopg.Error, OSError) as exc:
                    log.warning("closing the lost ledger connection failed: %s", exc)
            conn = self._connect()
        return conn

    def _sql(self, sql: str) -> str:
        out = self._sql_cache.get(sql)
        if out is None:
            out = self._sql_cache[sql] = _PLACEHOLDER.sub("%s", sql)
        return out
