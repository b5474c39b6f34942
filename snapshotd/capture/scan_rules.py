"""What a capture may read from a worktree, and how a failed read is told apart from a failed write.

Owns the per-path rules every capture path (the full scan, the crawl of a new directory and the
fast path) applies before it hashes a file, so the three agree: only regular files and symlinks
are content (a FIFO, socket or device is never opened, listed ``special``); a path inside a
nested repository is named by that repository (``NestedRepos.found`` / ``note``, or listed
``nested-repository``) and captured whole by its own cache (``nested_repos``); a path libgit2
could not open is named (``unreadable_path``), as is one that vanished (``vanished_path``), one whose directory cannot be listed by that
directory (``hidden_by``), and a path read from an index is read only through real directories
(``real_parents``); a ``.git`` in another case is listed, never entered (``git_dir_alias``);
``source_readable`` and ``change_mark`` tell a store failure from an unreadable or rewritten
file; ``list_unseen``, what a diff never reports (uncached special files, unlistable new directories).

Promises: nothing here reads more than one byte of a file, and nothing opens one so that it
can block (FIFOs are opened non-blocking, never followed through a symlink).
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Container, Mapping
from pathlib import Path

# libgit2 names the file it could not open between single quotes in its message.
_QUOTED = re.compile(r"'([^']+)'")

# One directory of a seeded cache: how many names it holds directly (files, symlinks, gitlinks
# and subdirectories), and its subdirectories' names.
DirNames = tuple[int, tuple[str, ...]]


def special_kind(mode: int) -> str | None:
    """``fifo``, ``socket``, ``char-device`` or ``block-device`` for a file that is not content
    (never opened); None for a regular file, a symlink or a directory."""
    if stat.S_ISFIFO(mode):
        return "fifo"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode):
        return "char-device"
    if stat.S_ISBLK(mode):
        return "block-device"
    return None


def special_entry(path: str, mode: int) -> dict | None:
    """The ``skipped`` entry of a special file at ``path``, or None when it is content."""
    kind = special_kind(mode)
    if kind is None:
        return None
    return {"path": path, "reason": "special", "kind": kind}


class NestedRepos:
    """Which paths of one worktree lie inside a nested repository, with the answer for each
    directory remembered for the life of one capture.

    As libgit2's scan (and ``git add -A``) decide: a directory holding its own ``.git`` is a
    nested repository only while none of its files were captured; a directory already captured
    stays an ordinary directory (``tracked`` tells which were)."""

    def __init__(self, root: Path, tracked: Callable[[str], bool]) -> None:
        self.root = root
        self.tracked = tracked
        self._known: dict[str, bool] = {}
        # Nested repositories the capture met -> the paths reported inside each (relative to
        # it; empty: scan it whole), for their own caches to capture.
        self.found: dict[str, set[str]] = {}

    def owner(self, rel: str) -> str | None:
        """The nested repository directory holding ``rel`` (``rel`` itself when it is one), or
        None. The worktree root's own ``.git`` does not count."""
        parts = rel.split("/")
        for depth in range(1, len(parts) + 1):
            directory = "/".join(parts[:depth])
            if self.is_repo(directory):
                return directory
        return None

    def note(self, owner: str, rel: str) -> None:
        """Remember that ``rel`` changed inside nested repository ``owner``; ``rel`` being
        ``owner`` itself (the directory came, or a crawl met it) has it scanned whole."""
        paths = self.found.setdefault(owner, set())
        if rel == owner:
            paths.add("")
        else:
            paths.add(rel[len(owner) + 1:])

    def is_repo(self, directory: str) -> bool:
        """Whether ``directory`` is a nested repository (captured by a cache of its own)."""
        known = self._known.get(directory)
        if known is None:
            known = os.path.lexists(os.path.join(self.root, directory, ".git")) \
                and not self.tracked(directory)
            self._known[directory] = known
        return known


def change_mark(path: Path) -> tuple[int, int, int] | None:
    """What a change to the file at ``path`` moves: its size, mtime and ctime (None: gone)."""
    try:
        st = path.lstat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns, st.st_ctime_ns


def source_readable(path: Path) -> bool:
    """Whether the file at ``path`` can be read now: a symlink's target name, or a regular
    file's first byte (opened without blocking, so a file swapped for a FIFO cannot hang)."""
    try:
        if path.is_symlink():
            os.readlink(path)
            return True
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return False
    try:
        os.read(fd, 1)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def readable_size(path: Path, limit: int) -> int | None:
    """How many bytes reading the file at ``path`` gives, counted up to ``limit + 1`` (None: it
    cannot be read); opened without blocking or following a symlink, as ``source_readable``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return None
    total = 0
    try:
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            total += len(chunk)
        return total
    except OSError:
        return None
    finally:
        os.close(fd)


def unreadable_path(exc: BaseException, root: Path) -> str | None:
    """The worktree-relative path a libgit2 scan failure names when the failure is a permission
    refused on one of the worktree's files, else None."""
    text = str(exc)
    if "Permission denied" not in text:
        return None
    prefix = str(root).rstrip("/") + "/"
    for quoted in _QUOTED.findall(text):
        if quoted.startswith(prefix):
            return quoted[len(prefix):].rstrip("/")
    return None


def vanished_path(exc: BaseException, root: Path) -> str | None:
    """The worktree-relative path a libgit2 failure names when the failure is that file not
    being found ("could not find '<path>' to open": deleted between the walk and the read),
    else None. The worktree changed under the capture; neither the store nor the file failed."""
    text = str(exc)
    if "No such file or directory" not in text and not (
            isinstance(exc, OSError) and exc.errno == errno.ENOENT):
        return None
    prefix = str(root).rstrip("/") + "/"
    for quoted in _QUOTED.findall(text):
        if quoted.startswith(prefix):
            return quoted[len(prefix):].rstrip("/")
    return None


def real_parents(root: Path, rel: str) -> bool:
    """Whether every directory above ``rel`` is a real directory (no symlink on the way): a
    path read from an index, not found by walking, could otherwise lead out of the tree."""
    current = str(root)
    for part in rel.split("/")[:-1]:
        current = os.path.join(current, part)
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                return False
        except OSError:
            return False
    return True


def git_dir_alias(name: str) -> bool:
    """Whether ``name`` is ``.git`` in another case (``.GIT``, ``.Git``): libgit2's walk passes
    over it as over ``.git``, and git refuses every path through it, so no checkpoint can hold
    it or anything under it."""
    return len(name) == 4 and name != ".git" and name.lower() == ".git"


def git_dir_alias_of(rel: str) -> str | None:
    """The path of the first component of ``rel`` that is ``.git`` in another case, or None
    (on every path the watcher reports: the common answer costs one ``lower``)."""
    if ".git" not in rel.lower():
        return None
    parts = rel.split("/")
    for depth, part in enumerate(parts, 1):
        if git_dir_alias(part):
            return "/".join(parts[:depth])
    return None


def invalid_alias(path: str) -> dict:
    """The ``skipped`` entry of ``path``, a ``.git`` in another case (with all it holds)."""
    return {"path": path, "reason": "invalid-path",
            "detail": "a .git name in another case: git refuses it and every path under it"}


def hidden_by(root: Path, rel: str) -> str | None:
    """The shallowest directory on ``rel``'s path that this process cannot list or enter (so
    a scan cannot see what is inside it), or None when every directory above ``rel`` is open."""
    parts = rel.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        directory = "/".join(parts[:depth])
        full = os.path.join(root, directory)
        try:
            if not stat.S_ISDIR(os.lstat(full).st_mode):
                return None  # a file (or link) now: nothing lies below it to hide
        except OSError:
            return None  # gone
        if not os.access(full, os.R_OK | os.X_OK):
            return directory
    return None


def list_unseen(root: Path, ignored: Callable[[str], bool], tracked: Container[str],
                listed: Container[str], nested: NestedRepos,
                shape: Mapping[str, DirNames] | None = None,
                changed: Container[str] = ()) -> list[dict]:
    """The ``skipped`` entries libgit2's diff leaves unreported: every FIFO, socket or device
    not in the cache (``special``), every directory this process cannot list that holds no
    cached file (``unreadable``) and every ``.git`` in another case (``invalid-path``), outside
    ignored paths and nested repositories. ``tracked``
    holds the cache's paths, ``listed`` the paths already listed.

    One walk of the tree's directory entries: names and types only (``scandir``'s
    ``d_type``), a stat only for a special file, an ignore check only for a directory or
    a special file; never a file opened.

    ``shape`` (the seeded cache's directories, ``seeding.dir_shape``) spares the look at each
    entry of a directory the diff reported nothing in or below (not in ``changed``): there
    every name the cache holds is on disk as it was seeded, so a listing of exactly that many
    names holds nothing else, and only the directories below it are walked."""
    found: list[dict] = []
    stack = [""]
    while stack:
        current = stack.pop()
        path = os.path.join(root, current) if current else root
        known = shape.get(current) if shape is not None and current not in changed else None
        try:
            # A seeded directory is counted by its names alone (no DirEntry made for each).
            if known is not None and len(os.listdir(path)) == known[0]:
                stack.extend(child for child in (f"{current}/{name}" if current else name
                                                 for name in known[1]) if child not in listed)
                continue
            entries = list(os.scandir(path))
        except PermissionError:
            if current not in listed and not (current and ignored(current + "/")):
                found.append({"path": current, "reason": "unreadable",
                              "detail": "the directory cannot be listed"})
            continue
        except OSError:
            continue  # gone since its parent was listed
        if current and any(e.name == ".git" for e in entries) and nested.is_repo(current):
            continue  # listed by the diff as a nested repository
        for entry in entries:
            if entry.name == ".git":
                continue
            child = f"{current}/{entry.name}" if current else entry.name
            if git_dir_alias(entry.name):
                if child not in listed and not ignored(child + "/") and not ignored(child):
                    found.append(invalid_alias(child))
                continue
            if entry.is_dir(follow_symlinks=False):
                if child not in listed and not ignored(child + "/"):
                    stack.append(child)
            elif not entry.is_file(follow_symlinks=False) and not entry.is_symlink():
                _special_child(entry, child, found, ignored, tracked, listed)
    return found


def _special_child(entry: os.DirEntry, child: str, found: list[dict],
                   ignored: Callable[[str], bool], tracked: Container[str],
                   listed: Container[str]) -> None:
    try:
        special = special_entry(child, entry.stat(follow_symlinks=False).st_mode)
    except OSError:
        return  # gone since the listing, or its directory cannot be searched
    if special is not None and child not in listed and child not in tracked \
            and not ignored(child):
        found.append(special)
