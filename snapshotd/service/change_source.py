"""What a capture is told by the watch layer above the service, declared here as Protocols.

Owns ``ChangeSource`` (which paths of a worktree changed since its last capture: the watcher)
and ``OffLockScan`` (what a verification's scan found off the worktree's lock:
``snapshotd.watch.prescan.Prescan``). The service calls them and never imports their
implementations, which live a layer above it.

Promises: a ``ChangeSource`` answering None, or an ``OffLockScan`` answering None, costs only
speed: the capture then scans the whole worktree under its lock, as with neither.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from snapshotd.capture import Capture, WorktreeIndex


class ChangeSource(Protocol):
    """Knows which paths of a worktree changed since its last capture (the watcher)."""

    def take(self, root: Path, mode: str) -> set[str] | None:
        """The worktree-relative paths changed since the last capture, once every earlier
        change has been observed; None when it cannot vouch (then a full scan runs). ``mode``
        is ``fast``, ``narrow`` (a verification's per-path update), ``verify`` (the set
        detects drift) or ``settle`` (a retake of what changed during a capture)."""

    def failed(self, root: Path) -> None:
        """The capture that took the paths failed: stop vouching until a full scan."""

    def drift(self, root: Path, found: set[str], reported: set[str]) -> None:
        """A verification's full scan found ``found`` changed beyond the ``reported`` paths
        it took first: drift, unless an event names them after all."""

    def scanned(self, root: Path, seconds: float) -> None:
        """A full stat scan of the worktree took ``seconds`` (what a verification costs)."""

    def late(self, root: Path) -> set[str] | None:
        """The paths reported changed since the last ``take`` (left for the next one), once
        every earlier change has been observed: what changed while a capture read the tree.
        ``{""}`` when the watch cannot say which (every path may have); None when it does not
        watch ``root``."""


class OffLockScan(Protocol):
    """A verification's stat scan, run before the capture and off the worktree's lock."""

    def verify(self, index: WorktreeIndex, source: ChangeSource, root: Path,
               reported: set[str]) -> Capture | None:
        """The verification's capture, under the lock: the paths the scan found and the
        ``reported`` ones (taken from ``source`` just now) updated in ``index``, drift told to
        ``source``; None, with nothing changed, when only a full scan of ``root`` can do."""
