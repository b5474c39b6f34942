"""What the web app shows, read from the ledger, the gap spool and the store (nothing written).

Owns ``Reader``: the runs summary (newest first, with an activity strip), a run's timeline (one
lane per node/iteration/attempt, every checkpoint row with its tool call, one entry per tool
call, the gaps with what to do, each attempt's coverage), a run's fingerprint for live updates,
the tree and a file at a checkpoint; and, through ``snapshotd.ops.operations.Operations``, the
gaps, one checkpoint with the files it changed and the diff of any two checkpoints (across attempts too). Promises:
- Reads only: the ledger (safe beside a running daemon), the spool and a per-call handle on the
  store (``Store.reader``); restore and export go through ``snapshotd.ops.operations`` instead.
- Diffs are the CLI's and the MCP tools' (``snapshotd.features.review.diff.render_trees``:
  renames found by similarity), run on ``pruned_pair`` as ``snapshotd show`` does, so their
  cost follows the change (the store gains at most a few small unreferenced trees).
- A selection that names nothing is ``ServiceError(not-found)`` saying what exists; patches and
  files over ``MAX_PATCH_BYTES``/``MAX_BLOB_BYTES`` are cut and flagged, never silently.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from snapshotd.core import NOT_FOUND, ServiceError, id_field
from snapshotd.service import (
    GapSpool,
    collect_runs,
    find_checkpoint,
    list_run,
    open_ledger_if_any,
    selection,
    unknown_run,
)
from snapshotd.store import Store
from snapshotd.ui.gap_help import help_for
from snapshotd_client import gaps_path

if TYPE_CHECKING:
    from snapshotd.ops import Operations

STRIP_BUCKETS = 24
RUNS_SHOWN = 200
MAX_PATCH_BYTES = 2 << 20
MAX_BLOB_BYTES = 1 << 20
AGENT_PREFIXES = ("claude", "codex", "gemini")
ROW_KEYS = ("seq", "tier", "source", "label", "tool_use_id", "created_at", "added",
            "modified", "deleted", "pruned_at", "tool_call", "tool_calls")


class Reader:
    """Read-only views of one snapshotd home."""

    def __init__(self, home: Path, ops: Operations) -> None:
        self.home = home
        self.ops = ops
        self._store: Store | None = None

    # -- runs ---------------------------------------------------------------------------------

    def runs(self) -> dict:
        rows = collect_runs(self.home)
        total = len(rows)
        rows = list(reversed(rows))[:RUNS_SHOWN]
        with open_ledger_if_any(self.home) as ledger:
            for row in rows:
                times = [c["created_at"] for c in ledger.checkpoints(row["run_id"])] if ledger else []
                row["strip"] = _strip(times, row["started_at"], row["last_activity"])
                row["state"] = _run_state(row["states"])
                row["agent"] = _agent(row["run_id"])
        return {"runs": rows, "total": total, "truncated": len(rows) < total}

    def timeline(self, run_id: str) -> dict:
        run_id = id_field("run_id", run_id)
        # Taken before the rows: a change in between makes the live view fetch again.
        version = self.version(run_id)
        with open_ledger_if_any(self.home) as ledger:
            if ledger is None:
                raise unknown_run(run_id, None)
            attempts = ledger.attempts(run_id)
            if not attempts:
                raise unknown_run(run_id, ledger)
            found = list_run(ledger, GapSpool(gaps_path(self.home)), run_id)
        lanes = [dict(a.as_dict(), lane=str(a.key)) for a in attempts]
        lane_of = {(a.key.node_id, a.key.iteration, a.key.attempt): i
                   for i, a in enumerate(attempts)}
        checkpoints = []
        for c in found["checkpoints"]:
            row = {k: c[k] for k in ROW_KEYS}
            # snapshotd's own events at this seq (restore, purge), deduplicated ones too.
            row["events"] = [t for t in c.get("tool_calls") or [] if t.get("kind")]
            row["lane"] = lane_of.get((c["node_id"], c["iteration"], c["attempt"]), 0)
            checkpoints.append(row)
        gaps = [dict(g, help=help_for(g.get("reason"))) for g in found["gaps"]]
        calls = [dict(c, lane=lane_of.get((c["node_id"], c["iteration"], c["attempt"]), 0))
                 for c in found["tool_calls"]]
        return {"run_id": run_id, "lanes": lanes, "checkpoints": checkpoints, "gaps": gaps,
                "tool_calls": calls, "coverage": found["coverage"], "version": version}

    def version(self, run_id: str) -> str:
        """Changes whenever the run gains a checkpoint or a gap, or an attempt changes state:
        what the live view polls."""
        with open_ledger_if_any(self.home) as ledger:
            if ledger is None:
                return "none"
            stats = ledger.checkpoint_stats().get(run_id, (0, None))
            states = sorted((str(a.key), a.state) for a in ledger.attempts(run_id))
        gaps = len(GapSpool(gaps_path(self.home)).for_run(run_id))
        return f"{stats[0]}:{stats[1]}:{gaps}:{hash(tuple(states)) & 0xffffffff:x}"

    def gaps(self, run_id: str | None) -> dict:
        """The gaps (of one run, or all), as ``list_gaps`` gives them, each with its help."""
        out = self.ops.list_gaps(run_id=run_id)
        out["gaps"] = [dict(g, help=help_for(g.get("reason"))) for g in out["gaps"]]
        return out

    # -- one checkpoint -----------------------------------------------------------------------

    def checkpoint(self, sel: dict) -> dict:
        changed = self.ops.compare(_named(sel), None, patch=False)
        return {"checkpoint": changed["checkpoint"], "trailers": changed["trailers"],
                "files": changed["files"], "stats": changed["stats"]}

    def diff(self, sel: dict, against: dict | None) -> dict:
        """What ``sel`` changed against ``against`` (any checkpoint of the store) or, when
        None, against the checkpoint before it in its attempt."""
        out = self.ops.compare(_named(sel), _named(against) if against is not None else None,
                               patch=True, max_patch_bytes=MAX_PATCH_BYTES)
        out.pop("checkpoint")
        out.pop("trailers")
        return out

    def tree(self, sel: dict, path: str) -> dict:
        """The entries of directory ``path`` at the checkpoint, or the file's text."""
        cp = self._find(sel)
        repo = self._repo()
        root = repo[cp["tree"]].peel(pygit2.Tree)
        path = path.strip("/")
        obj = root if not path else _lookup(repo, root, path)
        if isinstance(obj, pygit2.Tree):
            entries = sorted(({"name": e.name, "dir": e.type_str == "tree"} for e in obj),
                             key=lambda e: (not e["dir"], e["name"]))
            return {"path": path, "kind": "dir", "entries": entries, "to": _ident(cp)}
        blob = obj.peel(pygit2.Blob)
        data = blob.data
        out = {"path": path, "kind": "file", "size": len(data), "binary": blob.is_binary,
               "truncated": len(data) > MAX_BLOB_BYTES, "to": _ident(cp), "text": None}
        if not blob.is_binary:
            out["text"] = data[:MAX_BLOB_BYTES].decode("utf-8", "replace")
        return out

    # -- helpers ------------------------------------------------------------------------------

    def _find(self, sel: dict) -> dict:
        run, node, seq, iteration, attempt = selection(
            sel.get("run"), sel.get("node"), sel.get("seq"), sel.get("iteration"),
            sel.get("attempt"))
        with open_ledger_if_any(self.home) as ledger:
            if ledger is None:
                raise unknown_run(run, None)
            return find_checkpoint(ledger, run, node, seq=seq, iteration=iteration,
                                   attempt=attempt, skip_safety=False)

    def _repo(self) -> pygit2.Repository:
        if self._store is None:
            if not (self.home / "store.git" / "HEAD").exists():
                raise ServiceError(NOT_FOUND, f"no store under {self.home}: nothing "
                                                     "has been captured with this home yet")
            self._store = Store(self.home)
        return self._store.reader()


def _named(sel: dict) -> dict:
    """The web app's selection (``run``, ``node``, ...) as the ops name it."""
    return {"run_id": sel.get("run"), "node_id": sel.get("node"), "seq": sel.get("seq"),
            "iteration": sel.get("iteration"), "attempt": sel.get("attempt")}


def _ident(cp: dict) -> dict:
    return {k: cp[k] for k in ("run_id", "node_id", "iteration", "attempt", "seq", "commit",
                               "tree")}


def _lookup(repo: pygit2.Repository, root: pygit2.Tree, path: str) -> pygit2.Object:
    try:
        entry = root[path]
    except KeyError:
        raise ServiceError(NOT_FOUND, f"{path} is not in this checkpoint") from None
    return repo[entry.id]


def _strip(times: list[float], start: float, end: float) -> list[int]:
    """Checkpoints per slice of the run's lifetime, ``STRIP_BUCKETS`` slices."""
    counts = [0] * STRIP_BUCKETS
    span = max(end - start, 1e-6)
    for t in times:
        i = int((t - start) / span * STRIP_BUCKETS)
        counts[min(max(i, 0), STRIP_BUCKETS - 1)] += 1
    return counts


def _agent(run_id: str) -> str:
    """The agent a run's id names (the hooks make ``claude-<session>``, ``codex-…``,
    ``gemini-…``); empty for a run an engine or a person named."""
    prefix = run_id.split("-", 1)[0]
    return prefix if prefix in AGENT_PREFIXES and "-" in run_id else ""


def _run_state(states: dict[str, int]) -> str:
    if states.get("active"):
        return "active"
    for state in ("failed", "cancelled", "abandoned", "superseded", "finished"):
        if states.get(state):
            return state
    return next(iter(states), "unknown")


__all__ = ["Reader"]
