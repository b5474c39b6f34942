"""The binary search of ``snapshotd bisect``: which candidate is the first bad one.

Owns ``Search``: candidates ``0..n-1`` in seq order, the first known good and the last known
bad (as ``git bisect`` takes the marks it is given, neither end is run). Promises:
- ``next()`` is the untested candidate nearest the middle of the open range, so a search over
  n candidates runs the command at most ceil(log2(n - 1)) times when nothing is skipped.
- A skipped candidate (exit 125) is never proposed again; the nearest untested neighbour is
  tried instead (as git does). When only skipped candidates lie between the last good and the
  first bad one, the search ends ``ambiguous``: the first bad one may be any of them.
"""

from __future__ import annotations

import math


class Search:
    """Bisection state over ``count`` candidates (at least 2: a good one, then a bad one)."""

    def __init__(self, count: int) -> None:
        if count < 2:
            raise ValueError("a bisection needs a good and a bad candidate")
        self.good = 0
        self.bad = count - 1
        self.skipped: set[int] = set()

    def open(self) -> list[int]:
        """The candidates still to test: between the last good and first bad, not skipped."""
        return [i for i in range(self.good + 1, self.bad) if i not in self.skipped]

    def next(self) -> int | None:
        """The candidate to test next, or None when the search is over."""
        left = self.open()
        if not left:
            return None
        middle = (self.good + self.bad) / 2
        return min(left, key=lambda i: (abs(i - middle), i))

    def mark(self, index: int, verdict: str) -> None:
        """Record ``verdict`` (``good``, ``bad`` or ``skip``) for candidate ``index``."""
        if not self.good < index < self.bad:
            raise ValueError(f"candidate {index} is outside the open range")
        if verdict == "good":
            self.good = index
        elif verdict == "bad":
            self.bad = index
        elif verdict == "skip":
            self.skipped.add(index)
        else:
            raise ValueError(f"unknown verdict {verdict!r}")

    def steps_left(self) -> int:
        """About how many more runs the search needs (log2 of the open range)."""
        left = len(self.open())
        return math.ceil(math.log2(left + 1)) if left else 0

    def unresolved(self) -> list[int]:
        """Skipped candidates between the last good and the first bad one: each may be the
        first bad one."""
        return sorted(i for i in self.skipped if self.good < i < self.bad)
