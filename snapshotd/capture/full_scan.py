"""The full scan of a worktree into its stat cache: libgit2's diff of the index against the
worktree (untracked files and directories too), applied entry by entry. Owns ``full_scan`` and ``Capture`` (what a capture found). Around the diff: a cached file
libgit2 cannot open would fail the whole diff, so it is held out and settled alone after it
(kept, listed ``unreadable``); a cached file the diff no longer finds is deleted, unless its
directory cannot be listed (kept; the directory listed ``unreadable``) or it is now a FIFO,
socket or device (deleted, listed ``special``); a tree nested deeper than libgit2 walks is
scanned by git (``deep_scan``); what the diff never reports (a new special file, a
never-captured directory it cannot list) is found by one walk after it (``list_unseen``),
listed as the fast path lists it, sparing each entry's look where a seeded directory
(``seeding.dir_shape``) holds exactly its seeded names (cost: docs/performance.md).

Promises: a scan never silently drops a file it could not see, never opens a special file, and
fails (``StoreError``) rather than leave out a change the store could not take. A file deleted
mid-diff retakes the diff; vanishing ``VANISH_RETAKES`` times in a row is ``file-vanished``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import pygit2
from pygit2.enums import DeltaStatus, DiffOption

from snapshotd.capture.deep_scan import git_add_scan
from snapshotd.capture.scan_rules import (
    DirNames,
    NestedRepos,
    hidden_by,
    list_unseen,
    source_readable,
    special_entry,
    unreadable_path,
    vanished_path,
)
from snapshotd.store import StoreError, open_cache

log = logging.getLogger("snapshotd.store")

# The gap reason of a capture whose files kept vanishing while it read them (a tree being
# deleted and rewritten without pause): the worktree's doing, never the store's.
FILE_VANISHED = "file-vanished"
# How many times in a row a diff is taken again after a file it found vanished before its read.
VANISH_RETAKES = 5

DIFF_FLAGS = (
    DiffOption.INCLUDE_UNTRACKED
    | DiffOption.RECURSE_UNTRACKED_DIRS
    | DiffOption.INCLUDE_TYPECHANGE
    | DiffOption.INCLUDE_UNREADABLE
    | DiffOption.UPDATE_INDEX
    | DiffOption.SKIP_BINARY_CHECK
    | DiffOption.DISABLE_PATHSPEC_MATCH
)


class Skipped(list):
    """What a capture left out, one listing per path and reason: the fast path can meet one
    path twice (reported by the watcher, and in the crawl of its new directory)."""

    def __init__(self, items: Iterable[dict] = ()) -> None:
        super().__init__()
        self._keys: set[tuple[object, object]] = set()
        self.extend(items)

    def append(self, item: dict) -> None:
        key = (item.get("path"), item.get("reason"))
        if key not in self._keys:
            self._keys.add(key)
            super().append(item)

    def extend(self, items: Iterable[dict]) -> None:
        for item in items:
            self.append(item)


@dataclass
class Capture:
    """The result of scanning a worktree into its index and writing the tree."""

    tree: str
    added: int = 0
    modified: int = 0
    deleted: int = 0
    skipped: list[dict] = field(default_factory=Skipped)
    full_scan: bool = True
    paths: list[str] = field(default_factory=list)  # what a full scan found changed
    secrets: list[dict] = field(default_factory=list)  # tokens in the files hashed


class ScanTarget(Protocol):
    """What the scan needs of a worktree's stat cache (``WorktreeIndex``)."""

    root: Path
    gitdir: Path
    max_file_bytes: int
    unreadable: set[str]

    def update_path(self, index: pygit2.Index, path: str, result: Capture, touched: list[str],
                    *, new: bool = False, racy_recheck: bool = False) -> None: ...


def full_scan(wt: ScanTarget, index: pygit2.Index, result: Capture, touched: list[str],
              shape: Mapping[str, DirNames] | None = None) -> None:
    """The full stat scan: libgit2's diff of the index against the worktree, applied to the
    index. Files known unreadable are held out of the diff (libgit2 fails the whole scan on
    a tracked file it cannot open) and settled one by one after it; a tree nested deeper
    than libgit2 walks is scanned by git instead. ``shape``: the directories of the cache as
    seeded just before this scan (``seeding.dir_shape``), which spares most of the walk for
    unseen entries (``list_unseen``)."""
    held = _hold_unreadable(wt, index)
    try:
        deltas = _diff(wt, index, held)
    except _TooDeep:
        _release(wt, index, held)
        _deep_scan(wt, index, result, touched)
        return
    except StoreError:
        _release(wt, index, held)
        raise
    hidden: set[str] = set()
    for delta in deltas:
        path = (delta.old_file if delta.status == DeltaStatus.DELETED else delta.new_file).path
        if path.rstrip("/") in held:
            continue
        result.paths.append(path.rstrip("/"))
        _apply_delta(wt, index, delta, result, touched, hidden)
    _settle_held(wt, index, held, result, touched)
    _list_unseen(wt, index, result, shape, held)
    if held:
        # libgit2 wrote the cache to disk during the diff (UPDATE_INDEX) while the held files
        # were out of it: write it again with them, so a restart still carries their content.
        try:
            index.write()
        except (pygit2.GitError, OSError) as exc:
            log.warning("could not write the stat cache of %s: %s", wt.root, exc)

def _diff(wt: ScanTarget, index: pygit2.Index, held: dict[str, pygit2.IndexEntry]) -> list:
    """The deltas of the full scan. A tracked file libgit2 cannot open is taken out of the
    index into ``held`` and the scan runs again (once per such file; next time it is held
    from the start)."""
    retakes = 0
    while True:
        try:
            return list(index.diff_to_workdir(int(DIFF_FLAGS)).deltas)
        except pygit2.GitError as exc:
            if "nesting too deep" in str(exc):
                raise _TooDeep() from exc
            gone = vanished_path(exc, wt.root)
            if gone is not None or _short_read(exc):
                # Deleted (or truncated) between the walk and the read: the tree changed under
                # the scan, so it is taken again.
                retakes += 1
                if retakes < VANISH_RETAKES:
                    continue
                reason, what = (FILE_VANISHED, f"files vanished while it was read, {retakes} "
                                f"times in a row (last {gone})") if gone is not None else (
                    "scan-failed", f"files changed while it was read, {retakes} times in a row")
                raise StoreError(reason, f"could not scan {wt.root}: {what}: {exc}") from exc
            rel = unreadable_path(exc, wt.root)
            if rel is None or rel in held or rel not in index:
                raise StoreError("scan-failed", f"could not scan {wt.root}: {exc}") from exc
            held[rel] = index[rel]
            index.remove(rel)

def _short_read(exc: BaseException) -> bool:
    """libgit2 read fewer bytes than the file's stat said, with no OS error: the file was
    truncated or rewritten between the walk and the read."""
    return str(exc).strip().rstrip(":").strip() == "error reading file for hashing"


def _apply_delta(wt: ScanTarget, index: pygit2.Index, delta: pygit2.DiffDelta, result: Capture,
                 touched: list[str], hidden: set[str]) -> None:
    status = delta.status
    if status == DeltaStatus.DELETED:
        _deleted(wt, index, delta.old_file.path, result, hidden)
        return
    path = delta.new_file.path
    if status == DeltaStatus.UNREADABLE:
        result.skipped.append({"path": path, "reason": "unreadable"})
        return
    if status in (DeltaStatus.UNTRACKED, DeltaStatus.ADDED, DeltaStatus.MODIFIED,
                  DeltaStatus.TYPECHANGE):
        wt.update_path(index, path, result, touched,
                          new=status in (DeltaStatus.UNTRACKED, DeltaStatus.ADDED))

def _deleted(wt: ScanTarget, index: pygit2.Index, path: str, result: Capture, hidden: set[str]) -> None:
    """A cached file the scan did not find. Gone, it leaves the index; now a FIFO, socket
    or device, it leaves and is listed ``special``; inside a directory this process cannot
    list, it keeps its last captured content and that directory is listed ``unreadable``
    (an unreadable directory never silently empties the checkpoint)."""
    try:
        st = os.lstat(wt.root / path)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError:
        st = None  # the parent cannot be searched: hidden_by names it below
    directory = hidden_by(wt.root, path)
    if directory is not None:
        if directory not in hidden:
            hidden.add(directory)
            result.skipped.append({"path": directory, "reason": "unreadable",
                                   "detail": "the directory cannot be listed; its last "
                                             "captured content is kept"})
        return
    if remove_entry(index, path):
        result.deleted += 1
    special = special_entry(path, st.st_mode) if st is not None else None
    if special is not None:
        result.skipped.append(special)

def _list_unseen(wt: ScanTarget, index: pygit2.Index, result: Capture,
                 shape: Mapping[str, DirNames] | None, held: Mapping[str, object]) -> None:
    """List what libgit2's diff does not report at all (a new FIFO, socket or device, a
    never-captured directory that cannot be listed), as the fast path lists them. With the
    seeded ``shape``, only directories on the path of something the scan found (a change, a
    held or a skipped path) are looked at entry by entry."""
    matcher = open_cache(wt.gitdir)  # the capture's ignore rules, as the diff's
    holding: set[str] = set()

    def tracked(directory: str) -> bool:
        # Every directory the cache holds a file under, gathered once (a pass over the index
        # through pygit2 per nested repository cost as much as the scan itself).
        if not holding:
            for entry in index:
                parts = entry.path.split("/")[:-1]
                holding.update("/".join(parts[:n]) for n in range(1, len(parts) + 1))
            holding.add("")
        return directory in holding

    nested = NestedRepos(wt.root, tracked)
    listed = {s["path"] for s in result.skipped}

    def ignored(path: str) -> bool:
        try:
            return bool(matcher.path_is_ignored(path))
        except UnicodeEncodeError:
            # pygit2 gives libgit2 UTF-8 only: a name that is not UTF-8 cannot be matched, and
            # counts as not ignored (at worst an ignored special file is listed as skipped).
            return False

    changed: set[str] = set()
    if shape is not None:
        for path in (*result.paths, *held, *listed):
            parts = path.split("/")
            changed.update("/".join(parts[:n]) for n in range(len(parts) + 1))
    result.skipped.extend(list_unseen(wt.root, ignored, index, listed, nested, shape, changed))

def _hold_unreadable(wt: ScanTarget, index: pygit2.Index) -> dict[str, pygit2.IndexEntry]:
    held = {}
    for path in sorted(wt.unreadable):
        try:
            held[path] = index[path]
        except KeyError:
            continue
        index.remove(path)
    wt.unreadable = set()
    return held

def _release(wt: ScanTarget, index: pygit2.Index, held: dict[str, pygit2.IndexEntry]) -> None:
    """Put the held entries back as they were (a scan that did not finish)."""
    for path, entry in held.items():
        index.add(pygit2.IndexEntry(path, entry.id, entry.mode))
        wt.unreadable.add(path)

def _settle_held(wt: ScanTarget, index: pygit2.Index, held: dict[str, pygit2.IndexEntry],
                 result: Capture, touched: list[str]) -> None:
    """Each held file: gone (deleted), readable again (hashed), or still unreadable (its
    last captured content kept, listed ``unreadable``)."""
    for path, entry in held.items():
        full = wt.root / path
        if not os.path.lexists(full) and hidden_by(wt.root, path) is None:
            result.deleted += 1
            result.paths.append(path)
            continue
        if source_readable(full):
            index.add(pygit2.IndexEntry(path, entry.id, entry.mode))
            wt.update_path(index, path, result, touched)
            continue
        index.add(pygit2.IndexEntry(path, entry.id, entry.mode))
        wt.unreadable.add(path)
        result.skipped.append({"path": path, "reason": "unreadable",
                               "detail": "cannot be read; its last captured content is kept"})

def _deep_scan(wt: ScanTarget, index: pygit2.Index, result: Capture, touched: list[str]) -> None:
    """The scan by git for a tree nested deeper than libgit2 walks (``deep_scan``)."""
    log.info("%s nests directories deeper than libgit2 walks: scanning it with git",
             wt.root)
    scan = git_add_scan(index, wt.root, wt.gitdir, wt.max_file_bytes)
    result.added += len(scan.added)
    result.modified += len(scan.modified)
    result.deleted += len(scan.deleted)
    result.skipped.extend(scan.skipped)
    changed = scan.added + scan.modified
    touched.extend(changed)
    result.paths.extend(changed + scan.deleted)


class _TooDeep(Exception):
    """libgit2 refused to walk the worktree: directories nested deeper than it goes."""


def remove_entry(index: pygit2.Index, path: str) -> bool:
    """Drop ``path`` (a file entry, or every entry under a directory) from the index; whether
    anything was there. ``remove_directory`` succeeds on a path the index never had, so the
    answer is whether the index shrank: an editor's vanished temp file is no structural change."""
    try:
        index.remove(path)
        return True
    except (pygit2.GitError, OSError, KeyError):
        before = len(index)
        try:
            index.remove_directory(path)
        except (pygit2.GitError, OSError, KeyError):
            return False
        return len(index) < before
