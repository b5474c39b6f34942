"""The files of a worktree that a checkpoint left out (ignored, excluded, secret), within a budget.

Owns ``collect``: a walk of the worktree beside the checkpoint's tree, one directory at a time;
a file the tree does not hold is a candidate (regular files and symlinks; ``.git`` never). A
directory the tree does not hold whose name is a dependency or cache folder (``SKIP_DIRS``, less
those configured to keep) is not entered. Promises: every file left out is listed with its
reason (``dependency-folder``, ``too-large``, ``over-budget``, ``special``, ``unreadable``), the
list cut at ``MAX_LISTED`` with the count of the rest; no file is followed through a symlink.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from snapshotd.store import KeptFile

SKIP_DIRS = ("node_modules", ".venv", "venv", "target", "build", "dist", ".cache",
             "__pycache__", ".next", ".gradle")
# Skips listed by name past this are only counted (``Collected.unlisted``).
MAX_LISTED = 1000


@dataclass(frozen=True)
class Budget:
    """How much a guard keeps: each file at most ``file_bytes``, all at most ``total_bytes``
    and ``files`` files; ``skip_dirs`` not entered."""
    file_bytes: int
    total_bytes: int
    files: int
    skip_dirs: frozenset[str]


@dataclass
class Collected:
    files: list[KeptFile] = field(default_factory=list)
    bytes: int = 0
    skipped: list[dict] = field(default_factory=list)
    unlisted: int = 0
    stopped: bool = False

    def skip(self, path: str, reason: str) -> None:
        if len(self.skipped) < MAX_LISTED:
            self.skipped.append({"path": path, "reason": reason})
        else:
            self.unlisted += 1


def collect(root: Path, repo: pygit2.Repository, tree_id: str | None, budget: Budget
            ) -> Collected:
    """The files under ``root`` that the tree ``tree_id`` (a checkpoint's) does not hold."""
    out = Collected()
    stack: list[tuple[str, pygit2.Tree | None]] = [("", repo[tree_id] if tree_id else None)]
    while stack and not out.stopped:
        rel, tree = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel) if rel else root) as it:
                entries = sorted(it, key=lambda e: e.name, reverse=True)
        except OSError as exc:
            out.skip(rel or ".", f"unreadable: {exc.strerror or exc}")
            continue
        held = {e.name: e for e in tree} if tree is not None else {}
        for entry in entries:
            _visit(entry, rel, held, repo, budget, out, stack)
            if out.stopped:  # guard_max_files reached: nothing past here is walked
                out.skip(rel + entry.name, "over-budget: the walk stopped here")
                break
    return out


def _visit(entry: os.DirEntry, rel: str, held: dict, repo: pygit2.Repository, budget: Budget,
           out: Collected, stack: list) -> None:
    name = entry.name
    if name == ".git":
        return
    path = rel + name
    try:
        is_dir = entry.is_dir(follow_symlinks=False)  # the directory entry's type: no stat
    except OSError:
        is_dir = False
    if is_dir:
        found = held.get(name)
        sub = repo[found.id] if found is not None and found.type_str == "tree" else None
        if sub is None and name in budget.skip_dirs:
            out.skip(path + "/", "dependency-folder")
        else:
            stack.append((path + "/", sub))
        return
    if name in held:
        return  # in the checkpoint: never read
    try:
        st = entry.stat(follow_symlinks=False)
    except OSError:
        out.skip(path, "unreadable")
        return
    if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
        out.skip(path, "special")
        return
    if st.st_size > budget.file_bytes:
        out.skip(path, "too-large")
        return
    if len(out.files) >= budget.files:
        out.stopped = True
        return
    if out.bytes + st.st_size > budget.total_bytes:
        out.skip(path, "over-budget")
        return
    kept = _read(entry.path, path, st)
    if kept is None:
        out.skip(path, "unreadable")
        return
    out.files.append(kept)
    out.bytes += len(kept.data)


def _read(full: str, path: str, st: os.stat_result) -> KeptFile | None:
    try:
        if stat.S_ISLNK(st.st_mode):
            return KeptFile(path, os.fsencode(os.readlink(full)), 0o120000)
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:  # owns fd from here, closed on any error
            data = f.read()
    except OSError:
        return None
    mode = 0o100755 if st.st_mode & 0o111 else 0o100644
    return KeptFile(path, data, mode)
