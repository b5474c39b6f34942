"""Seeding a new stat cache: from the user's own index and objects, else with ``git add -A``.

Owns the first fill of an empty stat cache. A git worktree's cache is seeded from its
repository's index: its entries with their stat data (so only files that differ are hashed
afterwards), and the blobs they name and the trees its cache-tree vouches for, brought into the
store by ``object_import``. Anything else is primed by ``git add -A`` into the cache's own git
dir (faster than libgit2 cold: docs/performance.md). A seed also says which files the secret
scan must read (``seed_from_repository``'s list): only those whose staged content the user's
HEAD does not hold, since committed history is already wherever the user pushes it
(docs/secrets.md).

Promises: objects are copied into the store's own files, never borrowed through alternates (the
user's own gc could delete objects we depend on); the user's repository is only read; a seed
that cannot be done safely (an index we do not understand, an object that cannot be copied) is
refused, never half-done; when the HEAD commit cannot be read, every seeded file is scanned.
"""

from __future__ import annotations

import logging
import os
import random
import struct
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import DeltaStatus

from snapshotd.capture.raw_bytes import (
    all_entries,
    attribute_sources,
    conversion_possible,
    converted_entries,
    size_keeping_entries,
    spoil_sizes,
)
from snapshotd.capture.scan_rules import DirNames
from snapshotd.core import (
    GIT_FSYNC_ARGS,
    CacheNode,
    SeedIndex,
    blocking_file,
    common_dir,
    head_commit,
    not_regular,
    read_regular,
    strip_index,
    sync_object_dirs,
    user_gitdir,
)
from snapshotd.store import cache_git_env, import_objects

if TYPE_CHECKING:
    from snapshotd.store import Store

log = logging.getLogger("snapshotd.seeding")

# How many of a worktree's objects are looked up before concluding the store has none.
SEED_SAMPLE = 256


@dataclass
class Seeded:
    """What a seed hands the capture that follows it."""

    to_scan: list[str]  # the seeded paths the secret scan must read (``uncommitted_paths``)
    # The seeded directories (``dir_shape``), for that capture's listing of unseen entries
    # only: any later change to the cache makes it wrong.
    shape: dict[str, DirNames] | None


def seed_from_repository(root: Path, cache_gitdir: Path, store: Store) -> Seeded | None:
    """First capture of git worktree ``root``: copy the objects its index names into the store
    and write that index's entries, with their stat data, as the cache's index file in
    ``cache_gitdir``. The trees of its cache-tree are copied too and the cache-tree kept, so
    the first tree write reuses every directory the user's index vouches for instead of
    writing ~one loose object per directory (seconds at 100,000 files); git's own
    ``write-tree`` and ``commit`` trust the same cache. Returns the seeded paths the secret scan
    must read (``uncommitted_paths``) and the seeded directories (``dir_shape``), or None when
    the seed cannot be done safely; the caller then builds the cache cold."""
    gitdir = user_gitdir(root)
    if gitdir is None:
        return None
    try:
        common = common_dir(gitdir)
    except OSError:
        return None
    # What the seed and the git commands it runs in the user's repository read: a FIFO there
    # (a hostile tree) would stall the capture for good; the cache is then built cold.
    try:
        odd = not_regular(gitdir / "index") or blocking_file(gitdir)
    except OSError:
        return None
    if odd is not None:
        log.warning("not seeding the stat cache of %s from its repository: %s is not a regular "
                    "file", root, odd)
        return None
    try:
        seed = strip_index(read_regular(gitdir / "index"))
    except (OSError, ValueError, struct.error):
        return None
    if seed is None:
        return None
    # Distinct ids (identical files or directories name one object), as import_objects needs.
    distinct = set(seed.blobs)
    distinct.update(seed.trees)
    wanted = list(distinct)
    del distinct
    with_trees = seed.cache_tree is not None
    with store.lock:
        missing = _missing_objects(store.repo.odb, wanted)
    if missing and not import_objects(gitdir, store.path, missing, store.fsync):
        # A tree the cache-tree names may be gone from the user's repository (gc'd after
        # a reset): seed the blobs alone; the trees are then written from the entries.
        with_trees = False
        trees = set(seed.trees)
        missing = [oid for oid in missing if oid not in trees]
        if missing and not import_objects(gitdir, store.path, missing, store.fsync):
            return None
    _spoil_converted(root, gitdir, common, seed, store, cache_gitdir / "index.attrs")
    tmp = cache_gitdir / "index.seed"
    tmp.write_bytes(seed.index_file(with_cache_tree=with_trees))
    os.replace(tmp, cache_gitdir / "index")
    shape = dir_shape(seed.nodes, seed.count) if seed.nodes else None
    return Seeded(uncommitted_paths(gitdir, seed, cache_gitdir), shape)


def _spoil_converted(root: Path, gitdir: Path, common: Path, seed: SeedIndex,
                     store: Store, scratch: Path) -> None:
    """Spoil the stat data of the seed's entries whose blob is not the file's bytes (the user's
    git converted it: line endings, a filter such as Git LFS's), so that the first capture
    reads those files and stores them as they are (``raw_bytes``): those whose blob's size is
    not the file's, and those a filter or working-tree encoding applies to (a conversion that
    may keep the size; ``scratch`` an index file for git meanwhile). Looked for only when the
    user's repository can convert at all."""
    sources = attribute_sources(root, gitdir, common)
    if not conversion_possible(gitdir, seed.entries, sources):
        return
    # Two git processes, side by side: the blobs' sizes and the attributes.
    kept: list[list[int] | None] = []

    def ask_attributes() -> None:
        try:
            kept.append(size_keeping_entries(root, gitdir, seed.entries, scratch, sources))
        except Exception:  # noqa: BLE001 - logged; every entry is then read again
            log.exception("seed of %s: could not tell which files a filter or encoding "
                          "converts; every seeded file is read again", root)

    asking = threading.Thread(target=ask_attributes, name="seed-attributes")
    asking.start()
    try:
        converted = set(converted_entries(seed.entries, store.path))
    finally:
        asking.join()
    listed = kept[0] if kept else None
    converted.update(all_entries(seed.entries) if listed is None else listed)
    if converted:
        seed.entries = spoil_sizes(seed.entries, sorted(converted))
        log.info("seed of %s: %d file(s) whose staged blob is a converted form of the file "
                 "(attributes or core.autocrlf) are read again", root, len(converted))


def dir_shape(nodes: list[CacheNode], entries: int) -> dict[str, DirNames] | None:
    """For each directory a cache-tree (``SeedIndex.nodes``, pre-order: a node is valid only if
    every node below it is) vouches for, the number of names the index holds directly in it and
    its subdirectories' names: a valid node's entry count is its entries, its subtrees' are
    theirs. None when the nodes are not one tree, or its root, valid, does not count
    ``entries``."""
    shape: dict[str, DirNames] = {}
    # The open nodes: [path, entries, subtrees left, names, entries of the subtrees].
    stack: list[list] = []
    for at, (raw_name, count, subtrees, _oid) in enumerate(nodes):
        if stack:
            parent = stack[-1]
            parent[2] -= 1
            name = os.fsdecode(raw_name)
            parent[3].append(name)
            parent[4] += count
            path = f"{parent[0]}/{name}" if parent[0] else name
        elif at:
            return None  # a second root
        elif count not in (-1, entries):
            return None  # a root that does not count the index's entries
        else:
            path = ""
        stack.append([path, count, subtrees, [], 0])
        while stack and stack[-1][2] == 0:
            path, count, _left, names, below = stack.pop()
            if count >= 0:
                if count - below < 0:
                    return None
                shape[path] = (count - below + len(names), tuple(names))
    return shape if not stack else None


def uncommitted_paths(gitdir: Path, seed: SeedIndex, cache_gitdir: Path) -> list[str]:
    """The paths of the user's index (``seed``, read from ``gitdir``) whose staged content its
    HEAD commit does not hold: none when the index's cache-tree vouches for HEAD's very tree,
    else libgit2's diff of HEAD's tree to the index. Every seeded path (listed from the cache's
    index in ``cache_gitdir``) when HEAD is unborn or cannot be read."""
    try:
        repo = pygit2.Repository(str(gitdir))
        head = head_commit(gitdir)  # not libgit2's: it would block on a FIFO among the refs
        if head is not None:
            tree = repo[head].peel(pygit2.Commit).tree
            if _cache_tree_root(seed.cache_tree) == str(tree.id):
                return []
            return [d.new_file.path for d in repo.index.diff_to_tree(tree).deltas
                    if d.status != DeltaStatus.DELETED]
    except (pygit2.GitError, KeyError, ValueError, OSError) as exc:
        log.warning("could not compare the index of %s with its HEAD commit (every seeded file "
                    "is scanned for secrets): %s", gitdir, exc)
    paths = index_paths(cache_gitdir)
    if paths is None:
        paths = [e.path for e in pygit2.Index(str(cache_gitdir / "index"))]
    return paths


def index_paths(gitdir: Path, wanted: Callable[[bytes], bool] | None = None) -> list[str] | None:
    """Every path of the index file of git dir ``gitdir`` (a stat cache's), as ``git ls-files``
    lists it: git's own loop over the entries costs a few milliseconds for 10,000, iterating a
    ``pygit2.Index`` in Python ten times that. None (logged) when git fails. With ``wanted``,
    the index file's bytes are asked first (in versions 2 and 3 every name is there whole,
    ended by a NUL): when it says no, [] without running git."""
    if wanted is not None:
        try:
            data = (gitdir / "index").read_bytes()
        except FileNotFoundError:
            return []
        except OSError:
            data = b""
        if data[:4] == b"DIRC" and data[4:8] in (b"\0\0\0\2", b"\0\0\0\3") \
                and not wanted(data):
            return []
    env = cache_git_env(gitdir)
    try:
        proc = subprocess.run(["git", "ls-files", "-z"], cwd=str(gitdir), env=env,
                              capture_output=True, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("could not list the index of %s: %s", gitdir, exc)
        return None
    if proc.returncode != 0:
        log.warning("could not list the index of %s: %s", gitdir,
                    proc.stderr.decode(errors="replace").strip())
        return None
    # One decode of the whole listing, as os.fsdecode decodes each name (UTF-8, undecodable
    # bytes kept as surrogates).
    return proc.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]


def _cache_tree_root(cache_tree: bytes | None) -> str | None:
    """The tree id the cache-tree's root node vouches for, or None (no cache-tree, or a root
    invalidated by a change below it)."""
    if not cache_tree:
        return None
    nul = cache_tree.find(b"\0")
    newline = cache_tree.find(b"\n", nul)
    if nul != 0 or newline < 0 or int(cache_tree[nul + 1:newline].split(b" ")[0]) < 0:
        return None
    return cache_tree[newline + 1:newline + 21].hex()


def prime_with_git_add(root: Path, cache_gitdir: Path, store: Path, fsync: bool) -> bool:
    """Fill the empty index of ``cache_gitdir`` with ``git add -A`` of worktree ``root``.
    True when git ran to the end (exit 1 only means some files could not be read: they are
    left out, as the libgit2 scan would skip them). With ``fsync`` the objects git wrote into
    ``store`` are durable on return: git fsyncs each file (``GIT_FSYNC_ARGS``; by default it
    fsyncs no loose object), and the directories they were linked into are fsynced here."""
    env = cache_git_env(cache_gitdir, root)
    proc = subprocess.run(
        ["git", *(GIT_FSYNC_ARGS if fsync else ()), "-c", "core.quotePath=false", "add", "-A",
         "--ignore-errors", "."],
        cwd=str(root), env=env, capture_output=True, timeout=3600,
    )
    if proc.returncode not in (0, 1):
        return False
    if fsync:
        sync_object_dirs(store)
    return True


def _missing_objects(odb: pygit2.Odb, oids: list[bytes]) -> list[bytes]:
    """Which of ``oids`` the store lacks. A lookup that misses costs libgit2 a rescan of the
    pack directory (tens of microseconds; seconds for 100,000 objects), so a store that holds
    none of a random sample of them (a repository seen for the first time) is taken to hold
    none at all. Wrong only towards copying: at worst an object the store already has is
    stored twice (a 1 % overlap goes unseen 8 % of the time), never one is left out."""
    sample = random.sample(oids, min(len(oids), SEED_SAMPLE))
    if not any(pygit2.Oid(raw=oid) in odb for oid in sample):
        return oids
    return [oid for oid in oids if pygit2.Oid(raw=oid) not in odb]
