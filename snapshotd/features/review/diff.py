"""Diff: what changed between two checkpoints, or between a checkpoint and the worktree now.

Owns ``diff_checkpoints`` (behind the ``diff`` op, registered by ``attach``) and
``render_trees``, which turns two tree ids of the store into a git-style patch, a name-status
list and a diffstat: the one diff engine of every front end (CLI, MCP, web app; the review
reads run it on ``store.pruned_pair``). Promises:
- ``--seq A`` alone: what A changed against its attempt's previous checkpoint (seq 0 against the
  empty tree); ``--to-seq B``: A against B; ``--worktree``: A against the worktree now (captured
  under its lock into the stat cache, no checkpoint recorded).
- The patch is git's format (``diff --git a/… b/…``, renames detected, binary files named, not
  dumped); it is computed by libgit2 from tree ids, so its cost follows the difference.
- Over the socket, a patch or file list too large for one frame is left out and flagged; the two
  tree ids and the store path are always returned, so a client renders it locally.
- Paths keep bytes that are not UTF-8 (``os.fsdecode`` of git's raw path) and so does the patch
  (decoded with surrogate escapes); the wire carries them as docs/protocol.md describes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import DiffOption, DiffStatsFormat

from snapshotd.core import (
    BAD_REQUEST,
    CAPTURE_FAILED,
    WORKTREE_MISSING,
    AttemptKey,
    Registry,
    ServiceError,
    Trailers,
    bool_field,
    int_value,
)
from snapshotd.features.review.base import first_base
from snapshotd.service import Service, current_tree_of, find_checkpoint, selection
from snapshotd.store import empty_tree
from snapshotd_client import encode_frame

if TYPE_CHECKING:
    from snapshotd.core import Config


WIRE_PATCH_LIMIT = 768 * 1024
WIRE_FILES_LIMIT = 5000


def diff_checkpoints(service: Service, *, run_id: str, node_id: str, seq: int | None,
                     to_seq: int | None = None, worktree: bool = False,
                     iteration: int | None = None, attempt: int | None = None,
                     patch: bool = True, wire: bool = False) -> dict:
    """Diff checkpoint ``seq`` against ``to_seq``, the worktree now, or its parent checkpoint."""
    started = time.perf_counter()
    if seq is None:
        raise ServiceError(BAD_REQUEST, "name the checkpoint to compare with --seq")
    if to_seq is not None and worktree:
        raise ServiceError(BAD_REQUEST, "compare with --to-seq or with --worktree, not both")
    run_id, node_id, seq, iteration, attempt = selection(run_id, node_id, seq, iteration, attempt)
    if to_seq is not None:
        to_seq = int_value("to_seq", to_seq, 0)
    base = find_checkpoint(service.ledger, run_id, node_id, seq=seq, iteration=iteration,
                           attempt=attempt)
    repo = service.store.reader()
    side_a = {"seq": base["seq"], "commit": base["commit"], "tree": base["tree"]}
    if to_seq is not None:
        other = find_checkpoint(service.ledger, run_id, node_id, seq=to_seq,
                                iteration=base["iteration"], attempt=base["attempt"])
        side_b = {"seq": other["seq"], "commit": other["commit"], "tree": other["tree"]}
    elif worktree:
        attempt_row = service.ledger.get_attempt(_key(base))
        root = Path(attempt_row.worktree if attempt_row else base["worktree"])
        if not root.is_dir():
            raise ServiceError(WORKTREE_MISSING, f"worktree {root} does not exist any more; "
                               "compare two checkpoints with --to-seq instead")
        # Through the watcher when it vouches (a watched or lingering worktree): O(changes).
        with service.worktree_lock(root):
            try:
                tree, _scan = current_tree_of(service, root)
            except ServiceError as exc:
                raise ServiceError(CAPTURE_FAILED, exc.message) from exc
        side_b = {"seq": None, "commit": None, "tree": tree, "worktree": str(root)}
    else:
        # What checkpoint A changed: its parent commit in the attempt's chain, or its base
        # (``review.base``: the commit the worktree was at, else the empty tree).
        side_b = side_a
        parent = base.get("parent")
        first = None if parent else first_base(repo, base)
        side_a = ({"seq": base["seq"] - 1 if base["seq"] else None, "commit": parent,
                   "tree": str(repo[parent].peel(pygit2.Commit).tree_id)} if first is None
                  else {"seq": None, "commit": first.commit,
                        "tree": first.tree or empty_tree(repo)})
        if parent:
            side_a["seq"] = _seq_of(repo, parent, side_a["seq"])
    out = {"run_id": run_id, "node_id": node_id, "iteration": base["iteration"],
           "attempt": base["attempt"], "from": side_a, "to": side_b,
           "store": str(service.store.path)}
    out.update(render_trees(repo, side_a["tree"], side_b["tree"], patch=patch))
    if wire:
        size = len(out["patch"].encode("utf-8", "surrogateescape")) if out["patch"] else 0
        if size > WIRE_PATCH_LIMIT:
            out["patch_omitted"] = (f"the patch is {size} bytes, too large for one reply; "
                                    "render it from the two trees in `store`")
            out["patch"] = None
        if len(out["files"]) > WIRE_FILES_LIMIT:
            out["files_total"] = len(out["files"])
            out["files"] = out["files"][:WIRE_FILES_LIMIT]
            out["files_truncated"] = True
        _fit(out)
    out["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return out


def attach(service: Service, server: Registry, config: Config) -> None:
    """Register the ``diff`` op on the daemon's server."""

    def diff_op(fields: dict) -> dict:
        return diff_checkpoints(
            service, run_id=fields.get("run_id"), node_id=fields.get("node_id"),
            seq=fields.get("seq"), to_seq=fields.get("to_seq"),
            worktree=bool_field(fields, "worktree"), iteration=fields.get("iteration"),
            attempt=fields.get("attempt"), patch=fields.get("patch", True) is not False,
            wire=True)

    server.register("diff", diff_op)


def render_trees(repo: pygit2.Repository, tree_a: str, tree_b: str, *, patch: bool = True,
                 stat_width: int = 80) -> dict:
    """``files`` (status, path, old_path, additions, deletions, binary), ``stats``, ``stat``
    (git's ``--stat`` text) and ``patch`` (git's patch text, or None when not asked)."""
    a = repo[tree_a].peel(pygit2.Tree)
    b = repo[tree_b].peel(pygit2.Tree)
    diff = repo.diff(a, b, flags=DiffOption.INCLUDE_TYPECHANGE)
    diff.find_similar()
    files = []
    for p in diff:
        delta = p.delta
        status = delta.status_char()
        _context, additions, deletions = p.line_stats
        files.append({
            "status": status,
            # Raw bytes, so a name that is not UTF-8 keeps them (as os.fsdecode does).
            "path": os.fsdecode(delta.new_file.raw_path if status != "D"
                                else delta.old_file.raw_path),
            "old_path": os.fsdecode(delta.old_file.raw_path) if status in ("R", "C") else None,
            "additions": additions, "deletions": deletions,
            "binary": bool(delta.is_binary),
        })
    stats = diff.stats
    out = {
        "files": files,
        "stats": {"files_changed": stats.files_changed, "insertions": stats.insertions,
                  "deletions": stats.deletions},
        "stat": stats.format(DiffStatsFormat.FULL | DiffStatsFormat.INCLUDE_SUMMARY, stat_width)
        if files else "",
        "patch": None,
    }
    if patch:
        out["patch"] = _patch_text(diff)
    return out


def _patch_text(diff: pygit2.Diff) -> str:
    chunks = []
    for p in diff:
        data = p.data
        # Bytes that are not UTF-8 (names, Latin-1 text) stay surrogate escapes, not U+FFFD:
        # the CLI writes the patch back out byte for byte.
        chunks.append(data.decode("utf-8", "surrogateescape") if isinstance(data, bytes)
                      else data)
    return "".join(chunks)


def _fit(out: dict) -> None:
    """A reply that still does not fit one frame (long paths, a long stat) goes without its
    patch, file list and stat; the client renders all three from the two trees."""
    try:
        encode_frame({"id": 0, "ok": True, "result": out})
        return
    except (ValueError, TypeError) as exc:
        out["patch_omitted"] = (f"the reply did not fit one frame ({exc}); render it from the "
                                "two trees in `store`")
    out["files_total"] = len(out["files"])
    out.update(patch=None, files=[], stat="", files_truncated=True)


def _seq_of(repo: pygit2.Repository, commit: str, guess: int | None) -> int | None:
    try:
        message = repo[commit].peel(pygit2.Commit).message
    except (KeyError, ValueError, pygit2.GitError):
        return guess
    seq = Trailers(message).seq  # a malformed seq trailer raises: the store is damaged
    return seq if seq is not None else guess


def _key(cp: dict) -> AttemptKey:
    return AttemptKey(cp["run_id"], cp["node_id"], cp["iteration"], cp["attempt"])
