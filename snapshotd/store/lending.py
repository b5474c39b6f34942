"""What the store lends its stat caches: handles on their git dirs, and git's environment there.

A stat cache's git dir (``<home>/worktrees/<id>``, a nested repository's cache below it) is a
worktree of ``store.git``: it shares the store's objects and refs through its ``commondir``
file. Owns ``open_cache`` (the one way snapshotd opens a libgit2 handle on such a git dir) and
``cache_git_env`` (the environment under which the git CLI runs there).

The seal (checked by ``tests/test_boundaries.py``): outside ``snapshotd.store``, no module opens
a repository on the store or on one of its stat caches but through ``Store.reader``,
``Store.thread_reader`` or ``open_cache``, and none runs git there but under ``cache_git_env``.
Through a lent handle a cache writes blobs, trees and its own index file, nothing else: refs
and commits are written by the store's own code only.

Promises: ``cache_git_env`` drops the caller's ``GIT_*`` variables and the system config, and
takes no optional lock (git never rewrites the cache's index of its own accord).
"""

from __future__ import annotations

import os
from pathlib import Path

import pygit2


def open_cache(gitdir: Path) -> pygit2.Repository:
    """A new libgit2 handle on the stat cache whose git dir is ``gitdir``."""
    return pygit2.Repository(str(gitdir))


def cache_git_env(gitdir: Path, root: Path | None = None) -> dict[str, str]:
    """The environment for a git command on the stat cache whose git dir is ``gitdir`` (and,
    given, its worktree ``root``): none of the caller's ``GIT_*`` variables, no system
    configuration, and no optional lock taken (git never rewrites the cache's index of its own
    accord)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_DIR=str(gitdir), GIT_CONFIG_NOSYSTEM="1", GIT_OPTIONAL_LOCKS="0")
    if root is not None:
        env["GIT_WORK_TREE"] = str(root)
    return env
