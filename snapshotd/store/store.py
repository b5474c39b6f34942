"""The object store: one shared bare git repository for every worktree on the host.

Owns ``<home>/store.git`` and every write to it: checkpoint commits, the attempt refs
``refs/snapshotd/runs/<run>/<node>/<iteration>/<attempt>``, chain rewrites, the stat-cache keep
refs ``refs/snapshotd/cache/<id>``, the attempts' base refs (``bases``), a purge's hold refs, a fetch's staging refs, ``git gc``;
``Store.lock`` serializes writes through its handle, ``Store.gate`` keeps gc apart from
captures in flight. Others read through ``Store`` methods or ``Store.reader()``. Beside it:
``trees``, ``errors``, ``loose``/``loose_refs`` (the hot path), ``recovery``/``attributes``
(start-up), ``git_cli`` (git's writers), ``lending`` (the stat caches' handles; the seal). Promises:
- The user's repository is never written: we only read its ``info/exclude``, index and objects.
- Checkpoints of one attempt form a commit chain whose newest commit the attempt's ref names;
  commit messages carry trailers from which the ledger can be rebuilt.
- A ref that cannot be read is an error (``StoreError``), never "no checkpoint yet".
- Every stat cache's tree is named by a keep ref when ``refresh_cache_refs`` runs.
"""

from __future__ import annotations

import itertools
import logging
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

import pygit2

from snapshotd.core import REF_PREFIX, AttemptKey, Checkpoint, check_fault, crash_point, sync_dirs
from snapshotd.store import git_cli
from snapshotd.store.bases import drop_base_ref, keep_base
from snapshotd.store.errors import (
    ODB_TRIES,
    STORE_WRITE_FAILED,
    StoreError,
    is_write_failure,
    odb_retry,
)
from snapshotd.store.gate import ObjectGate
from snapshotd.store.loose import StoredObjects, commit_bytes
from snapshotd.store.loose_refs import LooseRefMover, forget_spare
from snapshotd.store.recovery import Recovery, ensure_store, recover_home
from snapshotd.store.trees import tree_changes

log = logging.getLogger("snapshotd.store")

SIGNATURE_NAME = "snapshotd"
SIGNATURE_EMAIL = "snapshotd@localhost"
CACHE_REF_PREFIX = "refs/snapshotd/cache/"
# A purge's new chain, named from its writing until the attempt ref names it (``purge_chain``).
PURGE_HOLD_PREFIX = "refs/snapshotd/purge-hold/"
# Where a fetch puts a remote's refs until they are verified and adopted (``fetch_staged``).
STAGING_PREFIX = "refs/snapshotd-fetch/"
# Ref names held for ``_ref`` (one per attempt read or written): past it they start again.
_REF_NAMES_MAX = 4096
_fetches = itertools.count()


class Store:
    """The shared bare repository, its refs, and the files of its stat caches."""

    def __init__(self, home: Path, *, fsync: bool = False, recover: bool = False) -> None:
        self.home = home
        self.path = home / "store.git"
        # Full durability: what the store writes outside libgit2's own fsyncs is fsynced too.
        self.fsync = fsync
        self.stored_objects = StoredObjects(self.path / "objects", fsync)
        self.lock = threading.Lock()
        # Captures write objects under it shared; gc deletes unreachable ones under it alone.
        self.gate = ObjectGate()
        # One read handle per thread for reads that must not wait on (or hold up) the writes
        # of other worktrees' captures under ``lock``: objects are immutable once written.
        self._readers = threading.local()
        # Bumped by ``replaced_objects`` after every ``git gc``: a handle opened before it must
        # be reopened before it writes (``WorktreeIndex`` and ``thread_reader`` check it).
        self.generation = 0
        if recover:
            # The daemon, holding the home lock: create or repair the store durably, then clear
            # what a crash left. Anyone else (a CLI reading beside a running daemon) must not
            # remove the locks of a writer at work: it only creates a missing store.
            repaired = ensure_store(home)
            self.recovery = recover_home(home)
            self.recovery.repaired_files = repaired
        else:
            if not (self.path / "HEAD").is_file():
                ensure_store(home)
            self.recovery = Recovery()
        self.repo = pygit2.Repository(str(self.path))
        # Only the daemon (``recover``: it holds the home's lock) moves attempt refs itself:
        # git's ref lock is not taken on that path (``snapshotd.store.loose_refs``).
        self.ref_mover = LooseRefMover(self.path, fsync=fsync) if recover else None
        self._ref_names: dict[str, str] = {}

    def replaced_objects(self) -> None:
        """Called after ``git gc`` repacked and pruned the store: reopen the store's handle and
        bump ``generation`` so every other long-lived handle is reopened before its next use.

        libgit2 keeps every pack it has opened in a handle's odb, deleted or not (a refresh
        only adds new packs), and a write first "freshens" an object it finds: within two
        seconds of that pack's last freshen it returns without touching the file. A handle
        from before the gc therefore skips writing an object gc just pruned, and a checkpoint
        naming it is acknowledged with the object missing (tests/test_gc_stale_odb.py)."""
        with self.lock:
            self.repo = pygit2.Repository(str(self.path))
            self.generation += 1

    def reader(self) -> pygit2.Repository:
        """A new read-only handle on the store for one thread (libgit2 handles are not shared
        between threads that read while another writes). Writes go through ``Store`` methods."""
        return pygit2.Repository(str(self.path))

    # -- the stat caches' files (the caches themselves: ``capture.stat_caches``) -------------

    def forget_cache_files(self, wt_id: str) -> None:
        """Remove the stat cache ``wt_id``'s index file, its nested repositories' caches and
        its keep ref, so that it vouches for no blob any more (``StatCaches.forget``)."""
        with self.lock:
            (self.home / "worktrees" / wt_id / "index").unlink(missing_ok=True)
            # The nested repositories' caches vouch for blobs too (``nested_repos``).
            nested = self.home / "worktrees" / wt_id / "nested"
            if nested.exists():
                shutil.rmtree(nested)
            try:
                self.repo.references.delete(CACHE_REF_PREFIX + wt_id)
            except KeyError:
                pass  # no gc has named this cache yet

    def is_store_failure(self, exc: BaseException,
                         source_readable: Callable[[], bool] | None = None) -> bool:
        """Whether a failed object write is the store's fault rather than the source file's.
        It is when the error names the store, when the disk refused a write (full, over quota,
        read-only, failing: by errno or by libgit2's message, which carries no errno), or when
        ``source_readable()`` says the file being hashed can in fact be read: only a file that
        cannot be read is the source's fault, so a store failure never passes for an
        unreadable file."""
        if str(self.path) in str(exc):
            return True
        if source_readable is not None:
            return source_readable()
        return is_write_failure(exc)

    # -- commits and refs ------------------------------------------------------------------

    def _ref(self, name: str) -> pygit2.Reference | None:
        """``references.get(name)`` given one str object per ref name: pygit2 (1.21) keeps a
        reference to the name every lookup is given, so it is never freed; a new string per
        capture grew the daemon by every checkpoint (issue 48), one per attempt does not."""
        canonical = self._ref_names.setdefault(name, name)
        if len(self._ref_names) > _REF_NAMES_MAX:
            self._ref_names.clear()  # a daemon running for months with many attempts
        return self.repo.references.get(canonical)

    def head(self, key: AttemptKey) -> pygit2.Commit | None:
        """The newest checkpoint commit of an attempt, or None when it has none yet. A ref that
        cannot be read (a damaged file, a commit that is gone) raises ``StoreError``
        (``commit-failed``): taken for "no checkpoint", the next commit would have no parent
        and force-move the ref over the attempt's chain."""
        try:
            ref = self._ref(key.ref)
            if ref is None:
                return None
            return self.repo[ref.target].peel(pygit2.Commit)
        except (pygit2.GitError, ValueError, KeyError) as exc:
            raise StoreError("commit-failed", f"could not read {key.ref} in {self.path}: "
                             f"{type(exc).__name__}: {exc}") from exc

    def commit(self, checkpoint: Checkpoint, tree: str, parent: str | None) -> str:
        """Write a checkpoint commit and move the attempt's ref to it. Returns the commit id.
        Raises ``StoreError``: ``store-write-failed`` when the disk refused the write,
        ``commit-failed`` otherwise."""
        try:
            return self._commit(checkpoint, tree, parent)
        except (pygit2.GitError, OSError) as exc:
            reason = STORE_WRITE_FAILED if is_write_failure(exc) else "commit-failed"
            raise StoreError(reason, f"could not write the checkpoint commit of {checkpoint.key}: "
                             f"{type(exc).__name__}: {exc}") from exc

    def _commit(self, checkpoint: Checkpoint, tree: str, parent: str | None) -> str:
        when = int(time.time())
        offset = -time.timezone // 60 if time.localtime().tm_isdst == 0 else -time.altzone // 60
        sig = pygit2.Signature(SIGNATURE_NAME, SIGNATURE_EMAIL, when, offset)
        # Formatted here, not by ``create_commit``, which parses the whole root tree first.
        raw = commit_bytes(tree, [parent] if parent else [], sig, sig, checkpoint.to_message())
        with self.lock:
            check_fault("objects")
            self._require_objects([tree] + ([parent] if parent else []))
            new_ref = False
            for attempt in range(1, ODB_TRIES + 1):
                # Written by ``loose``, not libgit2: no deflate, and the interpreter lock is
                # not held across the file's system calls (nor its inode's allocation). It
                # retries a fan-out directory a concurrent gc removed itself.
                oid = self.stored_objects.write("commit", raw)
                crash_point("after-commit")
                try:
                    if self._move_ref(checkpoint.key.ref, oid):
                        break
                    new_ref = self._ref(checkpoint.key.ref) is None
                    self.repo.references.create(checkpoint.key.ref, oid, force=True)
                    break
                except pygit2.GitError as exc:
                    # Seen under a concurrent `git gc` with a short prune grace, which deleted
                    # the commit just written before its ref moved (gc now holds ``gate``
                    # alone for that). Writing it again is safe (same bytes, same id); a
                    # missing tree or parent still fails above.
                    if "doesn't exist" not in str(exc) or attempt == ODB_TRIES:
                        raise
                    log.warning("commit %s vanished before its ref moved (%s); writing it "
                                "again", oid, exc)
            crash_point("after-ref")
            if self.fsync:
                self._make_names_durable(checkpoint.key, new_ref)
        return str(oid)

    def rewind(self, key: AttemptKey, tip: str, to: str | None) -> bool:
        """Move the attempt's ref back from ``tip`` to ``to`` (None: delete it), only if it
        still points at ``tip``: a commit whose ledger row was refused never happened."""
        with self.lock:
            ref = self._ref(key.ref)
            if ref is None or str(ref.target) != tip:
                return False
            if to is None:
                forget_spare(self.path, key.ref)
                ref.delete()
            else:
                self.repo.references.create(key.ref, pygit2.Oid(hex=to), force=True)
            return True

    def attempt_refs(self) -> Iterator[tuple[AttemptKey, str]]:
        """Every attempt ref in the store with its target commit id. A ref whose target cannot
        be read is left out with a warning (one damaged ref must not hide the others);
        ``ref_problem`` says what is wrong with it."""
        targets = []
        with self.lock:
            for name in [r for r in self.repo.references if r.startswith(REF_PREFIX)]:
                try:
                    targets.append((name, str(self.repo.references[name].target)))
                except (pygit2.GitError, KeyError, ValueError) as exc:
                    log.warning("the ref %s cannot be read: %s", name, exc)
        for name, target in targets:
            try:
                yield AttemptKey.from_ref(name), target
            except ValueError:
                continue

    def attempt_keys(self) -> list[AttemptKey]:
        """The attempts that have a ref in the store, readable or not."""
        with self.lock:
            names = [r for r in self.repo.references if r.startswith(REF_PREFIX)]
        keys = []
        for name in names:
            try:
                keys.append(AttemptKey.from_ref(name))
            except ValueError:
                continue
        return keys

    def ref_problem(self, key: AttemptKey) -> str | None:
        """What is wrong with the attempt's ref, for certain: its file cannot be parsed, or it
        names an object the store does not hold or that is not a commit. None when it is
        absent or names a readable commit (an I/O error reading it is not "for certain": the
        caller sees it from ``head``)."""
        with self.lock:
            try:
                ref = self._ref(key.ref)
            except pygit2.GitError as exc:
                if "corrupted" not in str(exc):
                    return None
                return f"its ref {key.ref} cannot be parsed ({exc})"
            if ref is None:
                return None
            target = ref.target
            if not isinstance(target, pygit2.Oid):
                return f"its ref {key.ref} is symbolic (-> {target})"
            if target not in self.repo.odb:
                return f"its ref {key.ref} names commit {target}, which is not in the store"
            try:
                self.repo[target].peel(pygit2.Commit)
            except (pygit2.GitError, ValueError, KeyError) as exc:
                return f"its ref {key.ref} names {target}, which is not a commit ({exc})"
        return None

    def has_object(self, oid: str) -> bool:
        """Whether the store holds the object ``oid`` (a malformed id: False)."""
        try:
            with self.lock:
                return pygit2.Oid(hex=oid) in self.repo.odb
        except (ValueError, TypeError, pygit2.GitError):
            return False

    def has_checkpoint(self, commit_id: str) -> bool:
        """Whether the store holds commit ``commit_id`` and its tree (a power cut with
        ``durability = "process"`` can take both while a ledger row or a ref still names them)."""
        with self.lock:
            try:
                commit = self.repo[commit_id].peel(pygit2.Commit)
                return commit.tree_id in self.repo.odb
            except (KeyError, ValueError, pygit2.GitError):
                return False

    def read_commit(self, commit_id: str) -> pygit2.Commit:
        """A commit of the store by id (KeyError when it has none)."""
        with self.lock:
            return self.repo[commit_id].peel(pygit2.Commit)

    def tree_changes(self, old: str | None, new: str) -> tuple[int, int, int]:
        """Files added, modified and deleted from tree ``old`` (None: empty) to ``new``; see
        ``trees.tree_changes`` (only differing subtrees are read). Read on this thread's own
        handle without the store lock: a first capture of a large tree counts every file, and
        the commits of other worktrees must not wait for that."""
        return tree_changes(self.thread_reader(), old, new)

    def thread_reader(self) -> pygit2.Repository:
        """This thread's read handle on the store (made on first use, kept for the thread's
        life). For object reads only; writes go through ``Store`` methods under ``lock``."""
        repo = getattr(self._readers, "repo", None)
        if repo is None or self._readers.generation != self.generation:
            # Reopened after a gc: an object gc pruned would still be found in a deleted pack.
            self._readers.generation = self.generation
            repo = self._readers.repo = self.reader()
        return repo

    # -- retention: chain rewrites, ref moves, keep refs (gc decides, the store writes) -------

    def rewrite_chain(self, commits: list[str], onto: str | None) -> list[str]:
        """Write fresh copies of ``commits`` (oldest first) as a chain on ``onto`` (None: a new
        root): same trees, messages, authors and committers, new parents. Returns the new ids
        in order. No ref moves: the caller records the rewrite, then calls ``set_attempt_ref``."""
        out: list[str] = []
        parent = onto
        with self.lock:
            for commit_id in commits:
                old = self.repo[commit_id].peel(pygit2.Commit)
                parents = [pygit2.Oid(hex=parent)] if parent else []
                oid = odb_retry(self.repo.create_commit, None, old.author, old.committer,
                                old.message, old.tree_id, parents)
                parent = str(oid)
                out.append(parent)
        return out

    def purge_chain(self, commits: list[str], onto: str | None, path: str,
                    hold: AttemptKey, message: Callable[[str], str] = str
                    ) -> list[tuple[str, str]]:
        """``rewrite_chain`` with ``path`` (a file or a directory, worktree-relative) taken out
        of every tree, each message passed through ``message`` (the purge drops the path's
        secret findings): the new ``(commit, tree)`` of each, oldest first. The attempt ref does
        not move; the new tip is named by ``hold``'s purge hold ref before this returns (the
        objects written under the gate, as a capture's are), so no ``git gc``, whatever its
        grace, deletes the new chain before the attempt ref names it (``release_purge_holds``
        drops the hold afterwards)."""
        out: list[tuple[str, str]] = []
        parent = onto
        parts = [p for p in path.split("/") if p]
        with self.gate.shared(), self.lock:
            for commit_id in commits:
                old = self.repo[commit_id].peel(pygit2.Commit)
                tree = _tree_without(self.repo, old.tree, parts)
                parents = [pygit2.Oid(hex=parent)] if parent else []
                oid = odb_retry(self.repo.create_commit, None, old.author, old.committer,
                                message(old.message), tree, parents)
                parent = str(oid)
                out.append((parent, str(tree)))
            if parent is not None:
                self.repo.references.create(_purge_hold_ref(hold), pygit2.Oid(hex=parent),
                                            force=True)
        return out

    def release_purge_holds(self, key: AttemptKey | None = None) -> int:
        """Drop the purge hold ref of ``key`` (None: every one, left by a crash); how many."""
        with self.lock:
            names = [_purge_hold_ref(key)] if key is not None else \
                [r for r in self.repo.references if r.startswith(PURGE_HOLD_PREFIX)]
            dropped = 0
            for name in names:
                try:
                    self.repo.references.delete(name)
                    dropped += 1
                except KeyError:
                    continue  # never made (nothing to purge) or already dropped
            return dropped

    def set_attempt_ref(self, key: AttemptKey, commit: str) -> None:
        """Point the attempt's ref at ``commit`` whatever it names now (a rewritten chain's
        tip, or finishing a rewrite a crash interrupted)."""
        with self.lock:
            self.repo.references.create(key.ref, pygit2.Oid(hex=commit), force=True)

    def keep_base(self, key: AttemptKey, user_gitdir: Path, commit: str) -> str | None:
        """The tree of the user's ``commit`` brought into the store and kept by the attempt's
        base ref (``bases.keep_base``); None, logged, when it cannot be."""
        return keep_base(self, key, user_gitdir, commit)

    def remove_attempt_ref(self, key: AttemptKey) -> None:
        """Remove the attempt's ref even when its file cannot be parsed (libgit2 will not
        delete such a ref: the loose file is unlinked). Its base ref stays: the caller sets
        the ref again over the checkpoints still readable."""
        with self.lock:
            forget_spare(self.path, key.ref)
            try:
                self.repo.references.delete(key.ref)
            except KeyError:
                return
            except pygit2.GitError:
                (self.path / key.ref).unlink(missing_ok=True)

    def delete_attempt_refs(self, keys: Iterable[AttemptKey]) -> None:
        """Delete the refs of ``keys`` (a run being deleted), their base refs too; a ref
        already gone is fine."""
        with self.lock:
            for key in keys:
                forget_spare(self.path, key.ref)
                drop_base_ref(self.repo, key)
                try:
                    self.repo.references.delete(key.ref)
                except KeyError:
                    continue
                except pygit2.GitError as exc:
                    # Its checkpoints then stay reachable: space, not data, is what is lost.
                    log.warning("could not delete %s: %s", key.ref, exc)

    def refresh_cache_refs(self, loaded: Mapping[str, str | None]) -> None:
        """Point ``refs/snapshotd/cache/<id>`` at the tree of every stat cache, loaded (by id in
        ``loaded``, with the tree it vouches for, None for none yet) or only on disk, so ``git
        gc`` keeps the blobs a cache may still vouch for; drop the keep refs of caches that are
        gone. A cache on disk whose tree cannot be written is deleted (it is rebuilt on next
        use) rather than left vouching for blobs ``git gc`` may drop."""
        named: set[str] = set()
        for wt_id, tree in loaded.items():
            if tree is not None:
                self._set_cache_ref(wt_id, tree)
                named.add(wt_id)
        caches = self.home / "worktrees"
        for gitdir in caches.iterdir() if caches.is_dir() else []:
            if gitdir.name in named or not (gitdir / "index").is_file():
                continue
            tree = self._disk_cache_tree(gitdir)
            if tree is not None:
                self._set_cache_ref(gitdir.name, tree)
        with self.lock:
            existing = set(loaded)
            if caches.is_dir():
                existing |= {p.name for p in caches.iterdir()}
            for name in list(self.repo.references):
                if name.startswith(CACHE_REF_PREFIX) \
                        and name[len(CACHE_REF_PREFIX):] not in existing:
                    self.repo.references.delete(name)

    # -- git's own writers: a remote's refs, and gc (``store.git_cli``) -------------------------

    def fetch_staged(self, url: str, src: str,
                     timeout: float) -> tuple[subprocess.CompletedProcess, str]:
        """Fetch the remote's ``src`` (a ref or a ``refs/…/*`` pattern) into a staging
        namespace of its own, every object checked by git: git's result, and the namespace
        (``refs/snapshotd-fetch/<unique>/``; the staged name of ``refs/X`` is ``<ns>X``).
        Nothing else moves; ``drop_staged`` removes the namespace."""
        staging = f"{STAGING_PREFIX}{os.getpid()}-{next(_fetches)}-{time.time_ns()}/"
        dst = staging + src[len("refs/"):]
        return git_cli.fetch_staged(self.path, url, src, dst, timeout), staging

    def adopt_ref(self, key: AttemptKey, tip: str,
                  current: str | None) -> subprocess.CompletedProcess:
        """Point the attempt's ref at ``tip`` (a fetched chain the caller verified) only if it
        still names ``current`` (None: absent): git's result."""
        with self.lock:
            return git_cli.adopt_ref(self.path, key.ref, tip, current)

    def drop_staged(self, staging: str) -> str | None:
        """Remove a fetch's staging namespace; what went wrong (the refs stay), or None."""
        if not staging.startswith(STAGING_PREFIX):
            raise ValueError(f"{staging} is not a fetch's staging namespace")
        return git_cli.drop_staged(self.path, staging)

    def collect_garbage(self, prune_grace_s: float) -> subprocess.CompletedProcess:
        """``git gc``, unreachable objects older than ``prune_grace_s`` pruned and refs left
        loose; then every handle is reopened (``replaced_objects``), even after a failure,
        which may have deleted packs. The caller holds ``gate`` when the grace is short."""
        try:
            return git_cli.collect_garbage(self.path, prune_grace_s)
        finally:
            self.replaced_objects()

    # -- helpers ---------------------------------------------------------------------------

    def _set_cache_ref(self, wt_id: str, tree: str) -> None:
        with self.lock:
            self.repo.references.create(CACHE_REF_PREFIX + wt_id, pygit2.Oid(hex=tree),
                                        force=True)

    def _disk_cache_tree(self, gitdir: Path) -> str | None:
        """The tree a stat cache on disk (not loaded) describes, written into the store; None
        (and the cache deleted) when it cannot be read or its tree is not in the store (its
        cache-tree names one that is gone)."""
        try:
            # Through a repository on the cache's git dir, not ``pygit2.Index(path)``: that one
            # leaves a half-built object behind when the file does not parse.
            disk_index = pygit2.Repository(str(gitdir)).index
            with self.lock:
                tree = odb_retry(disk_index.write_tree, self.repo)
                if tree not in self.repo.odb:
                    raise ValueError(f"its tree {tree} is not in the store")
            return str(tree)
        except (pygit2.GitError, OSError, ValueError) as exc:
            log.warning("dropping the stat cache %s: it cannot name its tree (%s); it is "
                        "rebuilt on next use", gitdir.name, exc)
            (gitdir / "index").unlink(missing_ok=True)
            return None

    def _move_ref(self, ref: str, oid: pygit2.Oid) -> bool:
        """Move an existing loose attempt ref to ``oid`` without libgit2 (see
        ``snapshotd.store.loose_refs``); False when the caller must create it through libgit2.
        libgit2 checks that the commit exists before it moves a ref; so does this (a ``git gc``
        that pruned it meanwhile is the retry's case)."""
        if self.ref_mover is None:
            return False
        if not self.repo.odb.exists(oid):
            raise pygit2.GitError(f"the object {oid} doesn't exist")
        return self.ref_mover.move(ref, str(oid))

    def _require_objects(self, ids: list[str]) -> None:
        """A commit is written only over a tree and parents the store holds."""
        for oid in ids:
            if not self.repo.odb.exists(pygit2.Oid(hex=oid)):
                raise pygit2.GitError(f"object not found - no match for id ({oid})")

    def _make_names_durable(self, key: AttemptKey, new_ref: bool) -> None:
        """libgit2 fsyncs each object, its fan-out directory and the ref's own directory, but
        not ``objects`` (which gains a fan-out directory now and then) nor the directories a new
        ref was created in: without these a power cut can drop them, names and all."""
        dirs = [self.path / "objects"]
        if new_ref:
            ref_dir = (self.path / key.ref).parent
            while ref_dir != self.path:
                dirs.append(ref_dir)
                ref_dir = ref_dir.parent
        sync_dirs(dirs)


def _purge_hold_ref(key: AttemptKey) -> str:
    return PURGE_HOLD_PREFIX + key.ref[len(REF_PREFIX):]


def _tree_without(repo: pygit2.Repository, tree: pygit2.Tree, parts: list[str]) -> pygit2.Oid:
    """``tree`` with the entry at ``parts`` removed (its id unchanged when there is none); a
    directory left empty goes too, as git has no empty trees in a worktree's history."""
    if parts[0] not in tree:
        return tree.id
    builder = repo.TreeBuilder(tree)
    if len(parts) == 1:
        builder.remove(parts[0])
    else:
        child = tree[parts[0]]
        if child.type_str != "tree":
            return tree.id
        new_child = _tree_without(repo, repo[child.id].peel(pygit2.Tree), parts[1:])
        if new_child == child.id:
            return tree.id
        if len(repo[new_child].peel(pygit2.Tree)) == 0:
            builder.remove(parts[0])
        else:
            builder.insert(parts[0], new_child, child.filemode)
    return builder.write()
