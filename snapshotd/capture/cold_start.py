"""Starting an empty stat cache: what a worktree's first capture does before its scan.

Owns ``prime_cold``: fill a worktree's empty cache from the worktree's own git index when it
has one (``seeding.seed_from_repository``: its objects copied, only the files that differ from
it hashed by the scan that follows), else with ``git add -A`` (``seeding.prime_with_git_add``;
the files the user's repository tracks although an ignore rule matches them, which it leaves
out, are taken by that scan); and ``listed_paths``, every path of a cache read from its index.
Promises:
- What is primed is only a start: the full scan that follows compares every file with it, so a
  seed that is stale or a ``git add`` that missed a file cannot make a checkpoint wrong; a
  seeded index libgit2 refuses is removed, never used.
- ``Primed.unscanned`` names the paths the secret scan must read (those the user's HEAD does not
  vouch for, or every path ``git add`` took); ``Primed.shape`` the seeded directories, for the
  one scan that follows the seed. A cache that could be primed neither way stays empty
  (``unscanned`` None): that scan hashes every file through libgit2.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from snapshotd.capture.scan_rules import DirNames
from snapshotd.capture.seeding import index_paths, prime_with_git_add, seed_from_repository
from snapshotd.store import open_cache

if TYPE_CHECKING:
    from snapshotd.store import Store

@dataclass
class Primed:
    """The cache after ``prime_cold``: the handle its index now belongs to, and for the scan
    that follows, what the secret scan must read and the seeded directories."""

    repo: pygit2.Repository
    index: pygit2.Index
    unscanned: list[str] | None = None  # None: nothing was primed
    shape: dict[str, DirNames] | None = None
    seeded: bool = False  # a copy of the user's index: it holds every file the user tracks


def prime_cold(root: Path, gitdir: Path, store: Store, repo: pygit2.Repository,
               index: pygit2.Index) -> Primed:
    """Start the empty cache ``index`` of worktree ``root`` (its git dir ``gitdir``, opened as
    ``repo``): seeded, else primed by ``git add -A``, else left empty."""
    seed = seed_from_repository(root, gitdir, store)
    if seed is not None:
        repo, seeded = _open_seeded(gitdir)
        if seeded is not None:
            return Primed(repo, seeded, seed.to_scan, seed.shape, seeded=True)
    if not prime_with_git_add(root, gitdir, store.path, store.fsync):
        return Primed(repo, index)
    # Tracked files the rules ignore, which ``git add -A`` into this fresh index left out,
    # are taken by the full scan that follows (``crawl.take_tracked_ignored``).
    repo = open_cache(gitdir)
    index = repo.index
    return Primed(repo, index, listed_paths(gitdir, index))


def listed_paths(gitdir: Path, index: pygit2.Index,
                 wanted: Callable[[bytes], bool] | None = None) -> list[str]:
    """Every path of ``index``, read from its file in ``gitdir`` (which holds all of them:
    seeded, primed and loaded caches are read from it) by git, else from libgit2 one by one;
    none when ``wanted`` says the file's bytes name nothing wanted (``seeding.index_paths``)."""
    paths = index_paths(gitdir, wanted)
    return [e.path for e in index] if paths is None else paths


def _open_seeded(gitdir: Path) -> tuple[pygit2.Repository, pygit2.Index | None]:
    """A new handle on ``gitdir`` and the index ``seed_from_repository`` wrote there, or None
    (and the file gone) if libgit2 refuses it."""
    try:
        repo = open_cache(gitdir)
        return repo, repo.index  # a new handle's index is read from the file here
    except pygit2.GitError:
        (gitdir / "index").unlink(missing_ok=True)
        return open_cache(gitdir), None
