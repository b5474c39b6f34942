"""The stat caches of one store's worktrees, and the capture rules they share.

Owns ``StatCaches``: the registry of loaded ``WorktreeIndex`` objects, one per worktree root,
made on first use (``worktree``) and kept for the daemon's life; what a cache does at shutdown
(``persist_all``), after a purge (``forget``) and before ``git gc`` (``refresh_keep_refs``).
Each cache captures under the registry's ``CaptureSettings`` (``capture.settings``).

The store knows nothing of these objects: it owns only their files under ``<home>/worktrees``
and their keep refs, which this module asks it to write or drop (``Store.forget_cache_files``,
``Store.refresh_cache_refs``).

Promises: one ``WorktreeIndex`` per root for the registry's life; callers serialize per
worktree (the service's worktree lock), the registry itself is thread-safe.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

from snapshotd.capture.settings import CaptureSettings
from snapshotd.capture.stat_cache import WorktreeIndex
from snapshotd.core import worktree_id
from snapshotd.store import Store


class StatCaches:
    """The loaded stat caches of ``store``'s worktrees, by worktree id."""

    def __init__(self, store: Store, settings: CaptureSettings | None = None) -> None:
        self.store = store
        self.settings = settings or CaptureSettings()
        self._lock = threading.Lock()
        self._indexes: dict[str, WorktreeIndex] = {}

    def worktree(self, root: Path) -> WorktreeIndex:
        """The stat cache of ``root`` (created on first use). Callers serialize per worktree."""
        wt_id = worktree_id(root)
        with self._lock:
            index = self._indexes.get(wt_id)
            if index is None:
                index = WorktreeIndex(self.store, wt_id, root, settings=self.settings)
                self._indexes[wt_id] = index
            return index

    def loaded(self) -> list[WorktreeIndex]:
        """The caches loaded so far."""
        with self._lock:
            return list(self._indexes.values())

    def forget(self, root: Path) -> None:
        """Drop ``root``'s stat cache in memory, on disk and its keep ref, so that it vouches
        for no blob any more (after a purge, the purged file's blob must become unreachable);
        the next capture starts it cold. The caller holds the worktree lock, or nothing
        captures yet (start-up)."""
        wt_id = worktree_id(root)
        with self._lock:
            index = self._indexes.get(wt_id)
            if index is not None:
                index.drop_cache()
            self.store.forget_cache_files(wt_id)

    def persist_all(self) -> None:
        """Write every loaded stat cache to disk (at shutdown)."""
        for index in self.loaded():
            index.persist()

    def refresh_keep_refs(self, lock_for: Callable[[Path], AbstractContextManager]) -> None:
        """Have the store name the tree of every stat cache, loaded or only on disk, by its
        keep ref before ``git gc`` (``Store.refresh_cache_refs``). A loaded cache is read
        under ``lock_for(root)`` (the caller's per-worktree lock: captures change it)."""
        trees: dict[str, str | None] = {}
        for index in self.loaded():
            with lock_for(index.root):
                trees[index.id] = index.cached_tree()
        self.store.refresh_cache_refs(trees)
