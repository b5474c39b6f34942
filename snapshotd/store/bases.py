"""An attempt's base: the tree of the commit the user's HEAD named when the attempt began.

Owns ``keep_base`` and the base refs ``refs/snapshotd/base/<run>/<node>/<iteration>/<attempt>``.
Review compares an attempt's first checkpoint with its base (docs/review.md, "The first
checkpoint's base"), so the base's tree must be in the store and stay there: ``keep_base``
brings in, from the user's repository, the objects of that tree the store lacks (a tree the
store holds vouches for everything below it, so the walk costs what differs from what the seed
already brought in), then names the tree by the attempt's base ref, which ``git gc`` keeps and
which goes with the attempt's ref (``drop_base_ref``). Promises: the user's repository is only
read; the ref is set only once every object arrived (``import_objects``: whole packs, never
alternates); a failure is logged and returns None, never fails the capture (review then says
the first checkpoint is compared with an empty tree).
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Protocol

import pygit2
from pygit2.enums import FileMode

from snapshotd.core import REF_PREFIX, AttemptKey
from snapshotd.store.object_import import import_objects


class _StoreParts(Protocol):
    """What ``keep_base`` uses of ``store.Store`` (named here: the store module imports this)."""

    path: Path
    fsync: bool
    repo: pygit2.Repository
    lock: threading.Lock

    def reader(self) -> pygit2.Repository: ...
log = logging.getLogger("snapshotd.store")

BASE_REF_PREFIX = "refs/snapshotd/base/"


def base_ref(key: AttemptKey) -> str:
    """The ref that keeps attempt ``key``'s base tree."""
    return BASE_REF_PREFIX + key.ref[len(REF_PREFIX):]


def keep_base(store: _StoreParts, key: AttemptKey, user_gitdir: Path, commit: str) -> str | None:
    """The tree of ``commit`` (of the repository at ``user_gitdir``) in the store, named by the
    attempt's base ref; None (logged) when it cannot be."""
    try:
        user = pygit2.Repository(str(user_gitdir))
        tree = user[commit].peel(pygit2.Commit).tree
        # On a handle of its own: the walk must not hold the store's lock other captures take.
        missing = _missing(user, store.reader().odb, tree.id)
        if missing and not import_objects(user_gitdir, store.path, missing, store.fsync):
            raise OSError(f"{len(missing)} objects could not all be copied")
        with store.lock:
            if tree.id not in store.repo.odb:
                raise OSError(f"the tree {tree.id} is not in the store after the import")
            store.repo.references.create(base_ref(key), tree.id, force=True)
        return str(tree.id)
    except Exception as exc:  # noqa: BLE001 - the base is optional: never fail the capture
        log.warning("the base %s of %s is not kept (its first checkpoint is compared with an "
                    "empty tree): %s", commit[:12], key, exc)
        return None


def drop_base_ref(repo: pygit2.Repository, key: AttemptKey) -> None:
    """Delete the attempt's base ref (absent is fine). The caller holds the store's lock."""
    try:
        repo.references.delete(base_ref(key))
    except KeyError:
        return
    except pygit2.GitError as exc:
        # The base tree then stays reachable: space, not data, is what is lost.
        log.warning("could not delete %s: %s", base_ref(key), exc)


def _missing(user: pygit2.Repository, odb: pygit2.Odb, root: pygit2.Oid) -> list[bytes]:
    """The raw ids of the objects under tree ``root`` (itself included) the store's ``odb``
    lacks. Submodules (gitlinks) name commits of other repositories: not followed."""
    wanted: dict[bytes, None] = {}
    stack = [root]
    while stack:
        oid = stack.pop()
        if oid in odb or oid.raw in wanted:
            continue
        wanted[oid.raw] = None
        for entry in user[oid].peel(pygit2.Tree):
            if entry.filemode == FileMode.COMMIT:
                continue
            if entry.filemode == FileMode.TREE:
                stack.append(entry.id)
            elif entry.id not in odb:
                wanted[entry.id.raw] = None
    return list(wanted)
