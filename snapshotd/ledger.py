"""The ledger: SQLite (WAL) rows for worktrees, attempts, checkpoints and tool calls.

Owns ``<home>/snapshotd.db``.

Promises:
- ``seq`` is per attempt, starts at 0, strictly increasing, never reused: it is recorded in the
  same transaction as the checkpoint row, under ``UNIQUE(attempt, seq)``, and allocation looks at
  both the ledger and the attempt's ref (a crash between ref and row cannot renumber).
- ``(attempt, tool_use_id)`` is unique: a repeated tool call maps to its original seq.
- Each attempt row carries its state, lease epoch and final pointer.
- The schema has a version and migrations from the first release forward.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from snapshotd import faults
from snapshotd.store import AttemptKey

SCHEMA_VERSION = 2

_MIGRATIONS: dict[int, str] = {
    1: """
    CREATE TABLE worktrees (
        id          TEXT PRIMARY KEY,
        path        TEXT NOT NULL UNIQUE,
        epoch       INTEGER NOT NULL DEFAULT 0,
        created_at  REAL NOT NULL
    );
    CREATE TABLE attempts (
        pk            INTEGER PRIMARY KEY,
        run_id        TEXT NOT NULL,
        node_id       TEXT NOT NULL,
        iteration     INTEGER NOT NULL,
        attempt       INTEGER NOT NULL,
        worktree      TEXT NOT NULL,
        state         TEXT NOT NULL,
        epoch         INTEGER NOT NULL DEFAULT 0,
        owner_pid     INTEGER,
        zero_setup    INTEGER NOT NULL DEFAULT 0,
        settle_ms     INTEGER,
        max_wait_ms   INTEGER,
        started_at    REAL NOT NULL,
        ended_at      REAL,
        final_commit  TEXT,
        UNIQUE (run_id, node_id, iteration, attempt)
    );
    CREATE INDEX attempts_worktree ON attempts (worktree, state);
    CREATE TABLE checkpoints (
        attempt_pk   INTEGER NOT NULL REFERENCES attempts (pk),
        run_id       TEXT NOT NULL,
        node_id      TEXT NOT NULL,
        iteration    INTEGER NOT NULL,
        attempt      INTEGER NOT NULL,
        seq          INTEGER NOT NULL,
        commit_id    TEXT NOT NULL,
        tree         TEXT NOT NULL,
        parent       TEXT,
        source       TEXT NOT NULL,
        tier         INTEGER NOT NULL,
        label        TEXT,
        tool_use_id  TEXT,
        worktree     TEXT NOT NULL,
        added        INTEGER NOT NULL DEFAULT 0,
        modified     INTEGER NOT NULL DEFAULT 0,
        deleted      INTEGER NOT NULL DEFAULT 0,
        skipped      TEXT,
        created_at   REAL NOT NULL,
        PRIMARY KEY (attempt_pk, seq)
    );
    CREATE INDEX checkpoints_run ON checkpoints (run_id, node_id);
    CREATE TABLE tool_calls (
        attempt_pk   INTEGER NOT NULL REFERENCES attempts (pk),
        tool_use_id  TEXT NOT NULL,
        seq          INTEGER NOT NULL,
        deduped      INTEGER NOT NULL,
        created_at   REAL NOT NULL,
        PRIMARY KEY (attempt_pk, tool_use_id)
    );
    """,
    # 2: retention. Pruned checkpoints keep their row (shown as pruned, with when and why).
    2: """
    ALTER TABLE checkpoints ADD COLUMN pruned_at REAL;
    ALTER TABLE checkpoints ADD COLUMN pruned_reason TEXT
    """,
}

CHECKPOINT_FIELDS = ("run_id", "node_id", "iteration", "attempt", "seq", "commit", "tree",
                     "parent", "source", "tier", "label", "tool_use_id", "worktree", "added",
                     "modified", "deleted", "skipped", "created_at")

ACTIVE = "active"
ENDED_STATES = ("finished", "failed", "cancelled", "superseded", "abandoned")


@dataclass
class Attempt:
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

    def as_dict(self) -> dict:
        d = self.key.as_dict()
        d.update(worktree=self.worktree, state=self.state, epoch=self.epoch,
                 owner_pid=self.owner_pid, zero_setup=self.zero_setup, settle_ms=self.settle_ms,
                 max_wait_ms=self.max_wait_ms, started_at=self.started_at,
                 ended_at=self.ended_at, final_commit=self.final_commit)
        return d


class LedgerError(Exception):
    pass


class Ledger:
    """Thread-safe access to the SQLite ledger (one connection, one lock, short transactions)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None,
                                   timeout=30.0)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.execute("PRAGMA foreign_keys=ON")
        self._migrate()

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            else:
                self._db.execute("COMMIT")

    def set_full_durability(self, full: bool) -> None:
        with self._lock:
            self._db.execute(f"PRAGMA synchronous={'FULL' if full else 'NORMAL'}")

    # -- worktrees -------------------------------------------------------------------------

    def ensure_worktree(self, wt_id: str, path: str) -> None:
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO worktrees (id, path, created_at) VALUES (?, ?, ?)",
                       (wt_id, path, time.time()))

    def bump_epoch(self, path: str) -> int:
        with self.transaction() as db:
            db.execute("UPDATE worktrees SET epoch = epoch + 1 WHERE path = ?", (path,))
            row = db.execute("SELECT epoch FROM worktrees WHERE path = ?", (path,)).fetchone()
            return int(row["epoch"]) if row else 0

    # -- attempts --------------------------------------------------------------------------

    def get_attempt(self, key: AttemptKey) -> Attempt | None:
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM attempts WHERE run_id=? AND node_id=? AND iteration=? AND attempt=?",
                (key.run_id, key.node_id, key.iteration, key.attempt)).fetchone()
        return _attempt(row) if row else None

    def create_attempt(self, key: AttemptKey, worktree: str, *, state: str = ACTIVE,
                       epoch: int = 0, owner_pid: int | None = None, zero_setup: bool = False,
                       settle_ms: int | None = None, max_wait_ms: int | None = None) -> Attempt:
        with self.transaction() as db:
            db.execute(
                "INSERT OR IGNORE INTO attempts (run_id, node_id, iteration, attempt, worktree,"
                " state, epoch, owner_pid, zero_setup, settle_ms, max_wait_ms, started_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                (key.run_id, key.node_id, key.iteration, key.attempt, worktree, state, epoch,
                 owner_pid, int(zero_setup), settle_ms, max_wait_ms, time.time()))
        attempt = self.get_attempt(key)
        assert attempt is not None
        return attempt

    def set_attempt_state(self, key: AttemptKey, state: str, *, final_commit: str | None = None,
                          ended: bool = False) -> None:
        with self.transaction() as db:
            db.execute(
                "UPDATE attempts SET state=?, final_commit=COALESCE(?, final_commit),"
                " ended_at=CASE WHEN ? THEN ? ELSE ended_at END"
                " WHERE run_id=? AND node_id=? AND iteration=? AND attempt=?",
                (state, final_commit, int(ended), time.time(), key.run_id, key.node_id,
                 key.iteration, key.attempt))

    def active_attempts(self, worktree: str | None = None) -> list[Attempt]:
        sql = "SELECT * FROM attempts WHERE state = ?"
        args: list = [ACTIVE]
        if worktree is not None:
            sql += " AND worktree = ?"
            args.append(worktree)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY pk", args).fetchall()
        return [_attempt(r) for r in rows]

    def attempts(self, run_id: str | None = None) -> list[Attempt]:
        with self._lock:
            if run_id is None:
                rows = self._db.execute("SELECT * FROM attempts ORDER BY pk").fetchall()
            else:
                rows = self._db.execute("SELECT * FROM attempts WHERE run_id=? ORDER BY pk",
                                        (run_id,)).fetchall()
        return [_attempt(r) for r in rows]

    def last_attempt_number(self, run_id: str, node_id: str, iteration: int) -> int:
        with self._lock:
            row = self._db.execute(
                "SELECT MAX(attempt) AS a FROM attempts WHERE run_id=? AND node_id=? AND iteration=?",
                (run_id, node_id, iteration)).fetchone()
        return int(row["a"]) if row and row["a"] is not None else 0

    def run_ids(self) -> list[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT run_id, MAX(started_at) AS t FROM attempts GROUP BY run_id ORDER BY t"
            ).fetchall()
        return [r["run_id"] for r in rows]

    # -- checkpoints -----------------------------------------------------------------------

    def last_checkpoint(self, attempt_pk: int) -> dict | None:
        with self._lock:
            row = self._db.execute(
                "SELECT * FROM checkpoints WHERE attempt_pk=? AND pruned_at IS NULL"
                " ORDER BY seq DESC LIMIT 1",
                (attempt_pk,)).fetchone()
        return _checkpoint(row) if row else None

    def tool_call(self, attempt_pk: int, tool_use_id: str) -> dict | None:
        with self._lock:
            row = self._db.execute(
                "SELECT t.seq, t.deduped, c.commit_id, c.tree FROM tool_calls t"
                " JOIN checkpoints c ON c.attempt_pk = t.attempt_pk AND c.seq = t.seq"
                " WHERE t.attempt_pk=? AND t.tool_use_id=?", (attempt_pk, tool_use_id)).fetchone()
        if row is None:
            return None
        return {"seq": row["seq"], "commit": row["commit_id"], "tree": row["tree"]}

    def record_checkpoint(self, attempt: Attempt, row: dict) -> None:
        """Insert one checkpoint row (and its tool call) in one transaction."""
        with self.transaction() as db:
            faults.check("ledger")
            last = db.execute("SELECT MAX(seq) AS s FROM checkpoints WHERE attempt_pk=?",
                              (attempt.pk,)).fetchone()["s"]
            if last is not None and row["seq"] <= last:
                raise LedgerError(f"seq {row['seq']} is not after the attempt's last seq {last}")
            db.execute(
                "INSERT INTO checkpoints (attempt_pk, run_id, node_id, iteration, attempt, seq,"
                " commit_id, tree, parent, source, tier, label, tool_use_id, worktree, added,"
                " modified, deleted, skipped, created_at)"
                " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (attempt.pk, attempt.key.run_id, attempt.key.node_id, attempt.key.iteration,
                 attempt.key.attempt, row["seq"], row["commit"], row["tree"], row.get("parent"),
                 row["source"], row["tier"], row.get("label"), row.get("tool_use_id"),
                 row["worktree"], row.get("added", 0), row.get("modified", 0),
                 row.get("deleted", 0), row.get("skipped"), row.get("created_at", time.time())))
            if row.get("tool_use_id"):
                db.execute("INSERT OR IGNORE INTO tool_calls VALUES (?,?,?,0,?)",
                           (attempt.pk, row["tool_use_id"], row["seq"], time.time()))

    def record_tool_call(self, attempt: Attempt, tool_use_id: str, seq: int) -> None:
        """A deduplicated capture still maps its tool call to the seq that holds its state."""
        with self.transaction() as db:
            db.execute("INSERT OR IGNORE INTO tool_calls VALUES (?,?,?,1,?)",
                       (attempt.pk, tool_use_id, seq, time.time()))

    def checkpoints(self, run_id: str, node_id: str | None = None,
                    attempt: int | None = None) -> list[dict]:
        sql = "SELECT * FROM checkpoints WHERE run_id=?"
        args: list = [run_id]
        if node_id is not None:
            sql += " AND node_id=?"
            args.append(node_id)
        if attempt is not None:
            sql += " AND attempt=?"
            args.append(attempt)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY attempt_pk, seq", args).fetchall()
        return [_checkpoint(r) for r in rows]

    def tool_use_ids(self, run_id: str) -> set[str]:
        with self._lock:
            rows = self._db.execute(
                "SELECT t.tool_use_id FROM tool_calls t JOIN attempts a ON a.pk = t.attempt_pk"
                " WHERE a.run_id=?", (run_id,)).fetchall()
        return {r["tool_use_id"] for r in rows}

    def seqs(self, attempt_pk: int) -> set[int]:
        with self._lock:
            rows = self._db.execute("SELECT seq FROM checkpoints WHERE attempt_pk=?",
                                    (attempt_pk,)).fetchall()
        return {r["seq"] for r in rows}

    def attempt_checkpoints(self, attempt_pk: int) -> list[dict]:
        """Every row of one attempt (pruned ones too), by seq."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM checkpoints WHERE attempt_pk=? ORDER BY seq",
                                    (attempt_pk,)).fetchall()
        return [_checkpoint(r) for r in rows]

    def apply_prune(self, attempt: Attempt, pruned: list[int], remap: dict[int, tuple[str, str | None]],
                    reason: str, final_commit: str | None) -> None:
        """Mark seqs pruned and move kept rows to their rewritten commits, in one transaction."""
        now = time.time()
        with self.transaction() as db:
            faults.check("ledger")
            for seq in pruned:
                db.execute("UPDATE checkpoints SET pruned_at=COALESCE(pruned_at, ?), pruned_reason="
                           "COALESCE(pruned_reason, ?) WHERE attempt_pk=? AND seq=?",
                           (now, reason, attempt.pk, seq))
            for seq, (commit, parent) in remap.items():
                db.execute("UPDATE checkpoints SET commit_id=?, parent=? WHERE attempt_pk=? AND seq=?",
                           (commit, parent, attempt.pk, seq))
            if final_commit is not None:
                db.execute("UPDATE attempts SET final_commit=? WHERE pk=?", (final_commit, attempt.pk))

    def delete_run(self, run_id: str) -> int:
        """Remove a run's attempts, checkpoints and tool calls; returns the checkpoints removed."""
        with self.transaction() as db:
            faults.check("ledger")
            pks = [r["pk"] for r in db.execute("SELECT pk FROM attempts WHERE run_id=?", (run_id,))]
            removed = 0
            for pk in pks:
                removed += db.execute("DELETE FROM checkpoints WHERE attempt_pk=?", (pk,)).rowcount
                db.execute("DELETE FROM tool_calls WHERE attempt_pk=?", (pk,))
                db.execute("DELETE FROM attempts WHERE pk=?", (pk,))
            return removed

    def run_activity(self) -> list[dict]:
        """Per run: last activity and whether any attempt is still active."""
        with self._lock:
            rows = self._db.execute(
                "SELECT a.run_id AS run_id, MAX(COALESCE(c.created_at, a.started_at)) AS last,"
                " SUM(a.state = 'active') AS active FROM attempts a"
                " LEFT JOIN checkpoints c ON c.attempt_pk = a.pk GROUP BY a.run_id ORDER BY last"
            ).fetchall()
        return [{"run_id": r["run_id"], "last_activity": r["last"], "active": bool(r["active"])}
                for r in rows]

    def counts(self) -> dict:
        with self._lock:
            row = self._db.execute(
                "SELECT COUNT(*) AS n, SUM(tier=1) AS t1, SUM(tier=2) AS t2 FROM checkpoints"
            ).fetchone()
        return {"checkpoints": row["n"] or 0, "tier1": row["t1"] or 0, "tier2": row["t2"] or 0}

    # -- helpers ---------------------------------------------------------------------------

    def _migrate(self) -> None:
        with self.transaction() as db:
            db.execute("CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL)")
            row = db.execute("SELECT version FROM schema_version").fetchone()
            current = int(row["version"]) if row else 0
            if current > SCHEMA_VERSION:
                raise LedgerError(
                    f"ledger {self.path} has schema {current}, newer than this snapshotd "
                    f"({SCHEMA_VERSION}); upgrade snapshotd")
            for version in range(current + 1, SCHEMA_VERSION + 1):
                for statement in _MIGRATIONS[version].split(";"):
                    if statement.strip():
                        db.execute(statement)
            if row is None:
                db.execute("INSERT INTO schema_version VALUES (?)", (SCHEMA_VERSION,))
            else:
                db.execute("UPDATE schema_version SET version=?", (SCHEMA_VERSION,))


def _attempt(row: sqlite3.Row) -> Attempt:
    return Attempt(
        pk=row["pk"],
        key=AttemptKey(row["run_id"], row["node_id"], row["iteration"], row["attempt"]),
        worktree=row["worktree"], state=row["state"], epoch=row["epoch"],
        owner_pid=row["owner_pid"], zero_setup=bool(row["zero_setup"]),
        settle_ms=row["settle_ms"], max_wait_ms=row["max_wait_ms"],
        started_at=row["started_at"], ended_at=row["ended_at"],
        final_commit=row["final_commit"])


def _checkpoint(row: sqlite3.Row) -> dict:
    import json

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
    }
