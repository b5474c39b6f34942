"""Settling a capture: a checkpoint holds a state the worktree was in, or says it may not.

A capture reads paths one after another (a scan lists a directory, then looks at each entry),
so a rename landing in between can leave a file in neither of its places, or in both: a state
that never existed. Owns ``settle``, run under the worktree lock after the capture read the
tree: it asks the change source which paths were reported changed while it read (after a
cookie round trip, so every such event has arrived), retakes them, and asks again, up to
``SETTLE_ROUNDS`` retakes. Paths the capture does not take (ignored, not held) do not count,
nor does one file alone (the rest stood still: the tree was the worktree when it was read).

Promises: a capture during which no relevant event arrived, or whose last retake saw none, is
the state the worktree was in when that read ended; otherwise the paths still changing are
listed under ``skipped``, reason ``unsettled`` (the checkpoint is recorded, marked, never
silently torn). A retake that would scan a tree over ``FULL_RETAKE_MAX_ENTRIES`` is not made
(marked instead). A worktree the change source does not watch is read once, as before.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from snapshotd.capture import Capture, WorktreeIndex
from snapshotd.service.change_source import ChangeSource

# Retakes of the paths that changed during a capture before it is marked unsettled.
SETTLE_ROUNDS = 3
# A retake the change source cannot narrow to the changed paths scans the whole tree: only up
# to this many cached entries (about half a second; a million-file scan takes seconds).
FULL_RETAKE_MAX_ENTRIES = 50_000
# Unsettled paths listed one by one on a checkpoint; the rest are counted in the last one.
MAX_LISTED = 20
UNSETTLED = "unsettled"


def settle(index: WorktreeIndex, source: ChangeSource, root: Path, capture: Capture,
           counters: dict[str, int]) -> Capture:
    """``capture`` once no relevant path changed while it was read, retaking the ones that
    did; marked ``unsettled`` when they still changed after ``SETTLE_ROUNDS`` retakes.
    ``counters`` (the service's) count the retakes and the unsettled captures."""
    for round_ in range(SETTLE_ROUNDS + 1):
        late = source.late(root)
        if late is None:
            return capture  # not watched: nothing says what changed meanwhile
        everything = "" in late  # the watch cannot say which paths (overflow, no cookie)
        late = late if everything else index.taken_among(late)
        if not late or (not everything and _one_file(root, late)):
            return capture
        if round_ == SETTLE_ROUNDS:
            counters["unsettled"] = counters.get("unsettled", 0) + 1
            _mark(capture, late, round_)
            return capture
        retake = _retake(index, source, root, everything)
        if retake is None:  # only a scan of the whole, too large a tree, could retake it
            counters["unsettled"] = counters.get("unsettled", 0) + 1
            _mark(capture, late, round_)
            return capture
        counters["settle_retakes"] = counters.get("settle_retakes", 0) + 1
        capture = _merge(capture, *retake)
    return capture


def _one_file(root: Path, late: set[str]) -> bool:
    """Whether only one path changed and it is no directory: everything else stood still
    while the capture read it, so the tree is the worktree at the moment that path was read
    (a file rewritten meanwhile is read until whole, else listed ``changing``)."""
    if len(late) != 1:
        return False
    try:
        return not stat.S_ISDIR(os.lstat(root / next(iter(late))).st_mode)
    except OSError:
        return True  # gone: the tree holds it or not, both states existed


def _retake(index: WorktreeIndex, source: ChangeSource, root: Path,
            everything: bool) -> tuple[Capture, set[str]] | None:
    """Read again what changed since the last take, and say which paths were read: those
    paths when the source vouches for them, else the whole tree; None past
    ``FULL_RETAKE_MAX_ENTRIES`` (the source is told, so the next capture scans fully)."""
    reported = source.take(root, "settle")
    if reported is not None and not everything:
        retake = index.capture_changed(reported)
        if retake is not None:
            return retake, reported
    if index.cached_entries() > FULL_RETAKE_MAX_ENTRIES:
        source.failed(root)  # the paths it handed over are owed to the next capture
        return None
    retake = index.capture()
    return retake, set(retake.paths)


def _merge(first: Capture, again: Capture, retaken: set[str]) -> Capture:
    """One capture of both reads: the retake's tree, and what either read found; a path read
    again keeps only the retake's skip listing."""
    retaken = retaken | {s.get("path") for s in again.skipped}
    again.skipped.extend(s for s in first.skipped if s.get("path") not in retaken)
    again.added += first.added
    again.modified += first.modified
    again.deleted += first.deleted
    again.full_scan = first.full_scan or again.full_scan
    again.paths = sorted(set(first.paths) | set(again.paths))
    again.secrets = first.secrets + [s for s in again.secrets if s not in first.secrets]
    return again


def _mark(capture: Capture, late: set[str], rounds: int) -> None:
    paths = sorted(late)
    detail = (f"changed while the capture read it, still after {rounds} retake(s): this path "
              f"may hold another moment's state than the rest of the checkpoint")
    for path in paths[:MAX_LISTED]:
        capture.skipped.append({"path": path or ".", "reason": UNSETTLED, "detail": detail})
    if len(paths) > MAX_LISTED:
        capture.skipped.append({"path": ".", "reason": UNSETTLED,
                                "detail": f"and {len(paths) - MAX_LISTED} more path(s) "
                                          f"changed while the capture read them"})
