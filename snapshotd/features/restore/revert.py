"""Revert: undo what one checkpoint, a range, a tool call or a whole attempt changed, keeping
every other change made since (``snapshotd revert``, the ``revert`` op, MCP ``revert_checkpoint``).

Owns ``revert_checkpoints`` and the ``revert`` op (``attach``). ``revert_select`` says which
checkpoints and which of their paths; ``revert_merge`` decides each path (``git revert``
semantics); ``apply`` writes. Promises (docs/restore.md, "Revert"):
- Under the worktree's lock, after a safety checkpoint of the whole tree (source ``restore``)
  in the reverted attempt, with the exact undo command (a ``restore`` of that safety seq).
- Only paths the reverted change made are written; where anything conflicts, nothing at all is
  written (``applied`` false, ``conflicts`` lists each path with both sides) unless
  ``conflicts="markers"`` (text conflicts then get git-style markers).
- The same confinement, refusals (a working attempt, a worktree reached through a link), modes
  and durability as ``restore``; ``dry_run`` writes and records nothing. An applied revert is
  captured and recorded as an event (kind ``revert``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pygit2

from snapshotd.core import (
    BAD_REQUEST,
    DEFAULT_UMASK,
    NOT_FOUND,
    RESTORE_FAILED,
    ServiceError,
    bool_field,
    umask_field,
)
from snapshotd.features import record_event
from snapshotd.features.restore.apply import Modes, Obstacle, apply_in_place
from snapshotd.features.restore.plan import Plan, Write, check_paths, obstacles
from snapshotd.features.restore.restore import (
    fit_reply,
    refuse_active,
    refuse_links,
    undo_command,
)
from snapshotd.features.restore.revert_merge import Blobs, Entry, describe, revert_path
from snapshotd.features.restore.revert_select import entry_of, own_changes, select_range
from snapshotd.ledger import Attempt
from snapshotd.service import Service, SnapshotRequest, current_tree_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from snapshotd.core import Config, Registry

CONFLICT_MODES = ("refuse", "markers")
# A reply lists at most this many paths (the rest counted in ``paths_total``).
WIRE_PATHS = 2000
# Characters of a text conflict's merged text (with markers) in its row.
MARKED_CHARS = 4096


def revert_checkpoints(service: Service, *, run_id: object, node_id: object,
                       seq: object = None, to_seq: object = None, tool_call: object = None,
                       all_: bool = False, iteration: object = None, attempt: object = None,
                       turn: object = None, dry_run: bool = False, force: bool = False, conflicts: str = "refuse",
                       umask: int = DEFAULT_UMASK) -> dict:
    """Revert the selected change against the worktree as it is now; see the module docstring.
    Raises ``ServiceError`` (``not-found``, ``bad-request``, ``conflict``, ``restore-failed``)."""
    started = time.perf_counter()
    if conflicts not in CONFLICT_MODES:
        raise ServiceError(BAD_REQUEST, f"conflicts must be one of {CONFLICT_MODES}")
    key, picked, what = select_range(service.ledger, run_id=run_id, node_id=node_id, seq=seq,
                                     to_seq=to_seq, tool_call=tool_call, all_=all_,
                                     iteration=iteration, attempt=attempt, turn=turn)
    owner = service.ledger.get_attempt(key)
    if owner is None:
        raise ServiceError(NOT_FOUND, f"attempt {key} is not in the ledger")
    root = Path(owner.worktree)
    if not root.is_absolute() or not root.is_dir() or root.is_symlink():
        raise ServiceError(RESTORE_FAILED, f"the worktree {owner.worktree!r} of {key} is not "
                           "a directory; nothing to revert in")
    refuse_links(root)
    if not dry_run and not force:
        refuse_active(service, root)
    repo = service.store.reader()
    out: dict = {"run_id": key.run_id, "node_id": key.node_id, "iteration": key.iteration,
                 "attempt": key.attempt, "what": what, "seqs": [c["seq"] for c in picked],
                 "target": str(root), "dry_run": dry_run, "applied": False, "safety": None,
                 "undo_command": None, "conflicts_mode": conflicts}
    with service.worktree_lock(root):
        if not dry_run and not force:
            refuse_active(service, root)
        if dry_run:
            current, _scan = current_tree_of(service, root)
            safety = None
        else:
            safety = _safety(service, owner, what)
            current = safety["tree"]
            out["safety"] = {"seq": safety["seq"], "commit": safety["commit"],
                             "deduped": bool(safety.get("deduped"))}
            out["undo_command"] = undo_command(key.run_id, key.node_id, key.iteration,
                                               key.attempt, safety["seq"])
        blobs = Blobs(repo)
        changes = own_changes(service.ledger, repo, key, str(root), picked)
        rows, final = _decide(blobs, repo[current].peel(pygit2.Tree), changes, conflicts)
        out["paths"] = rows[:WIRE_PATHS]
        out["paths_total"] = len(rows)
        out["counts"] = {s: sum(1 for r in rows if r["status"] == s)
                         for s in ("reverted", "merged", "conflict", "untouched")}
        out["conflicts"] = [r for r in rows if r["status"] == "conflict"][:WIRE_PATHS]
        refused = bool(out["conflicts"]) and conflicts == "refuse"
        plan = _plan(final, blobs)
        check_paths(plan, {"seq": picked[-1]["seq"] if picked else 0, "commit": "revert"})
        plan.kept = obstacles(root, plan)
        out["plan"] = plan.as_list()[:WIRE_PATHS]
        out["kept"] = plan.kept_list()[:WIRE_PATHS]
        if not dry_run and not refused:
            _apply(repo, root, plan, Modes(umask), out)
            out["applied"] = True
            out.update(_record(service, owner, root, what, safety))
    out["refused"] = refused
    out["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return out


def _decide(blobs: Blobs, current: pygit2.Tree, changes: list, conflicts: str
            ) -> tuple[list[dict], dict[str, tuple[Entry, Entry, bytes | None]]]:
    """Revert the changes newest first against ``current``: one row per path (its status, and
    for a conflict both sides) and path -> (current entry, new entry, data to write)."""
    state: dict[str, Entry] = {}
    now: dict[str, Entry] = {}
    rows: dict[str, dict] = {}
    markers: dict[str, bytes] = {}
    for cp, change in reversed(changes):
        for path, (before, after) in change.items():
            if path not in now:
                now[path] = state[path] = entry_of(current, path)
            got = revert_path(blobs, state[path], after, before)
            row = rows.setdefault(path, {"path": path, "status": "untouched"})
            if got.status == "conflict":
                row.update(status="conflict", reason=got.reason, seq=cp["seq"],
                           current=describe(blobs, state[path]),
                           reverted=describe(blobs, before))
                if got.marked is not None:
                    row["markers"] = got.marked.decode("utf-8", "replace")[:MARKED_CHARS]
                if got.marked is not None and conflicts == "markers":
                    markers[path] = got.marked
                continue
            if row["status"] != "conflict" and got.status != "untouched":
                row["status"] = "merged" if "merged" in (row["status"], got.status) \
                    else "reverted"
            state[path] = got.entry
    final: dict[str, tuple[Entry, Entry, bytes | None]] = {}
    for path, entry in state.items():
        if path in markers:
            mode = (now[path] or (0o100644, ""))[0]
            final[path] = (now[path], (mode, blobs.add(markers[path])), markers[path])
        elif entry != now[path]:
            final[path] = (now[path], entry, None)
    return [rows[p] for p in sorted(rows)], final


def _plan(final: dict[str, tuple[Entry, Entry, bytes | None]], blobs: Blobs) -> Plan:
    plan = Plan()
    for path, (old, new, data) in sorted(final.items()):
        raw = os.fsencode(path)
        if new is None:
            plan.deletes.append(raw)
            continue
        content = data if data is not None else blobs.extra.get(new[1])
        plan.writes.append(Write(raw, pygit2.Oid(hex=new[1]), new[0],
                                 "A" if old is None else "M", content))
    return plan


def _apply(repo: pygit2.Repository, root: Path, plan: Plan, modes: Modes, out: dict) -> None:
    try:
        apply_in_place(repo, root, plan, None, modes)
    except (OSError, Obstacle) as exc:
        undo = f"; `{out['undo_command']}` brings the previous state back" \
            if out["undo_command"] else ""
        raise ServiceError(RESTORE_FAILED, f"revert in {root} stopped part-way: {exc}{undo}"
                           ) from exc


def _safety(service: Service, owner: Attempt, what: str) -> dict:
    current = service.ledger.get_attempt(owner.key) or owner
    req = SnapshotRequest(cwd=Path(owner.worktree), tier=1, source="restore",
                          label=f"before revert of {what}", run_id=owner.key.run_id,
                          node_id=owner.key.node_id, iteration=owner.key.iteration,
                          attempt=owner.key.attempt)
    try:
        return service.capture_locked(current, req, time.perf_counter())
    except ServiceError as exc:
        raise ServiceError(RESTORE_FAILED, f"could not take the safety checkpoint of "
                           f"{owner.worktree}, so nothing was changed: {exc.message}") from exc


def _record(service: Service, owner: Attempt, root: Path, what: str,
            safety: dict | None) -> dict:
    """The reverted state captured and the revert recorded as an event (never raises)."""
    current = service.ledger.get_attempt(owner.key) or owner
    req = SnapshotRequest(cwd=root, tier=1, source="restore", label=f"reverted {what}",
                          run_id=owner.key.run_id, node_id=owner.key.node_id,
                          iteration=owner.key.iteration, attempt=owner.key.attempt)
    try:
        after = service.capture_locked(current, req, time.perf_counter())
    except ServiceError as exc:
        return {"reverted": {"error": f"{exc.code}: {exc.message}"}, "event": None}
    label = f"revert of {what}" + (f" (safety checkpoint seq {safety['seq']})"
                                   if safety is not None else "")
    event = record_event(service.ledger, current, "revert", after["seq"], label)
    return {"reverted": {"seq": after["seq"], "commit": after["commit"],
                         "deduped": bool(after.get("deduped"))}, "event": event}


def attach(service: Service, server: Registry, config: Config) -> None:
    """Register the ``revert`` op on the daemon's server."""

    def revert_op(fields: dict) -> dict:
        return fit_reply(revert_checkpoints(
            service, run_id=fields.get("run_id"), node_id=fields.get("node_id"),
            seq=fields.get("seq"), to_seq=fields.get("to_seq"),
            tool_call=fields.get("tool_call"), all_=bool_field(fields, "all"),
            iteration=fields.get("iteration"), attempt=fields.get("attempt"),
            turn=fields.get("turn"),
            dry_run=bool_field(fields, "dry_run"), force=bool_field(fields, "force"),
            conflicts=fields.get("conflicts") or "refuse", umask=umask_field(fields)))

    server.register("revert", revert_op)


__all__ = ["attach", "revert_checkpoints"]
