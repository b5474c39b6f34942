"""Which checkpoints a revert undoes, and what each of them changed (its own paths only).

Owns ``select_range`` (``--seq N [--to-seq M]``, ``--tool-call ID``, ``--all``) and
``own_changes``. Promises (docs/restore.md, "Revert"):
- ``--seq N --to-seq M``: the live checkpoints N..M of the attempt; ``--tool-call ID``: the
  checkpoints the call owns (its own capture, in-flight and inferred ones; any of its ids);
  ``--all``: every checkpoint of the attempt credited to one of its tool calls (a person's edit
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
from snapshotd.service import ToolCallIndex, call_span, find_checkpoint, key_of, selection
from snapshotd.store import empty_tree

# path -> (before, after) entries of the change of one checkpoint
Change = dict[str, tuple[Entry, Entry]]


def select_range(ledger: Ledger, *, run_id: object, node_id: object, seq: object = None,
                 to_seq: object = None, tool_call: object = None, all_: bool = False,
                 iteration: object = None, attempt: object = None
                 ) -> tuple[AttemptKey, list[dict], str]:
    """The attempt, its checkpoints to revert (by seq) and a label saying what they are."""
    chosen = sum(x for x in (seq is not None, tool_call is not None, bool(all_)))
    if chosen != 1:
        raise ServiceError(BAD_REQUEST, "name what to revert with exactly one of seq "
                           "(with to_seq for a range), tool_call or all")
    if to_seq is not None and seq is None:
        raise ServiceError(BAD_REQUEST, "to_seq needs seq (the range is seq..to_seq)")
    run, node, first, iteration, attempt = selection(run_id, node_id, seq, iteration, attempt)
    if tool_call is not None:
        return _by_tool_call(ledger, run, node, tool_call, iteration, attempt)
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


def _live(ledger: Ledger, key: AttemptKey) -> list[dict]:
    return sorted((r for r in ledger.checkpoints(key.run_id, key.node_id, key.attempt)
                   if r["iteration"] == key.iteration and not r.get("pruned_at")),
                  key=lambda r: r["seq"])


def _empty(repo: pygit2.Repository) -> pygit2.Tree:
    return repo[empty_tree(repo)].peel(pygit2.Tree)
