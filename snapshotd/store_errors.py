"""How writing to the store fails: ``StoreError``, and the retry of object writes that a
concurrent ``git gc`` interrupted.

Promises: every store operation that cannot be done raises ``StoreError`` whose ``reason`` is a
gap reason (docs/durability.md lists them); ``odb_retry`` retries only the one failure that is
not a failure (an object fan-out directory removed under libgit2 by ``git gc``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import pygit2

# A libgit2 call that writes loose objects is tried this many times when a concurrent ``git gc``
# (prune-packed, prune) removed an object fan-out directory between libgit2 creating it and
# renaming the new object into it; libgit2 creates it again on the next try.
ODB_TRIES = 5

T = TypeVar("T")


class StoreError(Exception):
    """A store operation failed; ``reason`` is a short gap reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


def odb_retry(call: Callable[..., T], *args: object) -> T:
    """``call(*args)``, tried again (up to ``ODB_TRIES`` times) while it fails only because a
    concurrent ``git gc`` removed the object directory it was renaming a new object into."""
    for attempt in range(1, ODB_TRIES + 1):
        try:
            return call(*args)
        except pygit2.GitError as exc:
            text = str(exc)
            vanished = "No such file or directory" in text and "/objects/" in text
            if not vanished or attempt == ODB_TRIES:
                raise
    raise AssertionError("unreachable")
