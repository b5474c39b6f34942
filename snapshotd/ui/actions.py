"""The web app's actions: restore, revert and export with a preview first, and blame.

Owns ``restore``, ``revert`` ("undo this tool call", "undo this checkpoint", "undo this
session"), ``export`` and ``blame`` (a page of lines, ``offset``/``limit``), each over ``snapshotd.ops.operations.Operations`` (daemon
or local, the CLI's path).

Promises:
- Without ``confirm: true`` nothing is changed: restore returns its dry-run plan (what would be
  added, modified, deleted, and the safety checkpoint it would take in place), export the
  checkpoints that would become commits, the repository and the ref it would create.
- With ``confirm: true`` the action runs and the result carries ``undo_command``: restore's own
  (back to the safety checkpoint; a restore into a new directory has nothing to undo in the
  worktree, so it says to remove the directory), export's deletes the branch it created.
"""

from __future__ import annotations

import shlex
from typing import Any

from snapshotd.core import BAD_REQUEST, ServiceError, id_field
from snapshotd.ops import Operations

PLAN_SHOWN = 500
REVERT_SCOPES = ("tool_call", "checkpoint", "session")
# A blame reply is a page: this many lines by default, at most BLAME_PAGE_MAX.
BLAME_PAGE = 2000
BLAME_PAGE_MAX = 10_000


def restore(ops: Operations, body: dict[str, Any]) -> dict:
    """A restore's plan (default) or, with ``confirm``, the restore itself."""
    sel = _selection(body)
    to_dir = body.get("to_dir") or None
    confirm = body.get("confirm") is True
    result = ops.restore_checkpoint(
        run_id=sel["run"], node_id=sel["node"], seq=sel["seq"], iteration=sel["iteration"],
        attempt=sel["attempt"], dry_run=not confirm, to_dir=to_dir,
        force=body.get("force") is True, plan_limit=PLAN_SHOWN)
    result["confirmed"] = confirm
    if confirm and to_dir and not result.get("undo_command"):
        result["undo_command"] = f"rm -rf {shlex.quote(str(to_dir))}"
    return result


def revert(ops: Operations, body: dict[str, Any]) -> dict:
    """A revert's preview (default: per path reverted/merged/conflict/untouched) or, with
    ``confirm``, the revert itself. ``scope``: ``tool_call`` (``tool_call`` names it),
    ``checkpoint`` (``seq``) or ``session`` (everything the attempt's tool calls did)."""
    sel = _selection(body)
    scope = body.get("scope")
    if scope not in REVERT_SCOPES:
        raise ServiceError(BAD_REQUEST, f"scope must be one of {', '.join(REVERT_SCOPES)}")
    call = body.get("tool_call") if scope == "tool_call" else None
    if scope == "tool_call" and (not isinstance(call, str) or not call):
        raise ServiceError(BAD_REQUEST, "name the tool call to undo")
    confirm = body.get("confirm") is True
    result = ops.revert_checkpoint(
        run_id=sel["run"], node_id=sel["node"], tool_call=call,
        seq=sel["seq"] if scope == "checkpoint" else None, all_=scope == "session",
        iteration=sel["iteration"], attempt=sel["attempt"], dry_run=not confirm,
        force=body.get("force") is True)
    result["confirmed"] = confirm
    result["scope"] = scope
    return result


def export(ops: Operations, reader: Any, body: dict[str, Any]) -> dict:
    """An export to a new branch: the preview (default) or, with ``confirm``, the export."""
    sel = _selection(body)
    branch = body.get("branch")
    if not isinstance(branch, str) or not branch.strip():
        raise ServiceError(BAD_REQUEST, "name the new branch to export to")
    branch = branch.strip()
    timeline = reader.timeline(sel["run"])
    cp = reader.checkpoint(sel)["checkpoint"]
    lane = next(i for i, a in enumerate(timeline["lanes"])
                if (a["node_id"], a["iteration"], a["attempt"])
                == (cp["node_id"], cp["iteration"], cp["attempt"]))
    rows = [c for c in timeline["checkpoints"] if c["lane"] == lane and c["seq"] <= cp["seq"]
            and not c["pruned_at"]]
    repo = timeline["lanes"][lane]["worktree"]
    if body.get("confirm") is not True:
        return {"confirmed": False, "branch": branch, "ref": f"refs/heads/{branch}",
                "repo": repo, "checkpoints": rows,
                "note": "one commit per checkpoint whose tree differs from the one before; "
                        "an existing branch is refused; HEAD, index and files are not touched"}
    result = ops.export_checkpoints(run_id=cp["run_id"], node_id=cp["node_id"], branch=branch,
                                    to_seq=cp["seq"], iteration=cp["iteration"],
                                    attempt=cp["attempt"])
    result["confirmed"] = True
    result["undo_command"] = (f"git -C {shlex.quote(str(result.get('repo') or repo))} "
                              f"branch -D {shlex.quote(branch)}")
    return result


def blame(ops: Operations, sel: dict, path: str, offset: int = 0,
          limit: int = BLAME_PAGE) -> dict:
    """One page of a blame: lines ``offset + 1``..``offset + limit`` and ``total_lines``."""
    if not path:
        raise ServiceError(BAD_REQUEST, "name the file to blame")
    if offset < 0 or not 1 <= limit <= BLAME_PAGE_MAX:
        raise ServiceError(BAD_REQUEST, f"offset must be 0 or more and limit 1 to "
                           f"{BLAME_PAGE_MAX}, not {offset} and {limit}")
    return ops.blame_file(run_id=sel["run"], node_id=sel["node"], path=path, seq=sel["seq"],
                          iteration=sel["iteration"], attempt=sel["attempt"],
                          first_line=offset + 1, last_line=offset + limit)


def _selection(body: dict[str, Any]) -> dict:
    out = {"run": id_field("run_id", body.get("run")), "node": id_field("node_id", body.get("node"))}
    for name in ("seq", "iteration", "attempt"):
        value = body.get(name)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise ServiceError(BAD_REQUEST, f"{name} must be an integer")
        out[name] = value
    return out
