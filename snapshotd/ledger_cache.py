"""The ledger's read cache: attempt rows and each attempt's newest checkpoint, kept in memory.

Owns ``ReadCache``, what ``Ledger`` answers the capture path's reads from instead of a query
(every tool call asks for the active attempts, its attempt by key, the node's newest attempt
number, whether its tool call was recorded before and the attempt's newest checkpoint: five
queries, each a turn on the ledger's one connection and lock, while sixteen agents' captures
wait for that lock).

Promises:
- Only an embedded (SQLite) ledger caches. Its file belongs to one daemon, but other processes
  may still write it (the CLI, ``snapshotd repair``): before every cached answer the connection's
  ``PRAGMA data_version`` is compared with the one the entries were read under, and any commit
  by another connection empties the cache. A PostgreSQL ledger may be shared by daemons on
  several hosts and has no such cheap check: it never caches (``enabled`` False).
- The ledger's own writes empty the cache inside the same hold of its lock as the write (a
  reader can never see an entry older than a committed write); the only writes that update
  entries instead are ``record_checkpoint``, which knows the row it made the newest, and it
  and ``record_tool_call``, which add the tool call they recorded to its attempt's set.
- An answer is never older than the state at some moment after its read was called (what a
  query would give): the ``data_version`` check it relies on ran after that moment.
- Every method runs under the ledger's lock; the cache has no lock of its own.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any

from snapshotd.ledger_base import Attempt

TABLES = ("attempts", "active", "last_numbers", "last_checkpoints", "tool_calls")
# Entries kept before the cache starts again (a daemon running for months with many runs).
MAX_ENTRIES = 4096


class ReadCache:
    """Read answers by table (``attempts`` by key, ``active`` under None, ``last_numbers`` by
    node, ``last_checkpoints`` and ``tool_calls``, the set of an attempt's recorded tool use
    ids, by attempt pk), all valid for one ``data_version`` of the ledger's connection."""

    def __init__(self, enabled: bool, data_version: Callable[[], int]) -> None:
        self.enabled = enabled
        self._data_version = data_version
        self._seen_version: int | None = None
        self._checked_ns = 0
        self.shared_checks = 0
        self.hits = 0
        self.misses = 0
        self.external_changes = 0
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
        self._checked_ns = time.monotonic_ns()  # before the statement: it sees this moment on
        version = self._data_version()
        if version != self._seen_version:
            if self._seen_version is not None:
                self.external_changes += 1
            self.clear()
            self._seen_version = version
        return True

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
        """Set the entry (or drop it, without ``keep``)."""
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
        if row.get("tool_use_id"):
            self.tool_call_recorded(attempt.pk, row["tool_use_id"], committed)

    def tool_call_recorded(self, attempt_pk: int, tool_use_id: str, committed: bool) -> None:
        known = self.tables["tool_calls"].get(attempt_pk)
        if known is None:
            return
        if committed:
            known.add(tool_use_id)
        else:
            del self.tables["tool_calls"][attempt_pk]

    def clear(self) -> None:
        for entries in self.tables.values():
            entries.clear()

    def counters(self) -> dict[str, int]:
        return {"cache_hits": self.hits, "cache_misses": self.misses,
                "cache_external_changes": self.external_changes,
                "cache_shared_checks": self.shared_checks}


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
    }
