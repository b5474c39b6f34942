"""The user's own git repository, as snapshotd sees it: found and read, never written here.

Owns ``open_user_repo`` (the repository a worktree belongs to, or None), ``user_head`` (the commit
its HEAD points at, the base an attempt's export builds on) and ``objects_dir`` (where its
objects live, for a scratch repository that borrows them read-only).

Promises:
- Nothing here writes to the user's repository: not its HEAD, index, refs, config or objects.
- ``user_head`` never fails a capture: a directory outside any repository, an unborn HEAD or a
  repository libgit2 cannot read gives None (the last is logged at warning, since export then
  falls back to the HEAD at export time).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pygit2

log = logging.getLogger("snapshotd.userrepo")


def open_user_repo(path: Path) -> pygit2.Repository | None:
    """The non-bare repository whose worktree holds ``path``, or None (not in a repository).
    Discovery stops at filesystem boundaries, as git's does by default."""
    found = pygit2.discover_repository(str(path))
    if found is None:
        return None
    repo = pygit2.Repository(found)
    return None if repo.is_bare else repo


def user_head(root: Path) -> str | None:
    """The commit the HEAD of ``root``'s repository points at, or None (no repository, unborn
    HEAD, or unreadable: logged)."""
    try:
        repo = open_user_repo(root)
        if repo is None or repo.head_is_unborn:
            return None
        return str(repo.head.target)
    except (pygit2.GitError, KeyError, ValueError, OSError) as exc:
        log.warning("could not read the HEAD of the repository at %s (export will use the HEAD "
                    "at export time): %s", root, exc)
        return None


def objects_dir(repo: pygit2.Repository) -> Path:
    """The object directory of ``repo`` (its common dir's, for a linked worktree)."""
    gitdir = Path(repo.path)
    common = gitdir / "commondir"
    if common.is_file():
        text = common.read_text().strip()
        gitdir = (gitdir / text).resolve() if not Path(text).is_absolute() else Path(text)
    return gitdir / "objects"
