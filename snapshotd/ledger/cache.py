"""The ledger's read cache: attempt rows and each attempt's newest checkpoint, kept in memory.

Owns ``ReadCache``, which answers the capture path's five reads per tool call (active attempts,
attempt by key, the node's newest attempt number, tool call seen, newest checkpoint) without a
turn on the ledger's one connection and lock. Why each case is sound: docs/durability.md
("The ledger's read cache"). Promises:
- Only an embedded (SQLite) ledger caches; every answer relies on a ``PRAGMA data_version``
  check, and another connection's commit empties the cache. PostgreSQL never caches.
- The ledger's writes empty it in the same hold of its lock (only ``record_checkpoint`` and
  ``record_tool_call`` update entries instead); rows read inside a write transaction are never kept.
- An answer is never older than the state at some moment after its read (or, in ``reads_since``,
  its request) began. Reads skip the ledger's lock (``unlocked``) only after a check that began
  after them completed, or inside another thread's write transaction (``window``); each entry is
  read or replaced whole. Every method but ``unlocked``, ``reads_since`` and ``called_ns`` runs
  under the ledger's lock.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from snapshotd.ledger.base import Attempt, outcome_of, tool_ids

TABLES = ("attempts", "active", "last_numbers", "last_checkpoints", "tool_calls")
# Entries kept before the cache starts again (a daemon running for months with many runs).
MAX_ENTRIES = 4096
# Tool use ids of one attempt kept in memory; past it the ledger answers (one indexed read).
TOOL_CALLS_KEPT = 1024


class ReadCache:
    """Read answers by table (``attempts`` by key, ``active`` under None, ``last_numbers`` by
    node, ``last_checkpoints`` and ``tool_calls``, the set of an attempt's recorded tool use
    ids, by attempt pk, or None past ``TOOL_CALLS_KEPT`` of them), all valid for one
    ``data_version`` of the ledger's connection."""

    def __init__(self, enabled: bool, data_version: Callable[[], int]) -> None:
        self.enabled = enabled
        self._data_version = data_version
        self._seen_version: int | None = None
        # When the newest completed check began: it vouches for every read begun before.
        self._checked_ns = 0
        self._as_of = threading.local()
        self.shared_checks = 0
        self.hits = 0
        self.misses = 0
        self.external_changes = 0
        self.window_hits = 0
        self.unlocked_hits = 0
        # The thread whose write transaction is open (see ``window``), and the lock that
        # orders opening and closing it against the reads it answers.
        self._window_writer: int | None = None
        self._window_lock = threading.Lock()
        self.tables: dict[str, dict[Any, Any]] = {name: {} for name in TABLES}

    def usable(self, called_ns: int) -> bool:
        """Whether entries may answer a read called at ``called_ns`` (``time.monotonic_ns``):
        the cache is on, and it was emptied if another connection committed since its entries
        were read, as checked after the call began. One check serves every read that began
        before it: readers queued on the ledger's lock while it ran share it instead of each
        running a statement, and giving up the interpreter lock, while holding the ledger's."""
        if not self.enabled:
            return False
        if self._checked_ns > called_ns:
            self.shared_checks += 1
            return True
        began = time.monotonic_ns()  # before the statement: it sees this moment on
        version = self._data_version()
        if version != self._seen_version:
            if self._seen_version is not None:
                self.external_changes += 1
            self.clear()
            self._seen_version = version
        # Only a check that completed (and emptied the entries if it had to) vouches.
        self._checked_ns = began
        return True

    @contextmanager
    def window(self, began_ns: int) -> Iterator[None]:
        """Inside a write transaction the caller began at ``began_ns`` (its ``BEGIN
        IMMEDIATE`` done), until just before its ``COMMIT``: other threads' reads the entries
        can answer are answered without the ledger's lock. Checks ``data_version`` first."""
        if not self.usable(began_ns):
            yield
            return
        with self._window_lock:
            self._window_writer = threading.get_ident()
        try:
            yield
        finally:
            with self._window_lock:
                self._window_writer = None

    @contextmanager
    def reads_since(self, began_ns: int) -> Iterator[None]:
        """The calling thread's reads, until the block ends, may be answered as of ``began_ns``
        (a request's start) instead of each read's own call."""
        outer = getattr(self._as_of, "ns", None)
        self._as_of.ns = began_ns if outer is None else min(outer, began_ns)
        try:
            yield
        finally:
            self._as_of.ns = outer

    def called_ns(self) -> int:
        """The moment a read called now must see the state after: its request's start inside
        ``reads_since``, else now."""
        began = getattr(self._as_of, "ns", None)
        return began if began is not None else time.monotonic_ns()

    def unlocked(self, table: str, key: Any, called_ns: int) -> tuple[bool, Any]:
        """``(True, entry)`` when the entry is held and may answer a read called at
        ``called_ns`` without the ledger's lock (see the module's promises); else
        ``(False, None)`` and the caller reads under the lock."""
        if not self.enabled:
            return False, None
        with self._window_lock:
            writer = self._window_writer
            me = threading.get_ident()
            if writer == me:
                return False, None  # inside its own write: the lock is this thread's anyway
            in_window = writer is not None
            if not in_window and self._checked_ns <= called_ns:
                return False, None
            entries = self.tables[table]
            if key not in entries:
                return False, None
            if in_window:
                self.window_hits += 1
            else:
                self.unlocked_hits += 1
            return True, entries[key]

    def fetch(self, table: str, key: Any, read: Callable[[], Any]) -> Any:
        """The entry, else ``read()``'s answer, kept (the caller checked ``usable``)."""
        entries = self.tables[table]
        if key in entries:
            self.hits += 1
            return entries[key]
        value = read()
        self.misses += 1
        self.put(table, key, value)
        return value

    def put(self, table: str, key: Any, value: Any, *, keep: bool = True) -> None:
        """Set the entry (or drop it, without ``keep``). Inside a write transaction (its
        window open) a read sees the write's uncommitted rows: those are never kept."""
        if keep and self._window_writer is not None:
            return
        if not keep:
            self.tables[table].pop(key, None)
            return
        if sum(len(t) for t in self.tables.values()) >= MAX_ENTRIES:
            self.clear()  # a daemon running for months with many runs: start again
        self.tables[table][key] = value

    def checkpoint_recorded(self, attempt: Attempt, row: dict, committed: bool) -> None:
        """``record_checkpoint`` of ``row`` ended: committed, it is the attempt's newest
        checkpoint and its tool call is known; else both entries go (read again next time)."""
        self.put("last_checkpoints", attempt.pk,
                 recorded_checkpoint(attempt, row) if committed else None, keep=committed)
        self.tool_calls_recorded(attempt.pk, tool_ids(row.get("tool_use_id"),
                                                      row.get("tool_aliases")), committed)

    def tool_calls_recorded(self, attempt_pk: int, ids: list[str], committed: bool) -> None:
        """Each id of one tool call (its own and its aliases) recorded, or not."""
        for tool_use_id in ids:
            self.tool_call_recorded(attempt_pk, tool_use_id, committed)

    def tool_call_recorded(self, attempt_pk: int, tool_use_id: str, committed: bool) -> None:
        known = self.tables["tool_calls"].get(attempt_pk)
        if known is None:
            return  # not held, or too many to keep (the ledger answers)
        if committed and len(known) >= TOOL_CALLS_KEPT:
            # A long attempt: its set would grow by every checkpoint, for months.
            self.tables["tool_calls"][attempt_pk] = None
        elif committed:
            known.add(tool_use_id)
        else:
            del self.tables["tool_calls"][attempt_pk]

    def size(self) -> int:
        """Entries held, each tool use id of a ``tool_calls`` set counted (status's
        ``cache_entries``): what the cache costs, bounded by ``MAX_ENTRIES`` and
        ``TOOL_CALLS_KEPT``."""
        held = sum(len(entries) for entries in self.tables.values())
        return held + sum(len(known) for known in self.tables["tool_calls"].values() if known)

    def clear(self) -> None:
        for entries in self.tables.values():
            entries.clear()

    def counters(self) -> dict[str, int]:
        # Hits by way of the lock and without it, all of them (counted apart: no shared lock).
        return {"cache_entries": self.size(),
                "cache_hits": self.hits + self.window_hits + self.unlocked_hits,
                "cache_misses": self.misses,
                "cache_external_changes": self.external_changes,
                "cache_shared_checks": self.shared_checks,
                "cache_window_hits": self.window_hits,
                "cache_unlocked_hits": self.unlocked_hits}


def recorded_checkpoint(attempt: Attempt, row: dict) -> dict:
    """The dict ``last_checkpoint`` reads back for the row ``record_checkpoint`` inserted."""
    return {
        "run_id": attempt.key.run_id, "node_id": attempt.key.node_id,
        "iteration": attempt.key.iteration, "attempt": attempt.key.attempt,
        "seq": row["seq"], "commit": row["commit"], "tree": row["tree"],
        "parent": row.get("parent"), "source": row["source"], "tier": row["tier"],
        "label": row.get("label"), "tool_use_id": row.get("tool_use_id"),
        "worktree": row["worktree"], "added": row.get("added", 0),
        "modified": row.get("modified", 0), "deleted": row.get("deleted", 0),
        "skipped": json.loads(row["skipped"]) if row.get("skipped") else [],
        "created_at": row["created_at"], "pruned_at": None, "pruned_reason": None,
        "secrets": json.loads(row["secrets"]) if row.get("secrets") else [],
        **outcome_of(row.get("outcome")),
        "owner": row.get("owner"), "owner_how": row.get("owner_how"),
    }
