"""Checks on a worktree's stat cache (its git index) against the store, and small lookups on it.

Owns what ``worktree_index`` asks of a cache it loads or keeps: whether each entry's blob and
the index's tree cache still exist in the store (a cache left by a killed daemon may name
objects a gc removed since), carrying an index over to a reopened repository object, and the
lookups of one path in an index or a tree.

Promises: a cache that names a missing object is repaired (entries dropped, to be hashed again)
or refused (``GitError``), never trusted; nothing here writes to the store.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pygit2
from pygit2.enums import FileMode

log = logging.getLogger("snapshotd.store")
# A gitlink's mode as the index file stores it (32 bits, big-endian).
GITLINK_MODE_BYTES = int(FileMode.COMMIT).to_bytes(4, "big")


def tree_has(repo: pygit2.Repository, tree: str | None, path: str) -> bool:
    """Whether the last captured ``tree`` holds ``path``."""
    if tree is None:
        return False
    try:
        repo[tree].peel(pygit2.Tree)[path]
        return True
    except (KeyError, ValueError, pygit2.GitError):
        return False


def entry_id(index: pygit2.Index, path: str) -> str | None:
    """``path``'s blob id and mode in ``index`` (None when it holds no such entry)."""
    try:
        entry = index[path]
    except KeyError:
        return None
    return f"{entry.id}:{entry.mode}"


def drop_entries_without_objects(repo: pygit2.Repository, index: pygit2.Index) -> None:
    """A cached entry whose blob the store lacks (a damaged or foreign cache) would produce a
    tree with a hole: such entries are dropped so their files are hashed again."""
    odb = repo.odb
    missing = [e.path for e in index if e.mode != FileMode.COMMIT and e.id not in odb]
    for path in missing:
        index.remove(path)


def check_tree_cache(index: pygit2.Index) -> None:
    """Raise ``GitError`` when the cache's tree cache names a tree the store no longer has.

    A directory changed and changed back has its old tree id again; if gc removed that tree
    while the cache on disk was stale (a killed daemon), every tree written from it would fail
    ("invalid object"). Any other failure here is the store's to report at the capture."""
    try:
        index.write_tree()
    except pygit2.GitError as exc:
        if "invalid object" in str(exc):
            log.warning("stat cache names a tree the store no longer has (%s): rebuilt", exc)
            raise


def rebind_index(repo: pygit2.Repository, old: pygit2.Index) -> pygit2.Index:
    """Carry an in-memory index over to a reopened repository object."""
    old.write()
    index = repo.index
    index.read(True)
    return index


def may_hold_gitlinks(gitdir: Path) -> bool:
    """Whether the index file the cache was read from may hold a gitlink: its mode (0o160000)
    appears in the file's bytes. Iterating a 10,000-entry index through pygit2 costs tens of
    milliseconds of a first capture; the bytes answer "no" for nearly every repository."""
    try:
        data = (gitdir / "index").read_bytes()
    except FileNotFoundError:
        return False  # a new, empty cache
    except OSError:
        return True
    return GITLINK_MODE_BYTES in data
