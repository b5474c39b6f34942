"""Files kept on this host only: a guard checkpoint's ignored files (docs/guard.md).

Owns the refs ``refs/snapshotd-local/guard/<run>/<node>/<iteration>/<attempt>``: per attempt, a
chain of commits each holding the ignored files kept before one destructive command, with the
trailers ``Guard-Seq`` (the guard checkpoint's seq) and ``Guard-Checkpoint`` (its commit)
and, in the message, every file left out and why. They are not checkpoints: no attempt ref,
ledger row, listing, diff or log reads them.

Promises: replication pushes ``refs/snapshotd/runs/`` only, so nothing here leaves the host; the
objects are written into ``store.git`` under the daemon's umask (077: files 0600 or stricter);
``keep_ignored`` writes the blobs, tree, commit and ref under the store's lock and the caller's
``gate``, so gc never prunes them half-named; ``kept_for`` reads the newest set for a seq.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pygit2

from snapshotd.core import REF_PREFIX, AttemptKey

if TYPE_CHECKING:
    from snapshotd.store.store import Store

KEPT_PREFIX = "refs/snapshotd-local/guard/"
SEQ_TRAILER = "Guard-Seq"
CHECKPOINT_TRAILER = "Guard-Checkpoint"


@dataclass(frozen=True)
class KeptFile:
    """One file kept: its worktree-relative path, bytes and git mode (0o100644, 0o100755 or
    0o120000 for a symlink, whose bytes are its target)."""
    path: str
    data: bytes
    mode: int


def kept_ref(key: AttemptKey) -> str:
    """The local ref of ``key``'s kept ignored files."""
    return KEPT_PREFIX + key.ref[len(REF_PREFIX):]


def keep_ignored(store: Store, key: AttemptKey, seq: int, checkpoint: str,
                 files: Iterable[KeptFile], message: str) -> str:
    """Write ``files`` as one commit on ``key``'s kept chain for checkpoint ``seq`` (``message``
    first, then the trailers) and move the local ref to it; the commit id."""
    ref = kept_ref(key)
    with store.lock:
        repo = store.repo
        index = pygit2.Index()
        for f in files:
            oid = repo.create_blob(f.data)
            index.add(pygit2.IndexEntry(f.path, oid, f.mode))
        tree = index.write_tree(repo)
        parents = []
        try:
            parents = [repo.references[ref].target]
        except KeyError:
            pass
        sig = pygit2.Signature("snapshotd", "snapshotd@localhost")
        text = (f"{message.rstrip()}\n\n{SEQ_TRAILER}: {seq}\n"
                f"{CHECKPOINT_TRAILER}: {checkpoint}\n")
        commit = repo.create_commit(None, sig, sig, text, tree, parents)
        repo.references.create(ref, commit, force=True)
    return str(commit)


def kept_for(store: Store, key: AttemptKey, seq: int | None = None
             ) -> tuple[str, list[KeptFile], str] | None:
    """The newest kept set of ``key`` (for checkpoint ``seq`` when given): its commit id, its
    files and its message; None when there is none."""
    repo = store.reader()
    try:
        commit = repo.references[kept_ref(key)].peel(pygit2.Commit)
    except KeyError:
        return None
    while commit is not None:
        found = _trailer(commit.message, SEQ_TRAILER)
        if seq is None or found == str(seq):
            files: list[KeptFile] = []
            _collect(repo, commit.tree, "", files)
            return str(commit.id), files, commit.message
        commit = commit.parents[0] if commit.parents else None
    return None


def kept_seqs(store: Store, key: AttemptKey) -> list[int]:
    """The seqs of ``key``'s checkpoints that have kept files, oldest first."""
    repo = store.reader()
    try:
        commit = repo.references[kept_ref(key)].peel(pygit2.Commit)
    except KeyError:
        return []
    seqs: set[int] = set()
    while commit is not None:
        found = _trailer(commit.message, SEQ_TRAILER)
        if found is not None and found.isdigit():
            seqs.add(int(found))
        commit = commit.parents[0] if commit.parents else None
    return sorted(seqs)


def drop_kept(store: Store, keys: Iterable[AttemptKey]) -> None:
    """Delete the kept chains of ``keys`` (their attempts were deleted); absent ones are fine."""
    with store.lock:
        for key in keys:
            try:
                store.repo.references.delete(kept_ref(key))
            except KeyError:
                continue


def _trailer(message: str, name: str) -> str | None:
    for line in reversed(message.splitlines()):
        if line.startswith(name + ": "):
            return line[len(name) + 2:].strip()
    return None


def _collect(repo: pygit2.Repository, tree: pygit2.Tree, prefix: str,
             out: list[KeptFile]) -> None:
    for entry in tree:
        path = prefix + entry.name
        if entry.filemode == pygit2.GIT_FILEMODE_TREE:
            _collect(repo, repo[entry.id], path + "/", out)
        else:
            out.append(KeptFile(path, repo[entry.id].data, entry.filemode))
