"""Nested repositories of one worktree, captured whole: each with a stat cache of its own, its
tree grafted into the worktree's tree at its path.

Owns ``Workspace``: the nested repositories a worktree's scans found (``scan_rules.NestedRepos``),
one stat cache for each (git dir ``<worktree cache>/nested/<id>/``, workdir the nested
repository), the tree each last captured and their grafting into the worktree's tree; and
``WorkspaceMatcher``, the watcher's ignore filter, answering for a path inside a nested
repository by that repository's rules. Promises:
- A nested repository's files are captured under its own rules (see ``ignore_rules``), never the
  worktree's ``.gitignore``, which decides only whether it is captured at all; nested within
  nested recurses (each nested cache has a ``Workspace`` of its own).
- No ``.git`` and no gitlink ever enters a tree; nothing is written into a nested repository.
- The full scan scans every nested repository in full (stat-cached); the fast path hands each
  only the paths reported inside it. One that is gone or lost its ``.git`` is not guessed at:
  ``intact`` says so, and the fast path declines to a full scan.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Protocol

import pygit2

from snapshotd.capture.full_scan import Capture
from snapshotd.core import name_findings
from snapshotd.store import StoreError, graft_trees

log = logging.getLogger("snapshotd.store")

NESTED_REPOSITORY = "nested-repository"
# A nested repository that vanished or turned into a link between the scan and its capture.
_GONE = ("worktree-missing", "worktree-replaced")


class IgnoreMatcher(Protocol):
    def path_is_ignored(self, path: str) -> bool: ...


class NestedCache(Protocol):
    """What a nested repository's stat cache offers (``WorktreeIndex``)."""

    root: Path
    gitdir: Path

    def capture(self) -> Capture: ...

    def capture_changed(self, paths: Iterable[str]) -> Capture | None: ...

    def persist(self) -> bool: ...

    def drop_cache(self) -> None: ...

    def cached_tree(self) -> str | None: ...

    def ignore_matcher(self) -> IgnoreMatcher: ...


class Workspace:
    """The nested repositories of one worktree and their stat caches. Not thread-safe except
    ``matchers`` (replaced whole, read by the watcher's thread): the caller serializes every
    other call under the worktree's lock."""

    def __init__(self, root: Path, gitdir: Path,
                 make_cache: Callable[[Path, Path], NestedCache]) -> None:
        self.root = root
        self.gitdir = gitdir
        self.make_cache = make_cache
        self.caches: dict[str, NestedCache] = {}
        self.trees: dict[str, str] = {}
        # (directory, its ignore matcher), deepest first: read by the watcher's thread.
        self.matchers: tuple[tuple[str, IgnoreMatcher], ...] = ()

    def capture_found(self, result: Capture) -> None:
        """After a full scan: capture every nested repository the scan listed as skipped
        ``nested-repository`` (the listing leaves ``result``: they are captured), and forget
        the ones it no longer found."""
        found = {s["path"] for s in result.skipped if s.get("reason") == NESTED_REPOSITORY}
        result.skipped[:] = [s for s in result.skipped
                             if s.get("reason") != NESTED_REPOSITORY]
        # libgit2 reports every nested repository at every scan: no change in itself.
        result.paths[:] = [p for p in result.paths if p not in found]
        for rel in [r for r in self.caches if r not in found]:
            self.forget(rel)
        self.capture({rel: set() for rel in found}, result)

    def capture(self, changed: dict[str, set[str]], result: Capture) -> None:
        """Capture the nested repositories named in ``changed`` (worktree-relative directory ->
        the paths a watcher reported in it, relative to it; empty: not known, scan it) with
        their own caches, adding what each found to ``result`` under its path. A known cache
        given paths takes its own fast path, and scans when that declines."""
        for rel in sorted(changed):
            cache = self.caches.get(rel)
            paths = changed[rel]
            opened = cache is None
            if cache is None:
                cache = self._open(rel)
                paths = set()
            try:
                found = cache.capture_changed(paths) if paths else None
                if found is None:
                    found = cache.capture()
            except StoreError as exc:
                if exc.code not in _GONE:
                    raise
                # Gone, or swapped for a link, since the scan saw it: never followed.
                self.forget(rel)
                continue
            self.trees[rel] = found.tree
            merge(result, found, rel)
            if opened and found.added and cache.secret_scan:
                # Its own scan saw the names inside it; its directory's name enters here.
                result.secrets.extend(name_findings(rel))

    def known(self, rel: str) -> bool:
        """Whether ``rel`` is a nested repository this workspace captures."""
        return rel in self.caches

    def intact(self) -> bool:
        """Whether every known nested repository is still a real directory holding its
        ``.git`` (if not, only a full scan can say what it is now)."""
        for rel in self.caches:
            try:
                if not stat.S_ISDIR(os.lstat(self.root / rel).st_mode):
                    return False
            except OSError:
                return False
            if not os.path.lexists(self.root / rel / ".git"):
                return False
        return True

    def graft(self, repo: pygit2.Repository, base: str) -> str:
        """``base`` (the worktree's own tree) with every nested repository's last tree at its
        path."""
        if not self.trees:
            return base
        return graft_trees(repo, base, self.trees)

    def cached_tree(self, repo: pygit2.Repository, base: str) -> str:
        """``base`` with each nested cache's in-memory tree grafted (for ``git gc``'s keep
        refs: the blobs those caches vouch for stay)."""
        trees = {}
        for rel, cache in self.caches.items():
            tree = cache.cached_tree()
            trees[rel] = tree if tree is not None else self.trees.get(rel, "")
        trees = {rel: tree for rel, tree in trees.items() if tree}
        return graft_trees(repo, base, trees) if trees else base

    def persist(self) -> None:
        for cache in self.caches.values():
            cache.persist()

    def drop(self) -> None:
        """Forget every nested cache in memory (each reloads from disk when found again)."""
        for cache in self.caches.values():
            cache.drop_cache()
        self.caches.clear()
        self.trees.clear()
        self.matchers = ()

    def forget(self, rel: str) -> None:
        """A nested repository no longer found: its cache and its git dir go."""
        cache = self.caches.pop(rel, None)
        self.trees.pop(rel, None)
        self.matchers = tuple(m for m in self.matchers if m[0] != rel)
        if cache is not None:
            cache.drop_cache()
            try:
                shutil.rmtree(cache.gitdir)
            except FileNotFoundError:
                pass  # never written: the repository went before its first capture ended
            except OSError as exc:
                # Only disk space: a cache found again later is checked entry by entry.
                log.warning("could not remove the stat cache %s of a nested repository no "
                            "longer found: %s", cache.gitdir, exc)

    def _open(self, rel: str) -> NestedCache:
        root = self.root / rel
        digest = hashlib.sha256(os.fsencode(rel)).hexdigest()[:16]
        gitdir = self.gitdir / "nested" / digest
        _remove_stale_locks(gitdir)
        cache = self.make_cache(root, gitdir)
        self.caches[rel] = cache
        try:
            matcher = cache.ignore_matcher()
        except (pygit2.GitError, OSError) as exc:
            # The watcher then filters this repository's events by the worktree's rules, which
            # may drop a change: the periodic full scan still finds it.
            log.warning("cannot read the ignore rules of nested repository %s: %s", root, exc)
        else:
            pairs = [*self.matchers, (rel, matcher)]
            self.matchers = tuple(sorted(pairs, key=lambda m: -m[0].count("/")))
        return cache


class WorkspaceMatcher:
    """``path_is_ignored`` for the watcher: a path inside a nested repository answered by that
    repository's rules (recursively), any other by the worktree's own."""

    def __init__(self, own: IgnoreMatcher, workspace: Workspace) -> None:
        self.own = own
        self.workspace = workspace

    def path_is_ignored(self, path: str) -> bool:
        for rel, matcher in self.workspace.matchers:
            if path.startswith(rel + "/"):
                return bool(matcher.path_is_ignored(path[len(rel) + 1:]))
        return bool(self.own.path_is_ignored(path))


def merge(result: Capture, found: Capture, rel: str) -> None:
    """Add a nested repository's capture to the worktree's, its paths under ``rel``."""
    result.added += found.added
    result.modified += found.modified
    result.deleted += found.deleted
    result.skipped.extend({**s, "path": f"{rel}/{s['path']}"} for s in found.skipped)
    result.secrets.extend({**s, "path": f"{rel}/{s['path']}"} for s in found.secrets)
    result.paths.extend(f"{rel}/{p}" for p in found.paths)


def _remove_stale_locks(gitdir: Path) -> None:
    """Lock files a previous run left in a nested cache's git dir (the daemon is its only
    writer, and writes it only under the worktree's lock, which nobody holds yet)."""
    try:
        names = os.listdir(gitdir)
    except FileNotFoundError:
        return
    except OSError as exc:
        log.warning("cannot list the nested stat cache %s: %s", gitdir, exc)
        return
    for name in names:
        if name.endswith(".lock"):
            log.warning("removing stale lock %s", gitdir / name)
            (gitdir / name).unlink(missing_ok=True)
