"""Which checkpoints a revert undoes, and what each of them changed (its own paths only).

Owns ``select_range`` (``--seq N [--to-seq M]``, ``--tool-call ID``, ``--turn N``, ``--all``)
and ``own_changes``. Promises (docs/restore.md, "Revert"):
- ``--seq N --to-seq M``: the live checkpoints N..M of the attempt; ``--tool-call ID``: the
  checkpoints the call owns (its own capture, in-flight and inferred ones; any of its ids);
  ``--turn N``: those of prompt N's turn credited to a tool call (service.turns: a
  checkpoint's turn is the last prompt before it); ``--all``: every checkpoint of the attempt
  credited to one of its tool calls (a person's edit
  the watcher captured between turns is not the agent's and is never reverted by ``--all``).
- A checkpoint's change is measured from the tree before it (its parent's, or the first
  checkpoint's base) and never includes a path another session's tool call made in the same
  folder (``ForeignChanges``, docs/review.md "Other sessions' changes"): reverting session A
  never undoes session B's work, even though A's chain captured it.
- Reads only; errors name what exists (``not-found``, ``bad-request``).
"""

from __future__ import annotations

import os

import pygit2

from snapshotd.core import BAD_REQUEST, NOT_FOUND, AttemptKey, ServiceError, id_field
from snapshotd.features.restore.plan import plan_trees
from snapshotd.features.restore.revert_merge import Entry
from snapshotd.features.review import ForeignChanges
from snapshotd.ledger import Ledger
from snapshotd.service import (
    ToolCallIndex,
    TurnIndex,
    call_span,
    find_checkpoint,
    key_of,
    selection,
)
from snapshotd.store import empty_tree

# path -> (before, after) entries of the change of one checkpoint
Change = dict[str, tuple[Entry, Entry]]


def select_range(ledger: Ledger, *, run_id: object, node_id: object, seq: object = None,
                 to_seq: object = None, tool_call: object = None, all_: bool = False,
                 iteration: object = None, attempt: object = None, turn: object = None
                 ) -> tuple[AttemptKey, list[dict], str]:
    """The attempt, its checkpoints to revert (by seq) and a label saying what they are."""
    chosen = sum(x for x in (seq is not None, tool_call is not None, bool(all_),
                             turn is not None))
    if chosen != 1:
        raise ServiceError(BAD_REQUEST, "name what to revert with exactly one of seq "
                           "(with to_seq for a range), tool_call, turn or all")
    if to_seq is not None and seq is None:
        raise ServiceError(BAD_REQUEST, "to_seq needs seq (the range is seq..to_seq)")
    run, node, first, iteration, attempt = selection(run_id, node_id, seq, iteration, attempt)
    if tool_call is not None:
        return _by_tool_call(ledger, run, node, tool_call, iteration, attempt)
    if turn is not None:
        return _by_turn(ledger, run, node, turn, iteration, attempt)
    cp = find_checkpoint(ledger, run, node, seq=first, iteration=iteration, attempt=attempt)
    key = AttemptKey(run, node, cp["iteration"], cp["attempt"])
    rows = _live(ledger, key)
    if all_:
        index = ToolCallIndex(rows, ledger.tool_calls(run, node, key.attempt))
        picked = [r for r in rows if index.of_checkpoint(r) is not None]
        return key, picked, "everything the attempt's tool calls did"
    last = first if to_seq is None else selection(run, node, to_seq)[2]
    assert first is not None and last is not None
    if last < first:
        raise ServiceError(BAD_REQUEST, f"to_seq {last} is before seq {first}")
    picked = [r for r in rows if first <= r["seq"] <= last]
    label = f"seq {first}" if last == first else f"seqs {first}-{last}"
    return key, picked, label


def own_changes(ledger: Ledger, repo: pygit2.Repository, key: AttemptKey, worktree: str,
                picked: list[dict]) -> list[tuple[dict, Change]]:
    """Each picked checkpoint with the paths its change made, less other sessions' paths."""
    rows = _live(ledger, key)
    by_commit = {r["commit"]: r for r in rows}
    foreign = ForeignChanges(ledger, repo)
    out: list[tuple[dict, Change]] = []
    for cp in picked:
        cp = dict(cp, worktree=cp.get("worktree") or worktree)
        before, _ = foreign.window(cp, by_commit)
        theirs = {f["path"] for f in foreign.of(cp, by_commit) if not f["mixed"]}
        old = repo[before].peel(pygit2.Tree) if before else None
        new = repo[cp["tree"]].peel(pygit2.Tree)
        plan = plan_trees(repo, old if old is not None else _empty(repo), new)
        paths = [os.fsdecode(w.path) for w in plan.writes] + [os.fsdecode(p)
                                                              for p in plan.deletes]
        change: Change = {}
        for path in sorted(set(paths)):
            if path not in theirs:
                change[path] = (entry_of(old, path), entry_of(new, path))
        out.append((cp, change))
    return out


def entry_of(tree: pygit2.Tree | None, path: str) -> Entry:
    """The (mode, blob id) of ``path`` in ``tree``, None when absent or not a file/link."""
    if tree is None:
        return None
    try:
        obj = tree[path]
    except KeyError:
        return None
    if obj.type_str != "blob":
        return None
    return int(obj.filemode), str(obj.id)


def _by_tool_call(ledger: Ledger, run: str, node: str, tool_call: object,
                  iteration: int | None, attempt: int | None
                  ) -> tuple[AttemptKey, list[dict], str]:
    call_id = id_field("tool_call", tool_call)
    rows = [r for r in ledger.checkpoints(run, node) if not r.get("pruned_at")
            and (iteration is None or r["iteration"] == iteration)
            and (attempt is None or r["attempt"] == attempt)]
    spans = [s for s in call_span(rows, ledger.tool_calls(run, node), call_id) if s[1]]
    if not spans:
        raise ServiceError(NOT_FOUND, f"run {run!r} node {node!r} has no tool call "
                           f"{call_id!r} that changed anything (`snapshotd snapshots {run}` "
                           "lists its tool calls)")
    call, owned, _ = max(spans, key=lambda s: key_of(s[0])[2:])
    k = key_of(call)
    return AttemptKey(k[0], k[1], k[2], k[3]), owned, f"tool call {call_id}"


def _by_turn(ledger: Ledger, run: str, node: str, turn: object, iteration: int | None,
             attempt: int | None) -> tuple[AttemptKey, list[dict], str]:
    """The checkpoints of prompt ``turn``'s turn in the newest attempt that has that turn
    (or the one named), each credited to one of the attempt's tool calls."""
    if isinstance(turn, bool) or not isinstance(turn, int) or turn < 1:
        raise ServiceError(BAD_REQUEST, f"turn must be an integer >= 1, not {turn!r}")
    rows = [t for t in ledger.turns(run, node) if t["turn"] == turn
            and (iteration is None or t["iteration"] == iteration)
            and (attempt is None or t["attempt"] == attempt)]
    if not rows:
        raise ServiceError(NOT_FOUND, f"run {run!r} node {node!r} has no turn {turn} "
                           f"(`snapshotd turns {run}` lists its turns)")
    t = max(rows, key=lambda r: (r["iteration"], r["attempt"]))
    key = AttemptKey(run, node, t["iteration"], t["attempt"])
    live = _live(ledger, key)
    turns = TurnIndex(ledger.turns(run, node, key.attempt))
    calls = ToolCallIndex(live, ledger.tool_calls(run, node, key.attempt))
    picked = [r for r in live if turns.of_checkpoint(r) == turn
              and calls.of_checkpoint(r) is not None]
    if not picked:
        raise ServiceError(NOT_FOUND, f"turn {turn} of run {run!r} changed nothing a tool "
                           "call made")
    return key, picked, f"turn {turn}"


def _live(ledger: Ledger, key: AttemptKey) -> list[dict]:
    return sorted((r for r in ledger.checkpoints(key.run_id, key.node_id, key.attempt)
                   if r["iteration"] == key.iteration and not r.get("pruned_at")),
                  key=lambda r: r["seq"])


def _empty(repo: pygit2.Repository) -> pygit2.Tree:
    return repo[empty_tree(repo)].peel(pygit2.Tree)
