"""The fast path's walk of a directory a watcher reported, and the tracked files ignore rules
would hide from a capture.

Owns ``crawl`` (a directory that is new or was replaced wholesale, e.g. by ``git checkout``:
every file under it the rules keep is taken, and cached entries under it that are gone are
dropped), ``take_tracked_ignored`` (tracked-but-ignored files the cache does not hold: the
full scan's share, and the fast path's once the user's index changed) and ``list_alias`` (a
``.git`` in another case, listed once a capture).

Promises: what ``git add -A`` in the user's repository would stage: an ignored file is left
out unless the user's index tracks it (``tracked_ignored``), then it is taken even inside an
ignored directory; an index path is only taken when every directory above it is a real one
(never through a symlink). What a crawl took, files and the directories it entered, goes into
``taken`` so the same capture never takes it twice.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Protocol

import pygit2

from snapshotd.capture.full_scan import Capture, remove_entry
from snapshotd.capture.scan_rules import (
    NestedRepos,
    git_dir_alias,
    hidden_by,
    invalid_alias,
    real_parents,
)
from snapshotd.capture.tracked_ignored import TrackedIgnored


class CrawlTarget(Protocol):
    """What a crawl needs of a worktree's stat cache (``WorktreeIndex``)."""

    root: Path
    tracked_ignored: TrackedIgnored

    def update_path(self, index: pygit2.Index, path: str, result: Capture, touched: list[str],
                    *, new: bool = False, racy_recheck: bool = False) -> None: ...


def crawl(wt: CrawlTarget, index: pygit2.Index, repo: pygit2.Repository, rel: str,
          result: Capture, touched: list[str], nested: NestedRepos, taken: set[str]) -> None:
    """Add every file under directory ``rel`` that a capture keeps and drop cached entries
    under it that are gone; what it took (the files and the directories it entered) goes into
    ``taken``."""
    if repo.path_is_ignored(rel + "/"):
        _take_tracked_under(wt, index, rel, result, touched, taken)
        return
    present: set[str] = set()
    stack = [rel]
    while stack:
        current = stack.pop()
        taken.add(current)
        try:
            entries = list(os.scandir(wt.root / current))
        except OSError as exc:
            result.skipped.append({"path": current, "reason": "unreadable",
                                   "detail": str(exc)})
            continue
        for entry in entries:
            child = f"{current}/{entry.name}"
            if entry.name == ".git":
                continue
            if git_dir_alias(entry.name):
                list_alias(repo, child, result, taken)
                continue
            if entry.is_dir(follow_symlinks=False):
                if repo.path_is_ignored(child + "/"):
                    _take_tracked_under(wt, index, child, result, touched, taken)
                    continue
                if nested.is_repo(child):
                    nested.note(child, child)
                    continue
                stack.append(child)
                continue
            if child not in index and repo.path_is_ignored(child) \
                    and child not in wt.tracked_ignored:
                continue
            present.add(child)
            taken.add(child)
            wt.update_path(index, child, result, touched)
    prefix = rel + "/"
    for path in [e.path for e in index if e.path.startswith(prefix)]:
        if path not in present and not os.path.lexists(wt.root / path) \
                and hidden_by(wt.root, path) is None:
            if remove_entry(index, path):
                result.deleted += 1


def take_tracked_ignored(wt: CrawlTarget, index: pygit2.Index, result: Capture,
                         touched: list[str]) -> list[str]:
    """Take the tracked-but-ignored files the cache does not hold, and say which: after a full
    scan (its diff skips an ignored file it does not know; cached ones it kept itself), or in
    the fast path once the user's index changed (``git add -f`` of a file nobody wrote)."""
    taken = []
    for path in sorted(wt.tracked_ignored.paths()):
        if path not in index and _takeable(wt.root, path):
            wt.update_path(index, path, result, touched, new=True)
            taken.append(path)
    return taken


def list_alias(repo: pygit2.Repository, path: str, result: Capture, taken: set[str]) -> None:
    """List ``path``, a ``.git`` in another case, once a capture (with all it holds: nothing
    under it is taken), unless the rules ignore it."""
    if path not in taken and not repo.path_is_ignored(path):
        result.skipped.append(invalid_alias(path))
    taken.add(path)


def _take_tracked_under(wt: CrawlTarget, index: pygit2.Index, directory: str,
                        result: Capture, touched: list[str], taken: set[str]) -> None:
    """The tracked-but-ignored files under the ignored ``directory`` (a crawl does not enter
    it): each one present is taken, each one gone leaves the cache."""
    for path in wt.tracked_ignored.under(directory):
        if _takeable(wt.root, path):
            wt.update_path(index, path, result, touched)
            taken.add(path)
        elif not os.path.lexists(wt.root / path) and remove_entry(index, path):
            result.deleted += 1


def _takeable(root: Path, path: str) -> bool:
    """Whether index path ``path`` names something a capture may take: present, not a
    directory, and reached through real directories only."""
    if not real_parents(root, path):
        return False
    try:
        return not stat.S_ISDIR(os.lstat(root / path).st_mode)
    except OSError:
        return False
