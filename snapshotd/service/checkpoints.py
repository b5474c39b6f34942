"""Checkpoint lookup: which checkpoint a request names, and the trees restore and diff compare.

Owns the resolution of ``RUN/NODE[/ITERATION/ATTEMPT][@SEQ]`` to one ledger row
(``find_checkpoint``, with ``selection`` validating the request's fields first), the printed form
of a seq list (``format_seqs``), the worktree's current tree without recording anything
(``current_tree_of``) and a checkpoint's tree in the store (``checkpoint_tree``).
Restore and diff (``features``) build on it; it imports neither. Promises:
- Default selection: the newest attempt of the node that has checkpoints (highest iteration, then
  attempt number) and its newest checkpoint, skipping safety checkpoints (source ``restore``)
  unless asked not to, so a default restore never "restores" the state a previous restore
  replaced. A pruned checkpoint is never returned.
- Every refusal is a ``ServiceError``: ``bad-id``/``bad-request`` for malformed fields,
  ``not-found`` naming what does exist (runs, nodes, attempts, seqs, the nearest kept seqs of a
  pruned one), ``restore-failed`` for a tree the store no longer holds or a worktree that cannot
  be read.
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

import pygit2

from snapshotd.core import NOT_FOUND, RESTORE_FAILED, ServiceError, id_field, int_value
from snapshotd.ledger import Ledger
from snapshotd.service.service import Service
from snapshotd.store import StoreError


def selection(run_id: object, node_id: object, seq: object = None, iteration: object = None,
              attempt: object = None) -> tuple[str, str, int | None, int | None, int | None]:
    """A request's ``(run_id, node_id, seq, iteration, attempt)``, checked; None stays None."""
    run = id_field("run_id", run_id)
    node = id_field("node_id", node_id)
    s = None if seq is None else int_value("seq", seq, 0)
    i = None if iteration is None else int_value("iteration", iteration, 0)
    a = None if attempt is None else int_value("attempt", attempt, 1)
    return run, node, s, i, a


def find_checkpoint(ledger: Ledger, run_id: str, node_id: str, *, seq: int | None = None,
                    iteration: int | None = None, attempt: int | None = None,
                    skip_safety: bool = True) -> dict:
    """The checkpoint row a (run, node, iteration?, attempt?, seq?) selection names.

    Unspecified iteration/attempt mean the newest attempt of the node that has checkpoints
    (highest iteration, then highest attempt). Unspecified seq means its newest checkpoint, not
    counting safety checkpoints when ``skip_safety``. Errors name what does exist.
    """
    rows = ledger.checkpoints(run_id, node_id)
    if not rows:
        _refuse_unknown(ledger, run_id, node_id)
    chosen = [c for c in rows if (iteration is None or c["iteration"] == iteration)
              and (attempt is None or c["attempt"] == attempt)]
    if not chosen:
        have = sorted({(c["iteration"], c["attempt"]) for c in rows})
        listed = ", ".join(f"iteration {i} attempt {a}" for i, a in have)
        wanted = " ".join(part for part in (
            f"iteration {iteration}" if iteration is not None else "",
            f"attempt {attempt}" if attempt is not None else "") if part)
        raise ServiceError(NOT_FOUND, f"run {run_id!r} node {node_id!r} has no "
                           f"checkpoints in {wanted}; it has: {listed}")
    newest = max((c["iteration"], c["attempt"]) for c in chosen)
    in_attempt = sorted((c for c in chosen if (c["iteration"], c["attempt"]) == newest),
                        key=lambda c: c["seq"])
    where = f"{run_id}/{node_id} iteration {newest[0]} attempt {newest[1]}"
    # Rows that retention pruned stay listed, but their commits are gone: never a target.
    live = [c for c in in_attempt if not c.get("pruned_at")]
    if seq is None:
        agent_made = [c for c in live if c["source"] != "restore"] if skip_safety else []
        if not live:
            raise ServiceError(NOT_FOUND, f"every checkpoint of {where} has been pruned")
        return (agent_made or live)[-1]
    for c in in_attempt:
        if c["seq"] == seq:
            if c.get("pruned_at"):
                _refuse_pruned(c, where, [x["seq"] for x in live])
            return c
    raise ServiceError(NOT_FOUND, f"{where} has no checkpoint seq {seq}; its seqs are "
                       f"{format_seqs([c['seq'] for c in live])}")


def format_seqs(seqs: list[int]) -> str:
    """``[0, 1, 2, 5, 7, 8]`` → ``0-2, 5, 7-8``."""
    out: list[str] = []
    ordered = sorted(set(seqs))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ", ".join(out) or "none"


def current_tree_of(service: Service, root: Path) -> tuple[str, str]:
    """The worktree's tree now, recording nothing, and how it was read: ``fast`` (only the
    paths the watcher vouches changed since the last capture) or ``full`` (a stat scan). The
    caller holds the worktree lock. Used by ``restore --dry-run`` and ``diff --worktree``."""
    try:
        found = service.read_worktree(root)
    except StoreError as exc:
        raise ServiceError(RESTORE_FAILED, f"could not read {root}: {exc.message}") from exc
    except Exception as exc:  # noqa: BLE001 - reported to the caller, never a daemon crash
        raise ServiceError(RESTORE_FAILED, f"could not read {root}: {exc}") from exc
    return found.tree, "full" if found.full_scan else "fast"


def checkpoint_tree(repo: pygit2.Repository, cp: dict) -> pygit2.Tree:
    """The tree checkpoint row ``cp`` names, or ``restore-failed`` when the store lacks it."""
    tree_id = cp["tree"]
    try:
        return repo[tree_id].peel(pygit2.Tree)
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise ServiceError(RESTORE_FAILED, f"checkpoint seq {cp['seq']} "
                           f"({cp['commit'][:12]}) names tree {tree_id[:12]}, which the store no "
                           f"longer holds: {exc}") from exc


def _refuse_unknown(ledger: Ledger, run_id: str, node_id: str) -> NoReturn:
    """``not-found`` for a run or node without checkpoints, naming the known runs or nodes."""
    runs = ledger.run_ids()
    if run_id not in runs:
        known = ", ".join(runs[-20:]) or "none"
        raise ServiceError(NOT_FOUND, f"unknown run {run_id!r}; known runs: {known}")
    nodes = sorted({c["node_id"] for c in ledger.checkpoints(run_id)})
    raise ServiceError(NOT_FOUND, f"run {run_id!r} has no checkpoints for node "
                       f"{node_id!r}; its nodes: {', '.join(nodes) or 'none'}")


def _refuse_pruned(cp: dict, where: str, kept: list[int]) -> NoReturn:
    """``not-found`` for a pruned seq, naming the nearest kept seqs on either side."""
    seq = cp["seq"]
    below = [k for k in kept if k < seq]
    above = [k for k in kept if k > seq]
    nearest = ", ".join(str(k) for k in ([below[-1]] if below else [])
                        + ([above[0]] if above else []))
    raise ServiceError(NOT_FOUND, f"{where} seq {seq} was pruned "
                       f"({cp.get('pruned_reason') or 'retention'}); the nearest kept seqs are "
                       f"{nearest or 'none'} (all kept: {format_seqs(kept)})")
