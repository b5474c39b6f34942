"""Turns as the front ends show and restore them (docs/review.md "Turns", docs/restore.md).

Owns ``list_turns`` (``snapshotd turns``, the MCP ``list_turns``: each turn with its tool calls,
the files it changed with ``+/-`` counts, its gaps), ``turn_target`` (the checkpoint a restore
``--before-turn N`` / ``--after-turn N`` means) and ``resume_command`` (how to continue the
agent's conversation, for agents whose CLI can resume a session by id).
Promises: reads only (the restore itself is ``Operations.restore``'s, with its safety
checkpoint, confinement, dry run and undo); a turn that does not exist, or a run whose turns
are on several nodes with no ``--node``, is a ``ServiceError`` saying what to pass.
"""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

import pygit2

from snapshotd.core import BAD_REQUEST, NOT_FOUND, ServiceError
from snapshotd.features.review import render_trees
from snapshotd.service import (
    TurnIndex,
    public_turn,
    run_calls,
    unknown_run,
    with_tool_calls,
)

if TYPE_CHECKING:
    from snapshotd.features.review import HomeView
    from snapshotd.ledger import Ledger

# The CLI of each agent that resumes a session by its id: the words before the id, after it.
RESUME = {"claude": (["claude", "--resume"], []), "codex": (["codex", "resume"], [])}
# A restore's own safety checkpoints are not a turn's state.
SAFETY_SOURCE = "restore"


def list_turns(view: HomeView, run_id: str, node_id: str | None = None,
               attempt: int | None = None) -> dict:
    """The run's turns (of one node, one attempt number), each with ``seqs``, ``tool_calls``
    (``service.run_calls``' entries), ``files`` and ``stats`` (what the turn changed: from the
    state at its prompt to its last checkpoint) and ``gaps``."""
    ledger = view.ledger
    if run_id not in ledger.run_ids():
        raise unknown_run(run_id, ledger)
    rows = ledger.turns(run_id, node_id, attempt)
    index = TurnIndex(rows)
    cps = with_tool_calls(ledger, ledger.checkpoints(run_id, node_id, attempt))
    gaps = [g for g in view.gaps.for_run(run_id)
            if node_id is None or g.get("node_id") == node_id]
    out = []
    for row in rows:
        key = (row["node_id"], row["iteration"], row["attempt"])
        mine = [cp for cp in cps if _key(cp) == key and index.of_checkpoint(cp) == row["turn"]
                and cp["source"] != SAFETY_SOURCE]
        before = [cp for cp in cps if _key(cp) == key and cp["created_at"] < row["started_at"]
                  and cp["source"] != SAFETY_SOURCE]
        entry = public_turn(row) | {"seqs": [cp["seq"] for cp in mine],
                                    "tool_calls": run_calls(mine),
                                    "gaps": [g for g in gaps if index.of_gap(g) == row["turn"]
                                             and _gap_key(g) == key]}
        entry.update(_changes(view.repo, before[-1] if before else None, mine))
        out.append(entry)
    return {"run_id": run_id, "turns": out}


def turn_target(ledger: Ledger, run_id: str, node_id: str | None, iteration: int | None,
                attempt: int | None, *, before: int | None = None,
                after: int | None = None) -> dict:
    """The checkpoint a restore by turn means: ``before`` N, the newest taken before prompt N
    was submitted; ``after`` N, the newest before prompt N+1 (the newest, for the last turn);
    a restore's safety checkpoints never count. Returns the selection (``run_id``, ``node_id``,
    ``iteration``, ``attempt``, ``seq``) and ``turn`` (the turn row)."""
    if (before is None) == (after is None):
        raise ServiceError(BAD_REQUEST, "give one of --before-turn N or --after-turn N")
    number = before if before is not None else after
    rows = [r for r in ledger.turns(run_id, node_id) if iteration is None
            or r["iteration"] == iteration]
    rows = [r for r in rows if attempt is None or r["attempt"] == attempt]
    if not rows:
        raise ServiceError(NOT_FOUND, f"run {run_id!r} has no turns (no prompt was recorded: "
                                      "see docs/agents.md, \"Turns\")")
    nodes = sorted({r["node_id"] for r in rows})
    if len(nodes) > 1:
        raise ServiceError(BAD_REQUEST, f"run {run_id!r} has turns on nodes {', '.join(nodes)}:"
                                        " pass --node")
    newest = max((r["iteration"], r["attempt"]) for r in rows)
    rows = [r for r in rows if (r["iteration"], r["attempt"]) == newest]
    turn = next((r for r in rows if r["turn"] == number), None)
    if turn is None:
        raise ServiceError(NOT_FOUND, f"turn {number} not found: run {run_id!r} has turns "
                                      f"1 to {len(rows)}")
    following = next((r for r in rows if r["turn"] == number + 1), None)
    until = turn["started_at"] if before is not None else (
        following["started_at"] if following is not None else None)
    cps = [cp for cp in ledger.checkpoints(run_id, nodes[0])
           if (cp["iteration"], cp["attempt"]) == newest and cp["source"] != SAFETY_SOURCE
           and (until is None or cp["created_at"] < until)]
    if not cps:
        raise ServiceError(NOT_FOUND, f"no checkpoint was taken before turn {number}'s prompt "
                                      "(the session's baseline capture failed or came later)")
    return {"run_id": run_id, "node_id": nodes[0], "iteration": newest[0],
            "attempt": newest[1], "seq": cps[-1]["seq"], "turn": turn}


def resume_command(run_id: str, turn: dict) -> str | None:
    """The command that continues the conversation of the session ``turn`` belongs to, or
    None when its agent's CLI resumes no session by id (or the id is unknown)."""
    session = turn.get("agent_session")
    words = RESUME.get(run_id.split("-", 1)[0])
    if not session or words is None:
        return None
    return shlex.join([*words[0], session, *words[1]])


def _changes(repo: pygit2.Repository, base: dict | None, mine: list[dict]) -> dict:
    if not mine:
        return {"files": [], "stats": None}
    first, last = mine[0], mine[-1]
    base_tree = base["tree"] if base is not None else _parent_tree(repo, first)
    if base_tree is None or last.get("pruned_at"):
        return {"files": None, "stats": None}
    diff = render_trees(repo, base_tree, last["tree"], patch=False)
    return {"files": [{k: f[k] for k in ("status", "path", "old_path", "additions",
                                          "deletions", "binary")} for f in diff["files"]],
            "stats": diff["stats"]}


def _parent_tree(repo: pygit2.Repository, cp: dict) -> str | None:
    parent = cp.get("parent")
    if not parent:
        return None
    try:
        return str(repo[parent].peel(pygit2.Commit).tree_id)
    except (KeyError, ValueError):
        return None


def _key(row: dict) -> tuple:
    return (row["node_id"], row["iteration"], row["attempt"])


def _gap_key(gap: dict) -> tuple:
    return (gap.get("node_id"), gap.get("iteration") or 0, gap.get("attempt") or 1)

