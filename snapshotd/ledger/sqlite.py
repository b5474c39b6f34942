"""The embedded ledger backend: one SQLite file in WAL mode (``<home>/snapshotd.db``).

Owns the SQLite connection, its pragmas (WAL; ``synchronous`` NORMAL, or FULL for ``durability =
"full"``; foreign keys), its transactions, its ``data_version`` (which the ledger's read cache
checks), its size on disk (``sqlite_size``) and the refusal to open an emptied file
(``refuse_emptied``).

Promises: ``BEGIN IMMEDIATE`` takes the database's write lock, which already serializes every
writer (one daemon per home), so the per-row locks of the interface are no-ops here. A file that
cannot be opened as a SQLite database raises ``LedgerUnavailable``; a file SQLite finds damaged
(malformed pages, not a database) raises ``LedgerDamaged`` naming the file and ``snapshotd
repair``, on open or on any later statement; every other ``sqlite3.Error`` is translated to
``LedgerError`` (``translate``).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from snapshotd.core import fsync_path, is_spare
from snapshotd.ledger.base import (
    LedgerBackend,
    LedgerDamaged,
    LedgerError,
    LedgerUnavailable,
    Tx,
    damaged_message,
)

# What SQLite says of a file that is not (or no longer) a whole database.
_DAMAGE_MARKS = ("malformed", "not a database", "file is encrypted")


class SqliteBackend(LedgerBackend):
    dialect = "sqlite"

    def __init__(self, path: Path) -> None:
        self.location = str(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None,
                                       timeout=30.0)
        except (OSError, sqlite3.Error) as exc:
            raise LedgerUnavailable(f"cannot open the SQLite ledger {path}: {exc}") from exc
        try:
            self._db.row_factory = sqlite3.Row
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.execute("PRAGMA foreign_keys=ON")
        except sqlite3.Error as exc:
            self._db.close()
            raise (self.translate(exc) if _is_damage(exc) else
                   LedgerUnavailable(f"cannot open the SQLite ledger {path}: {exc}")) from exc

    @contextmanager
    def transaction(self, *, pipeline: bool = False) -> Iterator[Tx]:
        self._db.execute("BEGIN IMMEDIATE")
        try:
            yield Tx(self._db, self)
        except BaseException:
            self._db.execute("ROLLBACK")
            raise
        else:
            self._db.execute("COMMIT")

    def read(self, sql: str, args: Any, *, one: bool) -> Any:
        cur = self._db.execute(sql, args)
        return cur.fetchone() if one else cur.fetchall()

    def data_version(self) -> int:
        # Changes whenever another connection (the CLI, ``snapshotd repair``, another process)
        # commits to the file; never for this connection's own commits.
        return int(self._db.execute("PRAGMA data_version").fetchone()[0])

    def translate(self, exc: BaseException) -> LedgerError | None:
        if isinstance(exc, sqlite3.Error) and _is_damage(exc):
            return LedgerDamaged(damaged_message(self.location, str(exc)))
        if isinstance(exc, sqlite3.Error):
            return LedgerError(f"SQLite ledger {self.location}: {type(exc).__name__}: {exc}")
        return None

    def set_full_durability(self, full: bool) -> None:
        self._db.execute(f"PRAGMA synchronous={'FULL' if full else 'NORMAL'}")
        if full:
            # SQLite never fsyncs a new database file's directory, nor the file itself before
            # its first checkpoint: a power cut could leave it empty, and SQLite then deletes
            # the WAL holding every commit. Checkpoint, then make the file and its name durable.
            self._db.execute("PRAGMA wal_checkpoint(FULL)")
            path = Path(self.location)
            fsync_path(path)
            fsync_path(path.parent)

    def close(self) -> None:
        self._db.close()


def _is_damage(exc: sqlite3.Error) -> bool:
    return isinstance(exc, sqlite3.DatabaseError) and any(
        mark in str(exc).lower() for mark in _DAMAGE_MARKS)


def refuse_emptied(home: Path, path: Path) -> None:
    """An empty ledger file beside a store that holds attempts was truncated: opening it would
    start a fresh ledger and hide every run's attempt states. ``LedgerDamaged`` then."""
    try:
        if not path.is_file() or path.stat().st_size != 0:
            return
    except OSError:
        return  # a file that cannot be read: opening it fails with its own error
    store = home / "store.git"
    runs = store / "refs" / "snapshotd" / "runs"
    packed = store / "packed-refs"
    has_refs = runs.is_dir() and any(p.is_file() and not is_spare(p.name)
                                     for p in runs.rglob("*"))
    if not has_refs and packed.is_file():
        has_refs = "refs/snapshotd/runs/" in packed.read_text(errors="replace")
    if has_refs:
        raise LedgerDamaged(damaged_message(str(path), "the file is empty but the store holds "
                                                       "checkpoints"))


def sqlite_size(path: Path) -> int:
    """What the SQLite ledger ``path`` occupies with its WAL and shared-memory files."""
    total = 0
    for suffix in ("", "-wal", "-shm"):
        try:
            total += Path(f"{path}{suffix}").stat().st_size
        except OSError:
            pass  # no -wal or -shm file right now: it occupies nothing
    return total


def sqlite_path(url: str) -> Path:
    """The file a ``sqlite://`` (or ``sqlite:///``) ledger URL names."""
    rest = url.split(":", 1)[1]
    if rest.startswith("//"):
        rest = rest[2:]
    return Path(rest).expanduser()
