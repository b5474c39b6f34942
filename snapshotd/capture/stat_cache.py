"""One worktree's stat cache, and the captures that use it.

Owns ``WorktreeIndex``: a worktree's git index in memory, its git dir ``<home>/worktrees/<id>/``
(sharing the store's objects and refs via ``commondir``, as ``git worktree`` does), the full
capture (``capture``, see ``full_scan``) and the fast path (``capture_changed``: reported paths).
Promises, each in full in docs/durability.md ("What a capture holds"):
- A capture is the tree ``git add -A`` would stage under the rules of ``ignore_rules``; no
  ``.git`` nor gitlink is captured (nested repositories: ``nested_repos``).
- The full scan and the fast path leave out the same things and list them in ``skipped``
  (``special``, too large, ``unreadable``, ``invalid-path``, ``secret`` unless ``secret_files``
  is ``capture`` for the worktree); unchanged files are never re-hashed, racy ones are.
- The fast path rewrites only the trees on changed paths and declines (None) when only a full
  scan can be trusted; a file the user's index began tracking while ignored is taken by the
  next capture (up to ``SYNC_LIST_ENTRIES``) or verification; a store failure raises
  ``StoreError``, never skips a file; a file still changing keeps its last content (``changing``).
"""

from __future__ import annotations

import logging
import os
import stat
import time
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import FileMode

from snapshotd.capture.cache_checks import (
    check_tree_cache,
    drop_entries_without_objects,
    entry_id,
    may_hold_gitlinks,
    rebind_index,
    tree_has,
)
from snapshotd.capture.cold_start import listed_paths, prime_cold
from snapshotd.capture.crawl import crawl, list_alias, take_tracked_ignored
from snapshotd.capture.file_entry import update_path
from snapshotd.capture.full_scan import Capture, full_scan, remove_entry
from snapshotd.capture.ignore_rules import exclude_sources, write_excludes
from snapshotd.capture.nested_repos import Workspace, WorkspaceMatcher
from snapshotd.capture.scan_rules import DirNames, NestedRepos, git_dir_alias_of
from snapshotd.capture.tracked_ignored import TrackedIgnored
from snapshotd.core import (
    check_fault,
    crash_point,
    injected_delay,
    make_dirs,
    may_name_secret_files,
    scan_paths,
    secret_files_among,
    worktree_id,
    write_file,
)
from snapshotd.store import (
    STORE_WRITE_FAILED,
    StoreError,
    TreeShapeChanged,
    odb_retry,
    open_cache,
    remember_changes,
    remember_file_count,
    rewrite_tree,
)

if TYPE_CHECKING:
    from snapshotd.capture.settings import CaptureSettings
    from snapshotd.store import Store

log = logging.getLogger("snapshotd.store")

# Files with an mtime this close to a capture may change again in the same clock tick with no
# visible stat change: they are re-hashed at the next capture.
RACY_WINDOW_NS = 50_000_000
# Up to this many cached entries a fast-path capture lists the user's index again when it
# changed (``git add -f`` of a file nobody wrote comes with no event): about 5 ms at 10,000
# tracked files. Past it the listing (0.4 s at a million) waits for the next verification,
# which lists off the worktree's lock (``prescan``).
SYNC_LIST_ENTRIES = 20_000


class WorktreeIndex:
    """One worktree's in-memory stat cache, and the capture that uses it.

    Not thread-safe: the service serializes every call for one worktree.
    """

    def __init__(self, store: Store, wt_id: str, root: Path, gitdir: Path | None = None, *,
                 settings: CaptureSettings) -> None:
        self.store = store
        self.id = wt_id
        self.root = root
        self.gitdir = gitdir or store.home / "worktrees" / wt_id
        self.settings = settings
        # Nested repositories, each captured whole by a cache of its own (``nested_repos``).
        self.workspace = Workspace(root, self.gitdir, lambda sub, sub_gitdir: WorktreeIndex(
            store, worktree_id(sub), sub, sub_gitdir, settings=settings))
        self.max_file_bytes = settings.max_file_bytes
        self.secret_files, self.secret_scan = settings.secret_policy(root)
        # What the user tracks although the rules ignore it: kept, as ``git add -A`` keeps it.
        self.tracked_ignored = TrackedIgnored(root, self.gitdir)
        self._repo: pygit2.Repository | None = None
        self._generation = -1  # the store's when ``_repo`` was opened (``_reopen``)
        self._index: pygit2.Index | None = None
        self._exclude_sources: tuple = ()
        self._racy: set[str] = set()
        # Cached files that could not be read: held out of the next full scan's diff.
        self.unreadable: set[str] = set()
        self._gitdir_checked = False
        self._dirty = False
        # The tree the index described at the last capture: the fast path rewrites only the
        # trees on changed paths from it (libgit2's index write re-reads every tree after).
        self._tree: str | None = None
        # Files a cold start cached without hashing them one by one (``git add``, or seeded
        # from the user's index, not in their HEAD): the next capture scans them for secrets.
        self._unscanned: list[str] = []
        self._shape: dict[str, DirNames] | None = None  # the seeded directories, for one scan
        self._seeded = False  # the cache was just seeded from the user's index, for one scan

    def capture(self) -> Capture:
        """Bring the index up to date with the worktree and write its tree (objects included)."""
        self._check_root()
        self._ensure_gitdir()
        _check_objects_fault()
        index = self._load_index()
        self.tracked_ignored.new_capture()
        result = Capture(tree="")
        if self._unscanned and self.secret_scan:
            result.secrets.extend(scan_paths(self.root, self._unscanned))
        started_ns = time.time_ns()
        touched: list[str] = []
        previous_racy, self._racy = self._racy, set()
        injected_delay("full-scan")  # tests: a scan as slow as a million files'
        try:
            for path in sorted(previous_racy):
                self.update_path(index, path, result, touched, racy_recheck=True)
            shape, self._shape = self._shape, None
            full_scan(self, index, result, touched, shape)
            seeded, self._seeded = self._seeded, False
            if not seeded:  # a seeded cache holds them (git ls-files spared: 0.4 s at 1M files)
                take_tracked_ignored(self, index, result, touched)
            self.workspace.capture_found(result)
        except StoreError:
            # The cache is partly updated: whatever was hashed may be racy; re-hash it next time.
            self._racy = previous_racy | set(touched)
            raise
        self._racy = {p for p in touched if _is_racy(self.root / p, started_ns)}
        crash_point("after-blobs")
        try:
            assert self._repo is not None
            written = str(odb_retry(index.write_tree))
            result.tree = self.workspace.graft(self._repo, written)
            if result.tree == written:  # nothing grafted: the tree holds the index's entries
                remember_file_count(written, len(index))
        except pygit2.GitError as exc:
            raise StoreError(STORE_WRITE_FAILED, f"could not write the tree: {exc}") from exc
        crash_point("after-tree")
        self._tree = result.tree
        self._dirty = True
        self._unscanned = []
        return result

    def capture_changed(self, paths: Iterable[str], *,
                        take_tracked: bool = False) -> Capture | None:
        """Update only ``paths`` (worktree-relative, as a watcher reported them) and write the
        tree: cost follows the change, not the tree. A path that is now a directory is crawled
        (a new directory's files may predate its watch); a vanished one drops every entry
        under it. Tracked-but-ignored files the cache lacks are taken too when
        ``take_tracked`` (a verification), or when the user's index changed and listing it is
        cheap (``SYNC_LIST_ENTRIES``): no event names a file ``git add -f`` began tracking.
        Returns None when only a full scan can be trusted (no cache loaded yet, or an ignore
        file changed) — the caller then runs ``capture()``."""
        if self._index is None or self._repo is None:
            return None
        self._check_root()
        _check_objects_fault()
        self._reopen(after_gc=True)
        # Racy entries are not re-hashed here (a write after their hash raised an event, so it
        # is in ``paths``): they stay marked for the next full scan, which has only stats.
        wanted = {p.strip("/") for p in paths}
        wanted.discard("")
        if not all(p.isascii() or _utf8(p) for p in wanted):
            return None  # a name that is not UTF-8: only libgit2's own scan handles its bytes
        if self._exclude_sources != exclude_sources(self.root) or not self.workspace.intact():
            return None
        index = self._index
        repo = self._repo
        nested = NestedRepos(self.root, lambda d: not self.workspace.known(d)
                             and tree_has(repo, self._tree, d))
        # A nested repository's own ``.gitignore`` is read by its cache's scan, below.
        if any((p == ".gitignore" or p.endswith("/.gitignore")) and nested.owner(p) is None
               for p in wanted):
            self.tracked_ignored.forget()
            return None
        result = Capture(tree="", full_scan=False)
        self.tracked_ignored.new_capture()
        started_ns = time.time_ns()
        touched: list[str] = []
        files: set[str] = set()  # file entries changed; anything else is structural
        structural = self._tree is None
        try:
            taken: set[str] = set()  # what crawls of new directories took, files and dirs
            for rel in sorted(wanted):  # a directory before the paths under it
                if ".git" in rel.split("/") or rel in taken:
                    continue  # a crawl took it: never twice (its findings, its skips)
                alias = git_dir_alias_of(rel)
                if alias is not None:  # listed once, with all it holds, as the full scan does
                    list_alias(repo, alias, result, taken)
                    continue
                owner = nested.owner(rel)
                if owner is not None:
                    # Its own cache captures it, unless our rules ignore it.
                    if not repo.path_is_ignored(owner + "/"):
                        nested.note(owner, rel)
                    continue
                structural |= self._changed_path(index, repo, rel, result, touched, files,
                                                 nested, taken)
            if take_tracked or (len(index) <= SYNC_LIST_ENTRIES
                                and self.tracked_ignored.stale()):
                files.update(take_tracked_ignored(self, index, result, touched))
            self.workspace.capture({owner: set() if "" in paths else paths
                                    for owner, paths in nested.found.items()}, result)
        except StoreError:
            self._racy |= set(touched)  # partly updated: re-hash what was hashed, next time
            raise
        self._racy |= {p for p in touched if _is_racy(self.root / p, started_ns)}
        crash_point("after-blobs")
        try:
            result.tree = self.workspace.graft(
                repo, self._write_changed_tree(index, repo, files, structural))
        except pygit2.GitError as exc:
            raise StoreError(STORE_WRITE_FAILED, f"could not write the tree: {exc}") from exc
        crash_point("after-tree")
        self._tree = result.tree
        self._dirty = True
        return result

    def _changed_path(self, index: pygit2.Index, repo: pygit2.Repository, rel: str,
                      result: Capture, touched: list[str], files: set[str],
                      nested: NestedRepos, taken: set[str]) -> bool:
        """Update one path the watcher reported; whether the change is structural (a directory
        came or went, so the whole tree is written). A directory's crawl adds what it took to
        ``taken``."""
        full = self.root / rel
        try:
            st = os.lstat(full)
        except (FileNotFoundError, NotADirectoryError):
            was_file = rel in index
            if remove_entry(index, rel):
                result.deleted += 1
                if was_file:
                    files.add(rel)
                    return False
                return True  # a directory went
            return False
        except OSError as exc:
            # Its directory cannot be searched: the last captured content stays, listed.
            result.skipped.append({"path": rel, "reason": "unreadable", "detail": str(exc)})
            return False
        if stat.S_ISDIR(st.st_mode):
            crawl(self, index, repo, rel, result, touched, nested, taken)
            return True
        if rel not in index and repo.path_is_ignored(rel) and rel not in self.tracked_ignored:
            return False
        self.update_path(index, rel, result, touched)
        files.add(rel)
        return False

    def _write_changed_tree(self, index: pygit2.Index, repo: pygit2.Repository,
                            files: set[str], structural: bool) -> str:
        """The fast path's tree: the last tree rewritten along the changed ``files`` when
        nothing structural (a directory come or gone) changed, else the index's whole tree.
        Change counts learnt on the way are kept for ``trees.tree_changes``."""
        try:
            if not structural:
                assert self._tree is not None
                tree, counts = odb_retry(rewrite_tree, repo, index, self._tree, files,
                                         self.store.stored_objects)
                remember_changes(self._tree, tree, counts)
                return tree
            return str(odb_retry(index.write_tree))
        except (pygit2.GitError, TreeShapeChanged):
            try:
                return str(odb_retry(index.write_tree))
            except pygit2.GitError as exc:
                raise StoreError(STORE_WRITE_FAILED, f"could not write the tree: {exc}") from exc

    def _check_root(self) -> None:
        """The worktree must still be the real directory it was registered as: a root (or a
        parent) swapped for a symlink could point the capture at ``/``."""
        try:
            st = os.lstat(self.root)
        except FileNotFoundError:
            raise StoreError("worktree-missing", f"worktree {self.root} no longer exists") from None
        except OSError as exc:
            raise StoreError("worktree-missing", f"worktree {self.root}: {exc}") from None
        if not stat.S_ISDIR(st.st_mode):
            kind = "a symlink" if stat.S_ISLNK(st.st_mode) else "not a directory"
            raise StoreError("worktree-replaced", f"worktree {self.root} is now {kind}; "
                             "begin a new attempt for the directory you mean")
        if os.path.realpath(self.root) != str(self.root):
            raise StoreError("worktree-replaced", f"worktree {self.root} now resolves to "
                             f"{os.path.realpath(self.root)} through a symlink; begin a new "
                             "attempt for the directory you mean")

    def persist(self) -> bool:
        """Write the stat cache to disk (a cache, not a record: losing it costs one full hash);
        whether the file now holds it (False when none is loaded)."""
        self.workspace.persist()
        if self._index is not None and self._dirty:
            try:
                self._index.write()
                self._dirty = False
            except (pygit2.GitError, OSError) as exc:
                # Only a cache: the next start hashes this worktree again, nothing is lost.
                log.warning("could not write the stat cache of %s: %s", self.root, exc)
        return self._index is not None and not self._dirty

    def entry_ids(self, paths: Iterable[str]) -> dict[str, str | None]:
        """Each of ``paths``' cached blob id and mode (None: not in the cache)."""
        return {p: entry_id(self._index, p) if self._index is not None else None for p in paths}

    def cached_entries(self) -> int:
        """How many entries the in-memory stat cache holds (0 when none is loaded)."""
        return len(self._index) if self._index is not None else 0

    def taken_among(self, paths: Iterable[str]) -> set[str]:
        """Those of ``paths`` (worktree-relative) a capture takes or holds: an ignored path
        the cache holds no entry at, and the user's index tracks nothing at or under, is left
        out (a build writing into an ignored directory changes no checkpoint)."""
        repo, index = self._repo, self._index
        wanted = {p.strip("/") for p in paths}
        if repo is None or index is None:
            return wanted
        out = set()
        for rel in wanted:
            try:
                ignored = bool(rel) and repo.path_is_ignored(rel)
            except (UnicodeEncodeError, pygit2.GitError):
                ignored = False  # a name the rules cannot be applied to counts
            if not ignored or rel in index or rel in self.tracked_ignored \
                    or self.tracked_ignored.under(rel):
                out.add(rel)
        return out

    def cached_tree(self) -> str | None:
        """The tree the in-memory stat cache describes, nested caches' trees grafted (None when
        not loaded)."""
        if self._index is None or self._repo is None:
            return None
        self._reopen(after_gc=True)
        try:
            return self.workspace.cached_tree(self._repo, str(odb_retry(self._index.write_tree)))
        except pygit2.GitError:
            self.drop_cache()
            return None

    def drop_cache(self) -> None:
        """Forget the in-memory index so the next capture rebuilds it from disk or cold."""
        self._index = self._repo = self._tree = None
        self.workspace.drop()

    def ignore_matcher(self) -> WorkspaceMatcher:
        """An object whose ``path_is_ignored(rel)`` applies the capture's ignore rules (a path
        inside a nested repository by that repository's rules), on repository objects of its
        own: another thread (the watcher) may use it while captures run. Call under the
        worktree lock (it writes the excludes)."""
        self._ensure_gitdir()
        self._refresh_excludes(force=self._repo is None)
        return WorkspaceMatcher(open_cache(self.gitdir), self.workspace)

    # -- helpers ---------------------------------------------------------------------------

    def update_path(self, index: pygit2.Index, path: str, result: Capture, touched: list[str],
                    *, new: bool = False, racy_recheck: bool = False) -> None:
        """Hash ``path`` into the index and count it in ``result``, or list why not
        (``file_entry.update_path``)."""
        update_path(self, index, path, result, touched, new=new, racy_recheck=racy_recheck)

    def _load_index(self) -> pygit2.Index:
        if self._index is not None:
            self._reopen(after_gc=True)
            self._refresh_excludes()
            return self._index
        self._generation = self.store.generation
        self._refresh_excludes(force=True)
        try:
            self._repo = open_cache(self.gitdir)
            index = self._repo.index
            index.read(False)
            drop_entries_without_objects(self._repo, index)
            check_tree_cache(index)
        except pygit2.GitError:
            # A corrupt cache is rebuilt, never trusted.
            (self.gitdir / "index").unlink(missing_ok=True)
            self._repo = open_cache(self.gitdir)
            index = self._repo.index
        if len(index) == 0:
            primed = prime_cold(self.root, self.gitdir, self.store, self._repo, index)
            self._repo, index = primed.repo, primed.index
            if primed.unscanned is not None:
                self._unscanned, self._shape = primed.unscanned, primed.shape
            self._seeded = primed.seeded
        # A submodule (or a nested repository ``git add`` took): whole, by its own cache.
        gitlinks = ({e.path for e in index if e.mode == FileMode.COMMIT}
                    if may_hold_gitlinks(self.gitdir) else set())
        for path in gitlinks:
            index.remove(path)
        dropped = self._drop_secret_entries(index) | gitlinks
        if dropped and self._unscanned:
            self._unscanned = [p for p in self._unscanned if p not in dropped]
        self._index = index
        return index

    def _drop_secret_entries(self, index: pygit2.Index) -> set[str]:
        """A cache seeded from the user's index or ``git add``, or written while
        ``secret_files`` was ``capture``, may hold credential files: they leave the cache (the
        paths returned), and the scan that follows lists them as skipped."""
        if self.secret_files == "capture":
            return set()
        dropped = set(secret_files_among(self.root,
                                          listed_paths(self.gitdir, index, may_name_secret_files)))
        for path in dropped:
            remove_entry(index, path)
        return dropped

    def _ensure_gitdir(self) -> None:
        """The cache's git dir with the files that make it a worktree of the store, checked by
        content once per daemon run (a power cut can leave them empty) and rewritten; fsynced
        only with full durability (the check already repairs what a cut did)."""
        if self._gitdir_checked:
            return
        gitdir = self.gitdir
        sync = self.store.fsync
        make_dirs(gitdir, sync=sync)
        # libgit2 takes the workdir from the parent of the path in ``gitdir``.
        wanted = {"commondir": f"{self.store.path}\n", "gitdir": f"{self.root / '.git'}\n",
                  "HEAD": "ref: refs/heads/snapshotd-unborn\n"}
        for name, text in wanted.items():
            try:
                current = (gitdir / name).read_text()
            except (OSError, UnicodeDecodeError):
                current = None
            if current != text:
                if current is not None:
                    log.warning("stat cache %s: %s was damaged (%d bytes); rewritten",
                                self.id, name, len(current))
                write_file(gitdir / name, text.encode(), sync=sync)
        self._gitdir_checked = True

    def _refresh_excludes(self, force: bool = False) -> None:
        """Rewrite the cache's exclude file when its sources changed (or ``force``)."""
        sources = exclude_sources(self.root)
        if not force and sources == self._exclude_sources:
            return
        self._exclude_sources = sources
        write_excludes(self.gitdir, self.root, sources, self.settings.excludes)
        if self._repo is not None and not force:
            self._reopen()  # libgit2 reads core.excludesFile once per repository object

    def _reopen(self, after_gc: bool = False) -> None:
        """A new repository object, the in-memory index kept; with ``after_gc`` only if gc ran
        since it was opened (its odb keeps deleted packs; what only they hold is not written)."""
        if after_gc and self._generation == self.store.generation:
            return
        self._generation, index = self.store.generation, self._index
        self._repo = open_cache(self.gitdir)
        if index is not None:
            self._index = rebind_index(self._repo, index)


def _check_objects_fault() -> None:
    try:
        check_fault("objects")
    except OSError as exc:
        raise StoreError(STORE_WRITE_FAILED, f"could not write objects: {exc}") from exc


def _utf8(path: str) -> bool:
    try:
        path.encode()
    except UnicodeEncodeError:
        return False
    return True


def _is_racy(path: Path, started_ns: int) -> bool:
    try:
        return path.lstat().st_mtime_ns >= started_ns - RACY_WINDOW_NS
    except OSError:
        return False
