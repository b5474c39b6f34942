"""Seeding a new stat cache: from the user's own index and objects, else with ``git add -A``.

Owns the first fill of an empty stat cache. A git worktree's cache is seeded from its
repository's index: its entries with their stat data (so only files that differ are hashed
afterwards), and the blobs they name and the trees its cache-tree vouches for, copied into the
store as one pack through ``git pack-objects`` / ``git index-pack``. Anything else is primed by
running ``git add -A`` into the cache's own git dir (several times faster than libgit2 cold).

A seed also says which of its files the secret scan must read (``seed_from_repository``'s
list): only those whose staged content the user's HEAD commit does not hold. A file of the
user's own committed history is already in their repository, wherever they push it; reading
every seeded file would cost the first capture a read of the whole tree (docs/secrets.md).

Promises: objects are copied, never borrowed through alternates (the user's own gc could delete
objects we depend on); the user's repository is only read; a seed that cannot be done safely
(an index we do not understand, an object that cannot be copied) is refused, never half-done;
when the HEAD commit cannot be read, every seeded file is to be scanned.
"""

from __future__ import annotations

import logging
import os
import random
import struct
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import DeltaStatus, FileMode

from snapshotd.durable import GIT_FSYNC_ARGS, sync_dirs, sync_object_dirs
from snapshotd.user_repo import SeedIndex, strip_index, user_gitdir

if TYPE_CHECKING:
    from snapshotd.store import Store

log = logging.getLogger("snapshotd.seeding")

# How many of a worktree's objects are looked up before concluding the store has none.
SEED_SAMPLE = 256


def seed_from_repository(root: Path, cache_gitdir: Path, store: Store) -> list[str] | None:
    """First capture of git worktree ``root``: copy the objects its index names into the store
    and write that index's entries, with their stat data, as the cache's index file in
    ``cache_gitdir``. The trees of its cache-tree are copied too and the cache-tree kept, so
    the first tree write reuses every directory the user's index vouches for instead of
    writing ~one loose object per directory (seconds at 100,000 files); git's own
    ``write-tree`` and ``commit`` trust the same cache. Returns the seeded paths the secret scan
    must read (``uncommitted_paths``), or None when the seed cannot be done safely; the caller
    then builds the cache cold."""
    gitdir = user_gitdir(root)
    if gitdir is None:
        return None
    try:
        seed = strip_index((gitdir / "index").read_bytes())
    except (OSError, ValueError, struct.error):
        return None
    if seed is None:
        return None
    # Distinct ids (identical files or directories name one object), as _copy_objects needs.
    wanted = list({oid for oid, mode in seed.objects if mode != int(FileMode.COMMIT)}
                  | set(seed.trees))
    with_trees = seed.cache_tree is not None
    with store.lock:
        missing = _missing_objects(store.repo.odb, wanted)
    if missing and not _copy_objects(gitdir, store.path, missing, store.fsync):
        # A tree the cache-tree names may be gone from the user's repository (gc'd after
        # a reset): seed the blobs alone; the trees are then written from the entries.
        with_trees = False
        trees = set(seed.trees)
        missing = [oid for oid in missing if oid not in trees]
        if missing and not _copy_objects(gitdir, store.path, missing, store.fsync):
            return None
    tmp = cache_gitdir / "index.seed"
    tmp.write_bytes(seed.index_file(with_cache_tree=with_trees))
    os.replace(tmp, cache_gitdir / "index")
    return uncommitted_paths(gitdir, seed, cache_gitdir)


def uncommitted_paths(gitdir: Path, seed: SeedIndex, cache_gitdir: Path) -> list[str]:
    """The paths of the user's index (``seed``, read from ``gitdir``) whose staged content its
    HEAD commit does not hold: none when the index's cache-tree vouches for HEAD's very tree,
    else libgit2's diff of HEAD's tree to the index. Every seeded path (listed from the cache's
    index in ``cache_gitdir``) when HEAD is unborn or cannot be read."""
    try:
        repo = pygit2.Repository(str(gitdir))
        if not repo.head_is_unborn:
            tree = repo.head.peel(pygit2.Commit).tree
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_DIR=str(gitdir), GIT_CONFIG_NOSYSTEM="1", GIT_OPTIONAL_LOCKS="0")
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
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_DIR=str(cache_gitdir), GIT_WORK_TREE=str(root),
               GIT_CONFIG_NOSYSTEM="1", GIT_OPTIONAL_LOCKS="0")
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


def _missing_objects(odb: pygit2.Odb, oids: list[str]) -> list[str]:
    """Which of ``oids`` the store lacks. A lookup that misses costs libgit2 a rescan of the
    pack directory (tens of microseconds; seconds for 100,000 objects), so a store that holds
    none of a random sample of them (a repository seen for the first time) is taken to hold
    none at all. Wrong only towards copying: at worst an object the store already has is
    stored twice (a 1 % overlap goes unseen 8 % of the time), never one is left out."""
    sample = random.sample(oids, min(len(oids), SEED_SAMPLE))
    if not any(pygit2.Oid(hex=oid) in odb for oid in sample):
        return oids
    return [oid for oid in oids if pygit2.Oid(hex=oid) not in odb]


def _copy_objects(user_gitdir: Path, store: Path, oids: list[str], fsync: bool) -> bool:
    """Copy objects (distinct ids) from the user's repository into the store as one pack.
    True only when every one arrived: ``pack-objects`` given ids packs exactly those (and fails
    on one it cannot read), so a new pack whose index counts ``len(oids)`` objects holds them
    all, which spares looking each of them up again."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    try:
        # --window=0: deltas the user's packs hold are reused as they are, and no new delta
        # search runs (for a clone of 1,000,000 files that search is most of the copy's CPU;
        # what it would save in store size the user's repository did not bother to save).
        packer = subprocess.Popen(["git", "--git-dir", str(user_gitdir), "pack-objects",
                                   "--stdout", "-q", "--window=0"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        # index-pack fsyncs the pack and its index; their names need objects/pack fsynced.
        indexer = subprocess.Popen(["git", *GIT_FSYNC_ARGS, "--git-dir", str(store),
                                    "index-pack", "--stdin"],
                                   stdin=packer.stdout, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, env=env)
        assert packer.stdin is not None and packer.stdout is not None
        packer.stdout.close()  # the indexer holds it now
        try:
            packer.stdin.write(("\n".join(oids) + "\n").encode())
        finally:
            packer.stdin.close()
        out, _ = indexer.communicate(timeout=3600)
        if packer.wait(timeout=3600) != 0 or indexer.returncode != 0:
            return False
        kind, _, name = out.decode(errors="replace").strip().partition("\t")
        if kind not in ("pack", "keep") or len(name) != 40:
            return False
        with open(store / "objects" / "pack" / f"pack-{name}.idx", "rb") as idx:
            header = idx.read(8 + 256 * 4)  # version 2: magic, version, fan-out table
        if header[:8] != b"\377tOc\0\0\0\2" or len(header) != 8 + 256 * 4:
            return False
        if fsync:
            sync_dirs([store / "objects" / "pack"])
        return struct.unpack(">I", header[-4:])[0] == len(oids)
    except (OSError, subprocess.TimeoutExpired):
        return False
