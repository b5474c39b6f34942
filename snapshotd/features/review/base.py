"""What a checkpoint's change is measured against: its base.

Owns ``Base`` and ``first_base``: a checkpoint with a parent is compared with its parent checkpoint; the
first checkpoint of an attempt with what the worktree held before it (docs/review.md, "The first
checkpoint's base"), in this order: the commit the worktree's HEAD named when the attempt began
(the base and base-tree trailers of the first checkpoint's commit, that tree kept in the
store by ``store.bases``: kind ``commit``); else, when the first checkpoint is a session's start baseline (taken before
any tool call), that baseline itself, so it changed nothing (``session-start``); else the empty
tree (``empty-tree``), which every front end names as such. So ``log -S`` agrees with
``git log -S --first-parent`` from the commit the session started on.
Promises: reads only the store (one commit message for a first checkpoint); a base tree the
store no longer holds is the empty tree, never an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import pygit2

from snapshotd.core import Trailers

# The label of a session's start baseline (``features.sessions``: ``session <event>``).
SESSION_START_LABEL = "session start"
EMPTY_NOTE = "compared with an empty tree: no earlier state of the worktree is known"


@dataclass(frozen=True)
class Base:
    """``kind`` (``parent``, ``commit``, ``session-start``, ``empty-tree``), the tree compared
    with (None: the empty tree) and the commit that names it (the parent checkpoint's, or the
    user's base commit; None for the others)."""

    kind: str
    tree: str | None
    commit: str | None


def first_base(repo: pygit2.Repository, cp: dict) -> Base:
    """The base of a checkpoint without a parent (a ledger row's fields)."""
    try:
        trailers = Trailers(repo[cp["commit"]].peel(pygit2.Commit).message)
        base, tree = trailers.base, trailers.base_tree
        if base and tree and pygit2.Oid(hex=tree) in repo.odb:
            return Base("commit", tree, base)
    except (KeyError, ValueError, pygit2.GitError):
        pass  # a commit or trailer that cannot be read: no recorded base, said below
    if cp.get("label") == SESSION_START_LABEL and not cp.get("tool_use_id"):
        return Base("session-start", cp["tree"], None)
    return Base("empty-tree", None, None)


def base_tree_of_root(repo: pygit2.Repository, commit: pygit2.Commit) -> tuple[str, str] | None:
    """For a chain's root commit (a first checkpoint): its kept base tree and base commit."""
    if commit.parents:
        return None
    trailers = Trailers(commit.message)
    base, tree = trailers.base, trailers.base_tree
    try:
        if base and tree and pygit2.Oid(hex=tree) in repo.odb:
            return tree, base
    except ValueError:
        return None
    return None
