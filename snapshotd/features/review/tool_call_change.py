"""One tool call's whole change: ``show --tool-call ID`` (the CLI, the MCP ``show_checkpoint``
tool's ``tool_call``), by any id its payload carried.

Owns ``show_tool_call``. A tool call's change runs from the checkpoint before the first one it
owns (its own capture, or tier-2 checkpoints taken while it ran: in-flight or inferred) to the
last one it owns or whose state its deduplicated capture holds, shown as one diff
(``diff.render_trees`` on ``pruned_pair``, as ``show``). A call that owns nothing (its capture
deduplicated onto a state it did not make) changed nothing of its own: an empty diff at the seq
that holds its state, said so (``no_change``). Promises: reads only; an unknown id is
``not-found`` naming the run's tool calls; in several attempts, the newest attempt's.
"""

from __future__ import annotations

import time

from snapshotd.core import BAD_REQUEST, NOT_FOUND, ServiceError, id_field
from snapshotd.features.review.base import EMPTY_NOTE
from snapshotd.features.review.diff import render_trees
from snapshotd.features.review.history import call_of, change_base
from snapshotd.features.review.view import HomeView
from snapshotd.service import ToolCallIndex, call_span, key_of, unknown_run
from snapshotd.store import empty_tree, pruned_pair

IDS_NAMED = 20


def show_tool_call(view: HomeView, *, run_id: object, tool_call: object,
                   node_id: object = None, patch: bool = True) -> dict:
    """What tool call ``tool_call`` (any of its ids) of run ``run_id`` (of node ``node_id``)
    changed, from the checkpoint before its first to its last, with the checkpoints it owns."""
    started = time.perf_counter()
    run = id_field("run_id", run_id)
    node = None if node_id is None else id_field("node_id", node_id)
    if not isinstance(tool_call, str) or not tool_call:
        raise ServiceError(BAD_REQUEST, f"tool_call must be a tool call id, not {tool_call!r}")
    rows = [r for r in view.ledger.checkpoints(run, node) if not r.get("pruned_at")]
    if not rows and run not in view.ledger.run_ids():
        raise unknown_run(run, view.ledger)
    calls = view.ledger.tool_calls(run, node)
    spans = [s for s in call_span(rows, calls, tool_call) if s[1] or s[2] is not None]
    if not spans:
        raise _unknown_call(run, node, tool_call, calls)
    call, owned, held = max(spans, key=lambda s: key_of(s[0])[2:])
    index = ToolCallIndex(rows, calls)
    attempt_rows = [r for r in rows if key_of(r) == key_of(call)]
    last = max([c["seq"] for c in owned] + ([held["seq"]] if held is not None else []))
    to_cp = next(r for r in attempt_rows if r["seq"] == last)
    trees = {r["commit"]: r["tree"] for r in attempt_rows}
    if owned:
        base = change_base(view.repo, owned[0], trees)
        from_seq = next((r["seq"] for r in attempt_rows if r["commit"] == base.commit), None)
        from_tree = base.tree
    else:  # nothing of its own: its state is the checkpoint it deduplicated onto
        base, from_seq, from_tree = None, to_cp["seq"], to_cp["tree"]
    out = {k: call[k] for k in ("run_id", "node_id", "iteration", "attempt")}
    out["tool_call"] = _described(call, owned, index)
    out["seqs"] = [c["seq"] for c in owned]
    out["held_at"] = held["seq"] if held is not None else None
    out["no_change"] = not owned
    out["checkpoints"] = [call_of(index.annotate(c)) for c in owned]
    out["from"] = {"seq": from_seq, "commit": base.commit if base else to_cp["commit"],
                   "tree": from_tree or empty_tree(view.repo)}
    out["to"] = {"seq": to_cp["seq"], "commit": to_cp["commit"], "tree": to_cp["tree"]}
    out["base"] = base.kind if base is not None else "parent"
    if base is not None and base.kind == "empty-tree":
        out["base_note"] = EMPTY_NOTE
    out.update(render_trees(view.repo, *pruned_pair(view.repo, from_tree, to_cp["tree"]),
                            patch=patch))
    out["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return out


def _described(call: dict, owned: list[dict], index: ToolCallIndex) -> dict:
    """The call as ``tool_call`` keys say it (``how``: as its first owned checkpoint says, None
    when it owns none), with ``kind``."""
    first = index.of_checkpoint(owned[0]) if owned else None
    return {"id": call["id"], "aliases": list(call["aliases"]),
            "label": call["label"] or (first or {}).get("label"), "kind": call["kind"],
            "how": (first or {}).get("how"),
            **{k: call[k] for k in ("failed", "exit_code", "error")}}


def _unknown_call(run: str, node: str | None, tool_id: str, calls: list[dict]) -> ServiceError:
    ids = list(dict.fromkeys(c["tool_use_id"] for c in calls))
    named = ", ".join(ids[-IDS_NAMED:]) or "none"
    more = f" (and {len(ids) - IDS_NAMED} more)" if len(ids) > IDS_NAMED else ""
    where = f"run {run!r}" + (f" node {node!r}" if node is not None else "")
    return ServiceError(NOT_FOUND, f"{where} has no tool call {tool_id!r}; its tool calls: "
                        f"{named}{more} (`snapshotd snapshots {run}` lists them)")
