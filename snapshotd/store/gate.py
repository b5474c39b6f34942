"""The store's object gate: captures write objects side by side, ``git gc`` runs alone.

Owns ``ObjectGate``, a shared/exclusive lock. A capture holds it *shared* from its first object
write until its ref has moved (so every object it wrote is either named by a ref or by its
worktree's stat cache once it lets go); a short-grace prune holds it *exclusive* for its two
short steps (``features.maintenance.prune_unreachable``), never for git's packing. Without
it, ``git gc --prune=now`` read the refs, a capture then wrote a commit and moved its ref, and
the prune deleted that (acknowledged) commit as unreachable.

Promises: any number of shared holders at once; an exclusive holder waits for the shared ones
to leave and then holds the gate alone; a waiting exclusive holder stops new shared holders
from entering (so gc is not starved by a stream of captures). Not re-entrant: a thread holding
the gate must not take it again.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class ObjectGate:
    """A writer-preferring shared/exclusive lock."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._shared = 0
        self._exclusive = False
        self._waiting = 0

    @contextmanager
    def shared(self) -> Iterator[None]:
        """Held by a capture while it writes objects, a commit and its ref."""
        with self._cond:
            while self._exclusive or self._waiting:
                self._cond.wait()
            self._shared += 1
        try:
            yield
        finally:
            with self._cond:
                self._shared -= 1
                if self._shared == 0:
                    self._cond.notify_all()

    @contextmanager
    def exclusive(self) -> Iterator[None]:
        """Held by gc while it decides what is unreachable and deletes it."""
        with self._cond:
            self._waiting += 1
            try:
                while self._exclusive or self._shared:
                    self._cond.wait()
            finally:
                self._waiting -= 1
            self._exclusive = True
        try:
            yield
        finally:
            with self._cond:
                self._exclusive = False
                self._cond.notify_all()
