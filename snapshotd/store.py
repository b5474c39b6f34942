"""The object store: one shared bare git repository for every worktree on the host.

Owns ``<home>/store.git`` and the per-worktree stat caches under ``<home>/worktrees/<id>/``.

Promises:
- A capture is the worktree's tree as ``git add -A`` would stage it: ``.gitignore`` files (nested
  too), the worktree's own ``info/exclude``, the user's global excludes, the daemon's exclude
  list, and, in a plain directory with no root ``.gitignore``, a default list of dependency and
  cache folders. No ``.git`` is ever captured.
- The user's repository is never written: we only read its ``info/exclude`` and index.
- Each worktree's stat cache is a git index kept in memory (``WorktreeIndex``); unchanged files are
  never re-hashed. The cache lives in a small git dir that shares the store's objects and refs
  through a ``commondir`` file (what ``git worktree`` does), so ``libgit2`` honours ignore rules
  for that worktree with its own ``core.excludesFile`` from ``config.worktree``.
- A git worktree's first capture is seeded from its repository's index: its stat data (only
  files that differ are hashed), and its blobs and the trees its cache-tree vouches for, copied
  into the store as one pack (never borrowed through alternates).
- The fast path (``capture_changed``) rewrites only the trees on the changed paths and learns
  the change counts on the way; ``tree_changes`` reads only subtrees whose ids differ.
- Checkpoints of one attempt form a commit chain whose newest commit is named by
  ``refs/snapshotd/runs/<run>/<node>/<iteration>/<attempt>``; commit messages carry trailers from
  which the ledger can be rebuilt.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import random
import re
import stat
import struct
import subprocess
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pygit2
from pygit2.enums import DeltaStatus, DiffOption, FileMode

from snapshotd import faults
from snapshotd.keys import REF_PREFIX, AttemptKey

log = logging.getLogger("snapshotd.store")

DEFAULT_PLAIN_EXCLUDES = (
    "node_modules/",
    ".venv/",
    "venv/",
    "__pycache__/",
    ".tox/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".DS_Store",
)
SIGNATURE_NAME = "snapshotd"
SIGNATURE_EMAIL = "snapshotd@localhost"
# A libgit2 call that writes loose objects is tried this many times when a concurrent ``git gc``
# (prune-packed, prune) removed an object fan-out directory between libgit2 creating it and
# renaming the new object into it; libgit2 creates it again on the next try.
ODB_TRIES = 5
# Files whose mtime is this close to a capture may change again within the same filesystem
# clock tick without a visible stat change; they are re-hashed at the next capture.
RACY_WINDOW_NS = 50_000_000

_DIFF_FLAGS = (
    DiffOption.INCLUDE_UNTRACKED
    | DiffOption.RECURSE_UNTRACKED_DIRS
    | DiffOption.INCLUDE_TYPECHANGE
    | DiffOption.INCLUDE_UNREADABLE
    | DiffOption.UPDATE_INDEX
    | DiffOption.SKIP_BINARY_CHECK
    | DiffOption.DISABLE_PATHSPEC_MATCH
)


class StoreError(Exception):
    """A store operation failed; ``reason`` is a short gap reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass
class Capture:
    """The result of scanning a worktree into its index and writing the tree."""

    tree: str
    added: int = 0
    modified: int = 0
    deleted: int = 0
    skipped: list[dict] = field(default_factory=list)
    full_scan: bool = True
    paths: list[str] = field(default_factory=list)  # what a full scan found changed


@dataclass
class CheckpointMeta:
    """What goes into a checkpoint commit's trailers."""

    key: AttemptKey
    seq: int
    tier: int
    source: str
    worktree: str
    label: str | None = None
    tool_use_id: str | None = None
    # The user's HEAD commit when the attempt began (its first checkpoint only): export's base.
    base: str | None = None


class Store:
    """The shared bare repository and the per-worktree stat caches."""

    def __init__(self, home: Path, *, excludes: tuple[str, ...] = (),
                 max_file_bytes: int = 64 << 20) -> None:
        self.home = home
        self.path = home / "store.git"
        self.excludes = tuple(excludes)
        self.max_file_bytes = max_file_bytes
        self.lock = threading.Lock()
        self._indexes: dict[str, WorktreeIndex] = {}
        self._init_repository()
        self.repo = pygit2.Repository(str(self.path))

    def reader(self) -> pygit2.Repository:
        """A new read-only handle on the store for one thread (libgit2 handles are not shared
        between threads that read while another writes). Writes go through ``Store`` methods."""
        return pygit2.Repository(str(self.path))

    # -- worktrees -------------------------------------------------------------------------

    def worktree(self, root: Path) -> WorktreeIndex:
        """The stat cache of ``root`` (created on first use). Callers serialize per worktree."""
        wt_id = worktree_id(root)
        with self.lock:
            index = self._indexes.get(wt_id)
            if index is None:
                index = WorktreeIndex(self, wt_id, root)
                self._indexes[wt_id] = index
            return index

    def is_store_failure(self, exc: BaseException) -> bool:
        """Whether a failed object write is the store's fault (its path in the message, or a
        full, read-only or failing disk) rather than the source file's (unreadable, gone)."""
        if str(self.path) in str(exc):
            return True
        return isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT,
                                                          errno.EROFS, errno.EIO)

    def persist_all(self) -> None:
        with self.lock:
            indexes = list(self._indexes.values())
        for index in indexes:
            index.persist()

    # -- commits and refs ------------------------------------------------------------------

    def head(self, key: AttemptKey) -> pygit2.Commit | None:
        """The newest checkpoint commit of an attempt, or None."""
        try:
            ref = self.repo.references.get(key.ref)
        except (pygit2.GitError, ValueError):
            return None
        if ref is None:
            return None
        return self.repo[ref.target].peel(pygit2.Commit)

    def commit(self, meta: CheckpointMeta, tree: str, parent: str | None) -> str:
        """Write a checkpoint commit and move the attempt's ref to it. Returns the commit id."""
        when = int(time.time())
        offset = -time.timezone // 60 if time.localtime().tm_isdst == 0 else -time.altzone // 60
        sig = pygit2.Signature(SIGNATURE_NAME, SIGNATURE_EMAIL, when, offset)
        message = build_message(meta)
        parents = [pygit2.Oid(hex=parent)] if parent else []
        with self.lock:
            faults.check("objects")
            for attempt in range(1, ODB_TRIES + 1):
                oid = odb_retry(self.repo.create_commit, None, sig, sig, message,
                                pygit2.Oid(hex=tree), parents)
                faults.crash_point("after-commit")
                try:
                    self.repo.references.create(meta.key.ref, oid, force=True)
                    break
                except pygit2.GitError as exc:
                    # Seen once under a concurrent `git gc` (cause not pinned down): the commit
                    # just written was gone when the ref was moved. Writing it again is safe
                    # (same bytes, same id); a missing tree or parent still fails above.
                    if "doesn't exist" not in str(exc) or attempt == ODB_TRIES:
                        raise
                    log.warning("commit %s vanished before its ref moved (%s); writing it "
                                "again", oid, exc)
            faults.crash_point("after-ref")
        return str(oid)

    def rewind(self, key: AttemptKey, tip: str, to: str | None) -> bool:
        """Move the attempt's ref back from ``tip`` to ``to`` (None: delete it), only if it
        still points at ``tip``: a commit whose ledger row was refused never happened."""
        with self.lock:
            ref = self.repo.references.get(key.ref)
            if ref is None or str(ref.target) != tip:
                return False
            if to is None:
                ref.delete()
            else:
                self.repo.references.create(key.ref, pygit2.Oid(hex=to), force=True)
            return True

    def attempt_refs(self) -> Iterator[tuple[AttemptKey, str]]:
        """Every attempt ref in the store with its target commit id."""
        with self.lock:
            names = [r for r in self.repo.references if r.startswith(REF_PREFIX)]
            targets = [(n, str(self.repo.references[n].target)) for n in names]
        for name, target in targets:
            try:
                yield AttemptKey.from_ref(name), target
            except ValueError:
                continue

    def read_commit(self, commit_id: str) -> pygit2.Commit:
        with self.lock:
            return self.repo[commit_id].peel(pygit2.Commit)

    # -- helpers ---------------------------------------------------------------------------

    def _init_repository(self) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        if not (self.path / "HEAD").exists():
            repo = pygit2.init_repository(str(self.path), bare=True)
            config = repo.config
            # Worktree config carries each worktree's excludes file; gc stays ours to run.
            config["core.repositoryformatversion"] = 1
            config["extensions.worktreeConfig"] = True
            config["gc.auto"] = 0
            config["core.logAllRefUpdates"] = False
            del repo
        (self.home / "worktrees").mkdir(exist_ok=True)


class WorktreeIndex:
    """One worktree's in-memory stat cache, and the capture that uses it.

    Not thread-safe: the service serializes every call for one worktree.
    """

    def __init__(self, store: Store, wt_id: str, root: Path) -> None:
        self.store = store
        self.id = wt_id
        self.root = root
        self.gitdir = store.home / "worktrees" / wt_id
        self._repo: pygit2.Repository | None = None
        self._index: pygit2.Index | None = None
        self._exclude_sources: tuple = ()
        self._racy: set[str] = set()
        self._dirty = False
        # The tree the index described at the last capture: the fast path rewrites only the
        # trees on changed paths from it (libgit2's index write re-reads every tree after).
        self._tree: str | None = None

    def capture(self) -> Capture:
        """Bring the index up to date with the worktree and write its tree (objects included)."""
        self._check_root()
        self._ensure_gitdir()
        try:
            faults.check("objects")
        except OSError as exc:
            raise StoreError("object-write-failed", f"could not write objects: {exc}") from exc
        index = self._load_index()
        result = Capture(tree="")
        started_ns = time.time_ns()
        touched: list[str] = []
        previous_racy, self._racy = self._racy, set()
        try:
            for path in sorted(previous_racy):
                self._update_path(index, path, result, touched, racy_recheck=True)
            try:
                diff = index.diff_to_workdir(int(_DIFF_FLAGS))
            except pygit2.GitError as exc:
                raise StoreError("scan-failed", f"could not scan {self.root}: {exc}") from exc
            for delta in diff.deltas:
                status = delta.status
                if status == DeltaStatus.DELETED:
                    path = delta.old_file.path
                    result.paths.append(path)
                    if _remove_entry(index, path):
                        result.deleted += 1
                    continue
                path = delta.new_file.path
                result.paths.append(path.rstrip("/"))
                if status == DeltaStatus.UNREADABLE:
                    result.skipped.append({"path": path, "reason": "unreadable"})
                    continue
                if status in (DeltaStatus.UNTRACKED, DeltaStatus.ADDED, DeltaStatus.MODIFIED,
                              DeltaStatus.TYPECHANGE):
                    self._update_path(index, path, result, touched,
                                      new=status in (DeltaStatus.UNTRACKED, DeltaStatus.ADDED))
        except StoreError:
            # The cache is partly updated: whatever was hashed may be racy; re-hash it next time.
            self._racy = previous_racy | set(touched)
            raise
        self._racy = {p for p in touched if _is_racy(self.root / p, started_ns)}
        faults.crash_point("after-blobs")
        try:
            result.tree = str(odb_retry(index.write_tree))
        except pygit2.GitError as exc:
            raise StoreError("object-write-failed", f"could not write the tree: {exc}") from exc
        faults.crash_point("after-tree")
        self._tree = result.tree
        self._dirty = True
        return result

    def capture_changed(self, paths: Iterable[str]) -> Capture | None:
        """Update only ``paths`` (worktree-relative, as a watcher reported them) and write the
        tree: cost follows the change, not the tree. A path that is now a directory is crawled
        (a new directory's files may predate its watch); a vanished one drops every entry
        under it. Returns None when only a full scan can be trusted (no cache loaded yet, or
        an ignore file changed) — the caller then runs ``capture()``."""
        if self._index is None or self._repo is None:
            return None
        self._check_root()
        try:
            faults.check("objects")
        except OSError as exc:
            raise StoreError("object-write-failed", f"could not write objects: {exc}") from exc
        # Racy entries are not re-hashed here: a write after their hash raised an event, so it
        # is in ``paths``. They stay marked for the next full scan, which has only stats.
        wanted = {p.strip("/") for p in paths}
        wanted.discard("")
        if any(p == ".gitignore" or p.endswith("/.gitignore") for p in wanted):
            return None
        if not all(p.isascii() or _utf8(p) for p in wanted):
            return None  # a name that is not UTF-8: only libgit2's own scan handles its bytes
        if self._exclude_sources != _exclude_sources(self.root):
            return None
        index = self._index
        repo = self._repo
        result = Capture(tree="", full_scan=False)
        started_ns = time.time_ns()
        touched: list[str] = []
        files: set[str] = set()  # file entries changed; anything else is structural
        structural = self._tree is None
        try:
            for rel in sorted(wanted):
                if ".git" in rel.split("/"):
                    continue
                full = self.root / rel
                try:
                    st = os.lstat(full)
                except FileNotFoundError:
                    was_file = rel in index
                    if _remove_entry(index, rel):
                        result.deleted += 1
                        if was_file:
                            files.add(rel)
                        else:
                            structural = True  # a directory went
                    continue
                except OSError as exc:
                    result.skipped.append({"path": rel, "reason": "unreadable", "detail": str(exc)})
                    continue
                if stat.S_ISDIR(st.st_mode):
                    structural = True
                    self._crawl(index, repo, rel, result, touched)
                    continue
                if not (stat.S_ISREG(st.st_mode) or stat.S_ISLNK(st.st_mode)):
                    continue  # sockets and FIFOs are not content, as in the full scan
                if rel not in index and repo.path_is_ignored(rel):
                    continue
                self._update_path(index, rel, result, touched)
                files.add(rel)
        except StoreError:
            self._racy |= set(touched)  # partly updated: re-hash what was hashed, next time
            raise
        self._racy |= {p for p in touched if _is_racy(self.root / p, started_ns)}
        faults.crash_point("after-blobs")
        try:
            if structural:
                result.tree = str(odb_retry(index.write_tree))
            else:
                assert self._tree is not None
                result.tree, counts = odb_retry(_rewrite_tree, repo, index, self._tree, files)
                _remember_changes(self._tree, result.tree, counts)
        except (pygit2.GitError, _TreeShapeChanged):
            try:
                result.tree = str(odb_retry(index.write_tree))
            except pygit2.GitError as exc:
                raise StoreError("object-write-failed",
                                 f"could not write the tree: {exc}") from exc
        faults.crash_point("after-tree")
        self._tree = result.tree
        self._dirty = True
        return result

    def _crawl(self, index: pygit2.Index, repo: pygit2.Repository, rel: str, result: Capture,
               touched: list[str]) -> None:
        """Add every non-ignored file under directory ``rel`` and drop cached entries under it
        that are gone (a directory replaced wholesale, e.g. by ``git checkout``)."""
        if repo.path_is_ignored(rel + "/"):
            return
        if (self.root / rel / ".git").exists():
            result.skipped.append({"path": rel, "reason": "nested-repository"})
            return
        present: set[str] = set()
        stack = [rel]
        while stack:
            current = stack.pop()
            try:
                entries = list(os.scandir(self.root / current))
            except OSError as exc:
                result.skipped.append({"path": current, "reason": "unreadable",
                                       "detail": str(exc)})
                continue
            for entry in entries:
                child = f"{current}/{entry.name}"
                if entry.name == ".git":
                    continue
                if entry.is_dir(follow_symlinks=False):
                    if repo.path_is_ignored(child + "/"):
                        continue
                    if os.path.lexists(os.path.join(entry.path, ".git")):
                        result.skipped.append({"path": child, "reason": "nested-repository"})
                        continue
                    stack.append(child)
                    continue
                if child not in index and repo.path_is_ignored(child):
                    continue
                present.add(child)
                self._update_path(index, child, result, touched)
        prefix = rel + "/"
        for entry in [e.path for e in index if e.path.startswith(prefix)]:
            if entry not in present and not os.path.lexists(self.root / entry):
                if _remove_entry(index, entry):
                    result.deleted += 1

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

    def persist(self) -> None:
        """Write the stat cache to disk (a cache, not a record: losing it costs one full hash)."""
        if self._index is not None and self._dirty:
            try:
                self._index.write()
                self._dirty = False
            except (pygit2.GitError, OSError):
                pass

    def cached_tree(self) -> str | None:
        """The tree the in-memory stat cache describes (None when not loaded)."""
        if self._index is None:
            return None
        try:
            return str(odb_retry(self._index.write_tree))
        except pygit2.GitError:
            self.drop_cache()
            return None

    def drop_cache(self) -> None:
        """Forget the in-memory index so the next capture rebuilds it from disk or cold."""
        self._index = None
        self._repo = None
        self._tree = None

    def ignore_matcher(self) -> pygit2.Repository:
        """A repository object of its own on this worktree's stat-cache git dir, whose
        ``path_is_ignored(rel)`` applies the capture's ignore rules; another thread (the watcher)
        may use it while captures run. Call under the worktree lock (it writes the excludes)."""
        self._ensure_gitdir()
        self._refresh_excludes(force=self._repo is None)
        return pygit2.Repository(str(self.gitdir))

    # -- helpers ---------------------------------------------------------------------------

    def _update_path(self, index: pygit2.Index, path: str, result: Capture, touched: list[str],
                     *, new: bool = False, racy_recheck: bool = False) -> None:
        full = self.root / path
        if path.endswith("/"):
            # libgit2 reports a nested repository as an untracked directory; its own history
            # is not ours to copy.
            result.skipped.append({"path": path.rstrip("/"), "reason": "nested-repository"})
            return
        try:
            st = full.lstat()
        except FileNotFoundError:
            if _remove_entry(index, path) and not racy_recheck:
                result.deleted += 1
            return
        except OSError as exc:
            result.skipped.append({"path": path, "reason": "unreadable", "detail": str(exc)})
            return
        if stat.S_ISREG(st.st_mode) and st.st_size > self.store.max_file_bytes:
            _remove_entry(index, path)
            result.skipped.append({"path": path, "reason": "too-large", "bytes": st.st_size})
            return
        before = _entry_id(index, path)
        try:
            self._add(index, path)
        except (pygit2.GitError, OSError) as exc:
            result.skipped.append({"path": path, "reason": "unreadable", "detail": str(exc)})
            return
        touched.append(path)
        after = _entry_id(index, path)
        if racy_recheck:
            if before is None:
                result.added += 1
            elif before != after:
                result.modified += 1
        elif new or before is None:
            result.added += 1
        else:
            result.modified += 1

    def _add(self, index: pygit2.Index, path: str) -> None:
        """Hash ``path`` into the store and the index. A failure on the store's side raises
        ``StoreError``: the file is fine, and skipping it would acknowledge a checkpoint without
        the change. Any other failure (the file cannot be read) is the caller's to report."""
        try:
            odb_retry(index.add, path)
        except (pygit2.GitError, OSError) as exc:
            if self.store.is_store_failure(exc):
                raise StoreError("object-write-failed", f"could not store {path}: {exc}") from exc
            raise

    def _load_index(self) -> pygit2.Index:
        if self._index is not None:
            self._refresh_excludes()
            return self._index
        self._refresh_excludes(force=True)
        try:
            self._repo = pygit2.Repository(str(self.gitdir))
            index = self._repo.index
            index.read(False)
            _drop_entries_without_objects(self._repo, index)
        except pygit2.GitError:
            # A corrupt cache is rebuilt, never trusted.
            (self.gitdir / "index").unlink(missing_ok=True)
            self._repo = pygit2.Repository(str(self.gitdir))
            index = self._repo.index
        if len(index) == 0:
            index = self._prime_cold(index)
        self._index = index
        return index

    def _prime_cold(self, index: pygit2.Index) -> pygit2.Index:
        """Start an empty cache: from the worktree's own git index when it has one (only files
        that differ from it are hashed), else with the git CLI (several times faster than
        libgit2 cold)."""
        seeded = self._seed_from_repository()
        if seeded is not None:
            return seeded
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(GIT_DIR=str(self.gitdir), GIT_WORK_TREE=str(self.root),
                   GIT_CONFIG_NOSYSTEM="1", GIT_OPTIONAL_LOCKS="0")
        proc = subprocess.run(
            ["git", "-c", "core.quotePath=false", "add", "-A", "--ignore-errors", "."],
            cwd=str(self.root), env=env, capture_output=True, timeout=3600,
        )
        if proc.returncode not in (0, 1):
            return index  # fall back to the libgit2 path inside capture()
        self._repo = pygit2.Repository(str(self.gitdir))
        index = self._repo.index
        self._add_tracked_ignored(index)
        return index

    def _seed_from_repository(self) -> pygit2.Index | None:
        """First capture of a git worktree: copy the objects its index names into the store
        (one pack through ``git pack-objects``, never alternates: the user's own gc could
        delete objects we depend on) and take its index's entries with their stat data as our
        cache, so only files that differ from it are hashed. The trees of its cache-tree are
        copied too and the cache-tree kept, so the first tree write reuses every directory the
        user's index vouches for instead of writing ~one loose object per directory (seconds
        at 100,000 files); git's own ``write-tree`` and ``commit`` trust the same cache. None
        when that cannot be done safely; the caller then builds the cache cold."""
        gitdir = _user_gitdir(self.root)
        if gitdir is None:
            return None
        try:
            seed = _strip_index((gitdir / "index").read_bytes())
        except (OSError, ValueError, struct.error):
            return None
        if seed is None:
            return None
        # Distinct ids (identical files or directories name one object), as _copy_objects needs.
        wanted = list({oid for oid, mode in seed.objects if mode != int(FileMode.COMMIT)}
                      | set(seed.trees))
        with_trees = seed.cache_tree is not None
        with self.store.lock:
            missing = _missing_objects(self.store.repo.odb, wanted)
        if missing and not _copy_objects(gitdir, self.store.path, missing):
            # A tree the cache-tree names may be gone from the user's repository (gc'd after
            # a reset): seed the blobs alone; the trees are then written from the entries.
            with_trees = False
            trees = set(seed.trees)
            missing = [oid for oid in missing if oid not in trees]
            if missing and not _copy_objects(gitdir, self.store.path, missing):
                return None
        tmp = self.gitdir / "index.seed"
        tmp.write_bytes(seed.index_file(with_cache_tree=with_trees))
        os.replace(tmp, self.gitdir / "index")
        try:
            self._repo = pygit2.Repository(str(self.gitdir))
            index = self._repo.index
            index.read(True)
        except pygit2.GitError:
            (self.gitdir / "index").unlink(missing_ok=True)
            self._repo = pygit2.Repository(str(self.gitdir))
            return None
        return index

    def _add_tracked_ignored(self, index: pygit2.Index) -> None:
        """Files the user's repository tracks although they match an ignore rule are captured,
        as ``git add -A`` in that repository would keep them."""
        gitdir = _user_gitdir(self.root)
        user_index = gitdir / "index" if gitdir is not None else None
        if user_index is None or not user_index.is_file():
            return
        try:
            entries = pygit2.Index(str(user_index))
        except (pygit2.GitError, OSError):
            return
        for entry in entries:
            if entry.path in index or entry.mode == FileMode.COMMIT:
                continue
            if (self.root / entry.path).is_symlink() or (self.root / entry.path).is_file():
                try:
                    self._add(index, entry.path)
                except (pygit2.GitError, OSError):
                    continue

    def _ensure_gitdir(self) -> None:
        gitdir = self.gitdir
        if (gitdir / "commondir").exists():
            return
        gitdir.mkdir(parents=True, exist_ok=True)
        (gitdir / "commondir").write_text(str(self.store.path) + "\n")
        # libgit2 takes the workdir from the parent of the path in ``gitdir``.
        (gitdir / "gitdir").write_text(str(self.root / ".git") + "\n")
        (gitdir / "HEAD").write_text("ref: refs/heads/snapshotd-unborn\n")

    def _refresh_excludes(self, force: bool = False) -> None:
        sources = _exclude_sources(self.root)
        if not force and sources == self._exclude_sources:
            return
        self._exclude_sources = sources
        lines: list[str] = ["# written by snapshotd; regenerated when its sources change"]
        for path, _mtime in sources[0]:
            if path is None:
                continue
            try:
                lines.append(Path(path).read_text(errors="replace"))
            except OSError:
                continue
        lines.extend(self.store.excludes)
        if not (self.root / ".git").exists() and not (self.root / ".gitignore").exists():
            lines.extend(DEFAULT_PLAIN_EXCLUDES)
        exclude_file = self.gitdir / "exclude"
        tmp = self.gitdir / "exclude.tmp"
        tmp.write_text("\n".join(lines) + "\n")
        os.replace(tmp, exclude_file)
        config = (
            "[core]\n"
            f"\texcludesFile = {_config_quote(str(exclude_file))}\n"
            "\tfilemode = true\n"
            "\tsymlinks = true\n"
        )
        (self.gitdir / "config.worktree").write_text(config)
        if self._repo is not None and not force:
            # libgit2 reads core.excludesFile once per repository object: reopen, keep the index.
            index = self._index
            self._repo = pygit2.Repository(str(self.gitdir))
            if index is not None:
                self._index = _rebind_index(self._repo, index)


def worktree_id(root: Path) -> str:
    """A stable id for a worktree path (its stat cache directory name)."""
    digest = hashlib.sha256(os.fsencode(str(root))).hexdigest()[:16]
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in root.name)[:40] or "root"
    return f"{name}-{digest}"


def build_message(meta: CheckpointMeta) -> str:
    label = _one_line(meta.label) if meta.label else ""
    subject = f"snapshotd: {meta.source} seq {meta.seq}" + (f" {label}" if label else "")
    trailers = [
        ("Snapshotd-Run", meta.key.run_id),
        ("Snapshotd-Node", meta.key.node_id),
        ("Snapshotd-Iteration", str(meta.key.iteration)),
        ("Snapshotd-Attempt", str(meta.key.attempt)),
        ("Snapshotd-Seq", str(meta.seq)),
        ("Snapshotd-Tier", str(meta.tier)),
        ("Snapshotd-Source", meta.source),
    ]
    if meta.tool_use_id:
        trailers.append(("Snapshotd-Tool-Use-Id", _one_line(meta.tool_use_id)))
    if label:
        trailers.append(("Snapshotd-Label", label))
    trailers.append(("Snapshotd-Worktree", _one_line(meta.worktree)))
    if meta.base:
        trailers.append(("Snapshotd-Base", meta.base))
    return subject + "\n\n" + "".join(f"{k}: {v}\n" for k, v in trailers)


def parse_trailers(message: str) -> dict[str, str]:
    """The ``Snapshotd-*`` trailers of a checkpoint commit message."""
    out: dict[str, str] = {}
    for line in message.splitlines():
        if line.startswith("Snapshotd-") and ": " in line:
            key, value = line.split(": ", 1)
            out[key] = value
    return out


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:300]


def _config_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _entry_id(index: pygit2.Index, path: str) -> str | None:
    try:
        entry = index[path]
    except KeyError:
        return None
    return f"{entry.id}:{entry.mode}"


def _remove_entry(index: pygit2.Index, path: str) -> bool:
    """Drop ``path`` (a file entry, or every entry under a directory) from the index; whether
    anything was there. ``remove_directory`` succeeds on a path the index never had, so the
    answer is whether the index shrank: an editor's vanished temp file is no structural change."""
    try:
        index.remove(path)
        return True
    except (pygit2.GitError, OSError, KeyError):
        before = len(index)
        try:
            index.remove_directory(path)
        except (pygit2.GitError, OSError, KeyError):
            return False
        return len(index) < before


class _TreeShapeChanged(Exception):
    """A changed file path crosses what is a file in the old tree: rebuild from the index."""


def _rewrite_tree(repo: pygit2.Repository, index: pygit2.Index, base: str,
                  files: set[str]) -> tuple[str, tuple[int, int, int]]:
    """The tree of ``index`` given that it equals ``base`` except at the file paths ``files``:
    only the trees on those paths are rewritten (deepest first), so the cost follows the
    change. Directories left empty disappear, as in git. Also returns the files added,
    modified and deleted from ``base`` (what ``tree_changes`` would count), known here for
    free: every change is one of ``files`` and its old entry is in hand."""
    if not files:
        return base, (0, 0, 0)
    counts = [0, 0, 0]
    changes: dict[str, dict[str, tuple[pygit2.Oid, int] | None]] = {}
    for path in files:
        parent, _, name = path.rpartition("/")
        try:
            entry = index[path]
            changes.setdefault(parent, {})[name] = (entry.id, int(entry.mode))
        except KeyError:
            changes.setdefault(parent, {})[name] = None
    leaves = {d: set(names) for d, names in changes.items()}
    pending = set(changes)
    for d in list(pending):
        while d:
            d = d.rpartition("/")[0]
            pending.add(d)
    root = repo[base].peel(pygit2.Tree)
    new_root: str | None = None
    for d in sorted(pending, key=lambda p: (p.count("/") if p else -1), reverse=True):
        old = _subtree(repo, root, d)
        builder = repo.TreeBuilder(old) if old is not None else repo.TreeBuilder()
        files_here = leaves.get(d, ())
        for name, value in changes.get(d, {}).items():
            existing = builder.get(name)
            if name in files_here and existing is not None \
                    and existing.filemode == pygit2.GIT_FILEMODE_TREE:
                # The index has a file (or nothing) where the base has a directory.
                raise _TreeShapeChanged(f"{d}/{name}")
            if value is None:
                if existing is not None:
                    builder.remove(name)
                    if name in files_here:
                        counts[2] += 1
                continue
            if name in files_here:
                if existing is None:
                    counts[0] += 1
                elif existing.id != value[0] or int(existing.filemode) != value[1]:
                    counts[1] += 1
            builder.insert(name, value[0], value[1])
        oid = builder.write() if len(builder) else None
        if d == "":
            new_root = str(oid) if oid is not None else str(repo.TreeBuilder().write())
        else:
            parent, _, name = d.rpartition("/")
            if name in leaves.get(parent, ()):
                raise _TreeShapeChanged(d)  # a changed file path is also a directory's
            changes.setdefault(parent, {})[name] = (
                (oid, pygit2.GIT_FILEMODE_TREE) if oid is not None else None)
    assert new_root is not None
    return new_root, (counts[0], counts[1], counts[2])


# One entry of a raw (SHA-1) tree object: mode, space, name, NUL, 20-byte id.
_TREE_ENTRY = re.compile(rb"[0-7]+ [^\0]*\0.{20}", re.S)
_TREE_MODE = b"40000 "


def tree_changes(repo: pygit2.Repository, old: str | None, new: str) -> tuple[int, int, int]:
    """Files (and submodule links) added, modified and deleted from tree ``old`` to ``new``.
    Only subtrees whose ids differ are read, and each is compared as raw entry bytes (set
    arithmetic in C) rather than entry by entry in Python: a 1,000-entry root costs a fraction
    of a millisecond, where pygit2 entry objects cost several. libgit2's own tree-to-tree diff
    reads every subtree, equal or not. After a fast-path capture the counts are already known
    (``_rewrite_tree`` learns them) and nothing is read. A file replaced by a directory (or
    back) counts as one deletion plus the additions under it, as in ``git diff --stat``; a
    mode change is a modification. Caller holds the store lock."""
    if old is not None:
        with _KNOWN_LOCK:
            known = _KNOWN_CHANGES.get((old, new))
        if known is not None:
            return known
    return _compute_tree_changes(repo, old, new)


def _compute_tree_changes(repo: pygit2.Repository, old: str | None,
                          new: str) -> tuple[int, int, int]:
    """``tree_changes`` from the trees themselves (never from what the fast path learnt)."""
    counts = [0, 0, 0]
    if old is None:
        counts[0] = _count_files(repo, pygit2.Oid(hex=new))
    elif old != new:
        _raw_tree_changes(repo, pygit2.Oid(hex=old), pygit2.Oid(hex=new), counts)
    return counts[0], counts[1], counts[2]


# Counts the fast path learnt while rewriting a tree, by (old tree, new tree): ids name
# contents, so an entry never goes stale; the newest few are kept.
_KNOWN_CHANGES: dict[tuple[str, str], tuple[int, int, int]] = {}
_KNOWN_LOCK = threading.Lock()
_KNOWN_MAX = 256


def _remember_changes(old: str, new: str, counts: tuple[int, int, int]) -> None:
    with _KNOWN_LOCK:
        _KNOWN_CHANGES.pop((old, new), None)
        _KNOWN_CHANGES[(old, new)] = counts
        while len(_KNOWN_CHANGES) > _KNOWN_MAX:
            del _KNOWN_CHANGES[next(iter(_KNOWN_CHANGES))]


def _raw_tree_changes(repo: pygit2.Repository, old: pygit2.Oid, new: pygit2.Oid,
                      counts: list[int]) -> None:
    odb = repo.odb
    before = set(_TREE_ENTRY.findall(odb.read(old)[1]))
    after = set(_TREE_ENTRY.findall(odb.read(new)[1]))
    gone = dict(_split_entry(e) for e in before - after)
    for name, (mode, oid) in (_split_entry(e) for e in after - before):
        prev = gone.pop(name, None)
        is_tree = mode == _TREE_MODE
        if prev is None:
            counts[0] += _count_files(repo, oid) if is_tree else 1
        elif prev[0] == _TREE_MODE and is_tree:
            _raw_tree_changes(repo, prev[1], oid, counts)
        elif prev[0] == _TREE_MODE:
            counts[2] += _count_files(repo, prev[1])
            counts[0] += 1
        elif is_tree:
            counts[2] += 1
            counts[0] += _count_files(repo, oid)
        else:
            counts[1] += 1
    for mode, oid in gone.values():
        counts[2] += _count_files(repo, oid) if mode == _TREE_MODE else 1


def _split_entry(entry: bytes) -> tuple[bytes, tuple[bytes, pygit2.Oid]]:
    """(name, (mode and space, id)) of one raw tree entry."""
    space = entry.index(b" ")
    return entry[space + 1:-21], (entry[:space + 1], pygit2.Oid(raw=entry[-20:]))


def _count_files(repo: pygit2.Repository, tree: pygit2.Oid) -> int:
    """Non-tree entries (files, symlinks, submodule links) under ``tree``, all depths: one
    diff against the empty tree, counted in C."""
    return len(repo[tree].peel(pygit2.Tree).diff_to_tree())


def _subtree(repo: pygit2.Repository, root: pygit2.Tree, path: str) -> pygit2.Tree | None:
    if path == "":
        return root
    tree = root
    for part in path.split("/"):
        try:
            entry = tree[part]
        except KeyError:
            return None
        if entry.filemode != pygit2.GIT_FILEMODE_TREE:
            raise _TreeShapeChanged(path)
        tree = repo[entry.id]
    return tree


def _user_gitdir(root: Path) -> Path | None:
    """The git dir of the repository whose worktree is ``root`` (a ``.git`` dir or file)."""
    dot_git = root / ".git"
    try:
        if dot_git.is_dir():
            return dot_git
        if dot_git.is_file():
            text = dot_git.read_text().strip()
            if text.startswith("gitdir:"):
                gitdir = Path(text[len("gitdir:"):].strip())
                return gitdir if gitdir.is_absolute() else (root / gitdir).resolve()
    except OSError:
        return None
    return None


@dataclass
class _SeedIndex:
    """What ``_strip_index`` keeps of a user's git index."""

    entries: bytes  # header and entries, no extensions, no checksum
    objects: list[tuple[str, int]]  # (object id, mode) of every entry
    cache_tree: bytes | None  # the TREE extension's data, every node valid only if all below are
    trees: list[str]  # the tree ids its valid nodes name

    def index_file(self, *, with_cache_tree: bool) -> bytes:
        out = self.entries
        if with_cache_tree and self.cache_tree is not None:
            out += b"TREE" + struct.pack(">I", len(self.cache_tree)) + self.cache_tree
        return out + hashlib.sha1(out).digest()


def _strip_index(data: bytes) -> _SeedIndex | None:
    """A copy of a git index (format 2 or 3) with its entries and, apart, its cache-tree (the
    TREE extension: the tree id of each directory whose entries did not change since a tree
    was written for it). Other extensions are dropped. Assume-valid, skip-worktree and
    intent-to-add flags are cleared or refused, since each would hide the file's real state.
    None for what we do not handle (format 4, split or sparse index, conflicts, SHA-256)."""
    if len(data) < 32 or data[:4] != b"DIRC":
        return None
    version, count = struct.unpack(">II", data[4:12])
    if version not in (2, 3):
        return None
    end = len(data) - 20
    if hashlib.sha1(data[:end]).digest() != data[end:]:
        return None
    objects: list[tuple[str, int]] = []
    patches: list[tuple[int, bytes]] = []  # (offset, bytes): flags to clear
    unpack_from = struct.unpack_from
    off = 12
    for _ in range(count):
        if off + 62 > end:
            return None
        mode = unpack_from(">I", data, off + 24)[0]
        flags = unpack_from(">H", data, off + 60)[0]
        if flags & 0x3000:  # a merge stage: the user is mid-conflict
            return None
        extended = version >= 3 and bool(flags & 0x4000)
        head = 62 + (2 if extended else 0)
        name_len = flags & 0xFFF
        nul = off + head + name_len if name_len < 0xFFF else data.index(b"\0", off + head)
        length = (nul - off + 8) & ~7
        if off + length > end or data[nul] != 0:
            return None
        if flags & 0x8000:  # assume-valid off: check stats
            patches.append((off + 60, struct.pack(">H", flags & ~0x8000)))
        if extended:
            ext = unpack_from(">H", data, off + 62)[0]
            if ext & 0x2000:  # intent-to-add: no blob behind it
                return None
            if ext & 0x4000:  # skip-worktree off
                patches.append((off + 62, struct.pack(">H", ext & ~0x4000)))
        if stat.S_ISDIR(mode):  # a sparse index's directory entry
            return None
        objects.append((data[off + 40:off + 60].hex(), mode))
        off += length
    if off > end:
        return None
    out = bytearray(data[:off])
    for at, value in patches:
        out[at:at + 2] = value
    cache_tree: tuple[bytes, list[str]] | None = None
    while off + 8 <= end:
        sig = data[off:off + 4]
        size = struct.unpack(">I", data[off + 4:off + 8])[0]
        body = data[off + 8:off + 8 + size]
        off += 8 + size
        if off > end:
            return None
        if sig in (b"link", b"sdir"):  # split or sparse index: the entries are not all here
            return None
        if sig == b"TREE":
            cache_tree = _valid_cache_tree(body)
    if cache_tree is None:
        return _SeedIndex(bytes(out), objects, None, [])
    return _SeedIndex(bytes(out), objects, cache_tree[0], cache_tree[1])


def _valid_cache_tree(body: bytes) -> tuple[bytes, list[str]] | None:
    """The TREE extension rewritten so that a node counts as valid only if every node below it
    is (git keeps it so; we do not rely on it, since a valid node's tree is used as is), and the
    ids of its valid nodes. None if it does not parse."""
    nodes: list[list] = []  # [path, entry count, subtree count, raw id or None], pre-order
    off = 0
    try:
        while off < len(body):
            nul = body.index(b"\0", off)
            newline = body.index(b"\n", nul)
            entries, subtrees = (int(n) for n in body[nul + 1:newline].split(b" "))
            path = body[off:nul]
            off = newline + 1
            oid = None
            if entries >= 0:
                oid = body[off:off + 20]
                off += 20
                if len(oid) != 20:
                    return None
            nodes.append([path, entries, subtrees, oid])
    except ValueError:
        return None

    def walk(i: int) -> tuple[int, bool]:
        node = nodes[i]
        valid = node[1] >= 0
        j = i + 1
        for _ in range(node[2]):
            if j >= len(nodes):
                raise IndexError
            j, below = walk(j)
            valid = valid and below
        if not valid:
            node[1], node[3] = -1, None
        return j, valid

    try:
        if not nodes or walk(0)[0] != len(nodes):
            return None
    except (IndexError, RecursionError):
        return None
    out = bytearray()
    for path, entries, subtrees, oid in nodes:
        out += path + b"\0" + f"{entries} {subtrees}\n".encode() + (oid or b"")
    return bytes(out), [oid.hex() for _p, _e, _s, oid in nodes if oid is not None]


# How many of a worktree's objects are looked up before concluding the store has none.
SEED_SAMPLE = 256


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


def _copy_objects(user_gitdir: Path, store: Path, oids: list[str]) -> bool:
    """Copy objects (distinct ids) from the user's repository into the store as one pack.
    True only when every one arrived: ``pack-objects`` given ids packs exactly those (and fails
    on one it cannot read), so a new pack whose index counts ``len(oids)`` objects holds them
    all, which spares looking each of them up again."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    try:
        packer = subprocess.Popen(["git", "--git-dir", str(user_gitdir), "pack-objects",
                                   "--stdout", "-q"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        indexer = subprocess.Popen(["git", "--git-dir", str(store), "index-pack", "--stdin"],
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
        return struct.unpack(">I", header[-4:])[0] == len(oids)
    except (OSError, subprocess.TimeoutExpired):
        return False


def _drop_entries_without_objects(repo: pygit2.Repository, index: pygit2.Index) -> None:
    """A cached entry whose blob the store lacks (a damaged or foreign cache) would produce a
    tree with a hole: such entries are dropped so their files are hashed again."""
    odb = repo.odb
    missing = [e.path for e in index if e.mode != FileMode.COMMIT and e.id not in odb]
    for path in missing:
        index.remove(path)


def odb_retry(call, *args):  # noqa: ANN001, ANN201 - any libgit2 call that writes objects
    """``call(*args)``, tried again (up to ``ODB_TRIES`` times) while it fails only because a
    concurrent ``git gc`` removed the object directory it was renaming a new object into."""
    for attempt in range(1, ODB_TRIES + 1):
        try:
            return call(*args)
        except pygit2.GitError as exc:
            text = str(exc)
            vanished = "No such file or directory" in text and "/objects/" in text
            if not vanished or attempt == ODB_TRIES:
                raise
    raise AssertionError("unreachable")


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


def _exclude_sources(root: Path) -> tuple:
    """What a worktree's exclude list is made of: the files with their mtimes, and the markers
    that decide whether the plain-directory defaults apply."""
    files = []
    for p in (_global_excludes_file(), _repo_info_exclude(root)):
        try:
            files.append((p, os.stat(p).st_mtime_ns) if p else (None, None))
        except OSError:
            files.append((None, None))
    markers = ((root / ".gitignore").exists(), (root / ".git").exists())
    return tuple(files), markers


_GLOBAL_EXCLUDES: tuple[float, str | None] = (0.0, None)


def _global_excludes_file() -> str | None:
    """The user's global excludes file (looked up at most once a second: it is on every
    capture's path and reading the global git config is not free)."""
    global _GLOBAL_EXCLUDES
    now = time.monotonic()
    if now - _GLOBAL_EXCLUDES[0] < 1.0:
        return _GLOBAL_EXCLUDES[1]
    found = _lookup_global_excludes()
    _GLOBAL_EXCLUDES = (now, found)
    return found


def _lookup_global_excludes() -> str | None:
    try:
        value = pygit2.Config.get_global_config()["core.excludesFile"]
        return os.path.expanduser(value)
    except (KeyError, OSError, pygit2.GitError):
        pass
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    candidate = os.path.join(base, "git", "ignore")
    return candidate if os.path.isfile(candidate) else None


def _repo_info_exclude(root: Path) -> str | None:
    """The ``info/exclude`` of the repository whose worktree is ``root`` (in the common git dir
    for a linked worktree)."""
    gitdir = _user_gitdir(root)
    if gitdir is None:
        return None
    try:
        common = gitdir / "commondir"
        if common.is_file():
            c = Path(common.read_text().strip())
            gitdir = c if c.is_absolute() else (gitdir / c)
    except OSError:
        return None
    return str(gitdir / "info" / "exclude")


def _rebind_index(repo: pygit2.Repository, old: pygit2.Index) -> pygit2.Index:
    """Carry an in-memory index over to a reopened repository object."""
    old.write()
    index = repo.index
    index.read(True)
    return index
