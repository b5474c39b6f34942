"""The full scan of a worktree libgit2 refuses: more than 100 nested directories.

libgit2's directory iterator stops at a fixed depth (100, "directory nesting too deep"; no
option raises it), while git's own walk has no such limit. Owns ``git_add_scan``: the stat
cache's index is brought up to date by ``git add -A`` run into the cache's git dir (it shares
the store's objects and the cache's ignore rules, as the cold prime does), and the change is
read back entry by entry.

Promises: the result holds what ``git add -A`` stages, minus what the stat cache never holds
(nested repositories, added by git as gitlinks; files over the size limit): those are dropped
and listed, as the libgit2 scan lists them (a nested repository listed so is then captured
whole by a cache of its own, see ``nested_repos``). A write the store's disk refused raises
``StoreError`` (``store-write-failed``); a file git could not read is listed ``unreadable``.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

from snapshotd.capture.scan_rules import git_dir_alias_of, invalid_alias
from snapshotd.store import STORE_WRITE_FAILED, WRITE_FAILURE_MESSAGES, StoreError, cache_git_env

# git reports a file it could not read as: error: open("path"): Permission denied
_OPEN_FAILED = re.compile(r'error: open\("(.+)"\): (.+)$')
# ... and one it read another number of bytes from than its size (it changed while git read it,
# or its size is not its content: a /sys file) as: error: short read while indexing path
_SHORT_READ = re.compile(r"error: short read while indexing (.+)$")
# ... and a path no tree can hold (a .git name in another case or spelling) as:
# error: invalid path 'path'
_INVALID_PATH = re.compile(r"error: invalid path '(.+)'$")


@dataclass
class DeepScan:
    """What ``git_add_scan`` changed in the index."""

    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    skipped: list[dict] = field(default_factory=list)


def git_add_scan(index: pygit2.Index, root: Path, gitdir: Path, max_file_bytes: int) -> DeepScan:
    """Bring ``index`` (the stat cache of worktree ``root``, whose git dir is ``gitdir``) up to
    date with ``git add -A`` and return what changed. The index is written to disk first (git
    reads it there, with its stat data, so unchanged files are not hashed) and read back."""
    before = {entry.path: (entry.id, entry.mode) for entry in index}
    index.write()
    env = cache_git_env(gitdir, root)
    try:
        proc = subprocess.run(
            ["git", "-c", "core.quotePath=false", "add", "-A", "--ignore-errors", "."],
            cwd=str(root), env=env, capture_output=True, timeout=3600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise StoreError("scan-failed", f"could not scan {root} with git: {exc}") from exc
    errors = proc.stderr.decode(errors="replace")
    if any(message in errors for message in WRITE_FAILURE_MESSAGES):
        raise StoreError(STORE_WRITE_FAILED, f"could not store files of {root}: "
                         f"{errors.strip()[-500:]}")
    if proc.returncode not in (0, 1):
        raise StoreError("scan-failed", f"git add in {root} exited {proc.returncode}: "
                         f"{errors.strip()[-500:]}")
    index.read(True)
    out = DeepScan(skipped=_skipped_by_git(errors))
    _collect(index, before, out, root, max_file_bytes)
    return out


def _collect(index: pygit2.Index, before: dict, out: DeepScan, root: Path,
             max_file_bytes: int) -> None:
    """Fill ``out`` with the entries that changed from ``before``; drop the ones a capture
    never holds (a new gitlink: a nested repository; a file over ``max_file_bytes``)."""
    after = {entry.path: (entry.id, entry.mode) for entry in index}
    for path, (oid, mode) in after.items():
        old = before.get(path)
        if old == (oid, mode):
            continue
        if mode == FileMode.COMMIT and old is None:
            index.remove(path)
            out.skipped.append({"path": path, "reason": "nested-repository"})
            continue
        if mode != FileMode.LINK:
            try:
                size = os.lstat(root / path).st_size
            except OSError:
                size = 0
            if size > max_file_bytes:
                index.remove(path)
                out.skipped.append({"path": path, "reason": "too-large", "bytes": size})
                continue
        (out.added if old is None else out.modified).append(path)
    out.deleted.extend(path for path in before if path not in after)


def _skipped_by_git(errors: str) -> list[dict]:
    """The files git's stderr says it could not read or hold; each keeps what the cache held
    (git left its entry as it was) and is read again by the next scan (its stat differs from the
    entry)."""
    skipped = []
    for line in errors.splitlines():
        match = _OPEN_FAILED.search(line)
        if match:
            skipped.append({"path": match.group(1), "reason": "unreadable",
                            "detail": match.group(2)})
        elif match := _INVALID_PATH.search(line):
            alias = git_dir_alias_of(match.group(1))
            if alias is None:
                skipped.append({"path": match.group(1), "reason": "invalid-path",
                                "detail": "git refuses this path in a tree"})
            elif alias not in {s["path"] for s in skipped}:
                skipped.append(invalid_alias(alias))  # once, as the other scans list it
        elif match := _SHORT_READ.search(line):
            skipped.append({"path": match.group(1), "reason": "unreadable",
                            "detail": "git read another number of bytes than its size (it "
                                      "changed while read, or its size is not its content)"})
    return skipped
