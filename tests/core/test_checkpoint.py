"""The typed checkpoint (``snapshotd.core.checkpoint``): its message is byte for byte the one
the store has always written, its trailers are read by one rule, its row is the one both the
capture and the rebuild insert, and its reply keeps its shape.

The expected messages below were produced by ``build_message`` of ``core/commit_message.py``
before it became ``Checkpoint.to_message``: a change to the format fails here.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

import pygit2
import pytest

from snapshotd.capture.stat_caches import StatCaches
from snapshotd.core.checkpoint import (
    Checkpoint,
    TrailerError,
    Trailers,
    json_text,
    parse_trailers,
    squash_message,
)
from snapshotd.core.keys import AttemptKey
from snapshotd.ledger.ledger import Ledger
from snapshotd.service.reconcile import reconcile_attempt
from snapshotd.store.store import Store

KEY = AttemptKey("run-1", "node é", 3, 2)
LONG = "Edit  src/a.py\nmore " + "x" * 400
FINDINGS = [{"path": "k.pem", "line": 3, "kind": "private-key é"}]

PLAIN = ("snapshotd: hook seq 0\n\n"
         "Snapshotd-Run: run-1\nSnapshotd-Node: node é\nSnapshotd-Iteration: 3\n"
         "Snapshotd-Attempt: 2\nSnapshotd-Seq: 0\nSnapshotd-Tier: 1\nSnapshotd-Source: hook\n"
         "Snapshotd-Worktree: /w/a b\n")
ONE_LINE_LABEL = "Edit src/a.py more " + "x" * 281  # 300 characters
FULL = (f"snapshotd: watch seq 7 {ONE_LINE_LABEL}\n\n"
        "Snapshotd-Run: run-1\nSnapshotd-Node: node é\nSnapshotd-Iteration: 3\n"
        "Snapshotd-Attempt: 2\nSnapshotd-Seq: 7\nSnapshotd-Tier: 2\nSnapshotd-Source: watch\n"
        "Snapshotd-Tool-Use-Id: toolu_1 2\n"
        f"Snapshotd-Label: {ONE_LINE_LABEL}\n"
        "Snapshotd-Worktree: /w/x y\n"
        f"Snapshotd-Base: {'ab' * 20}\n"
        'Snapshotd-Secrets: [{"path":"k.pem","line":3,"kind":"private-key \\u00e9"}]\n')


def _full() -> Checkpoint:
    return Checkpoint(key=KEY, seq=7, tier=2, source="watch", worktree="/w/x\n y", label=LONG,
                      tool_use_id="toolu_1\t2", base="ab" * 20, secrets=FINDINGS)


def test_messages_are_byte_for_byte_those_the_store_always_wrote() -> None:
    plain = Checkpoint(key=KEY, seq=0, tier=1, source="hook", worktree="/w/a b")
    assert plain.to_message() == PLAIN
    assert _full().to_message() == FULL


def test_trailers_read_back_what_the_message_wrote() -> None:
    t = Trailers(FULL)
    assert (t.seq, t.tier, t.source, t.tool_use_id) == (7, 2, "watch", "toolu_1 2")
    assert (t.label, t.worktree, t.base) == (ONE_LINE_LABEL, "/w/x y", "ab" * 20)
    assert json.loads(t.secrets_text or "") == FINDINGS
    assert t.key_mismatch(KEY) is None
    assert t.key_mismatch(AttemptKey("run-1", "node é", 3, 1)) == "Snapshotd-Attempt '2', not '1'"


def test_absent_trailers_read_as_none_and_malformed_ones_raise() -> None:
    t = Trailers("a commit\n\nSnapshotd-Tier: two\n")
    assert (t.seq, t.source, t.label, t.worktree, t.secrets_text) == (None, None, None, None,
                                                                       None)
    with pytest.raises(TrailerError) as caught:
        _ = t.tier
    assert (caught.value.name, caught.value.value) == ("Snapshotd-Tier", "two")
    assert isinstance(caught.value, ValueError)  # callers that caught int()'s still catch it
    with pytest.raises(TrailerError):
        _ = Trailers("x\n\nSnapshotd-Seq: 1a\n").seq
    assert Trailers(PLAIN).key_mismatch(KEY) is None
    assert Trailers("x\n").key_mismatch(KEY) == "Snapshotd-Run None, not 'run-1'"


def _commit(tmp_path, message: str) -> pygit2.Commit:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    tree = repo.TreeBuilder().write()
    sig = pygit2.Signature("t", "t@example.invalid", 1_700_000_000, 0)
    first = repo.create_commit(None, sig, sig, "first\n", tree, [])
    return repo[repo.create_commit(None, sig, sig, message, tree, [first])]


def test_a_row_rebuilt_from_its_commit_is_the_row_reconcile_always_wrote(tmp_path) -> None:
    commit = _commit(tmp_path, FULL)
    row = Checkpoint.from_commit(commit, KEY, worktree="/elsewhere").to_row()
    assert row == {
        "seq": 7, "commit": str(commit.id), "tree": str(commit.tree_id),
        "parent": str(commit.parents[0].id), "source": "watch", "tier": 2,
        "label": ONE_LINE_LABEL, "tool_use_id": "toolu_1 2", "worktree": "/w/x y",
        "added": 0, "modified": 0, "deleted": 0, "created_at": 1_700_000_000.0,
        "skipped": None,
        # The trailer's text as written, not re-encoded: an unreadable mark stays a mark.
        "secrets": '[{"path":"k.pem","line":3,"kind":"private-key \\u00e9"}]',
        "owner": None, "owner_how": None}


def test_an_in_flight_owner_round_trips_through_the_commit(tmp_path) -> None:
    cp = Checkpoint(key=KEY, seq=3, tier=2, source="watch", worktree="/w",
                    owner="toolu_9", owner_how="in-flight")
    message = cp.to_message()
    assert "Snapshotd-Owner: in-flight toolu_9\n" in message
    again = Checkpoint.from_commit(_commit(tmp_path, message), KEY, worktree="/w")
    assert (again.owner, again.owner_how) == ("toolu_9", "in-flight")
    assert again.to_row()["owner"] == "toolu_9"
    with pytest.raises(TrailerError):
        Checkpoint.from_commit(_commit(tmp_path / "b", message.replace("in-flight ", "")),
                               KEY, worktree="/w")


def test_a_rebuilt_row_takes_the_oldest_checkpoints_defaults(tmp_path) -> None:
    commit = _commit(tmp_path, "old\n\nSnapshotd-Seq: 4\n")
    row = Checkpoint.from_commit(commit, KEY, worktree="/attempt").to_row()
    assert (row["seq"], row["tier"], row["source"], row["worktree"]) == (4, 1, "hook",
                                                                         "/attempt")
    assert (row["label"], row["tool_use_id"], row["secrets"]) == (None, None, None)
    with pytest.raises(TrailerError):
        Checkpoint.from_commit(_commit(tmp_path / "b", "no seq\n"), KEY, worktree="")


def test_a_captures_row_encodes_its_json_columns_as_the_ledger_expects() -> None:
    skipped = [{"path": "big\udcff", "reason": "too-large"}]
    cp = Checkpoint(key=KEY, seq=1, tier=1, source="cli", worktree="/w", secrets=FINDINGS,
                    commit="c" * 40, tree="t" * 40, added=2, modified=1, skipped=skipped,
                    created_at=5.0)
    row = cp.to_row()
    assert list(row) == ["seq", "commit", "tree", "parent", "source", "tier", "label",
                         "tool_use_id", "worktree", "added", "modified", "deleted",
                         "created_at", "skipped", "secrets", "owner", "owner_how"]
    assert (row["added"], row["modified"], row["deleted"]) == (2, 1, 0)
    assert row["skipped"] == json_text(skipped) and json.loads(row["skipped"]) == skipped
    assert row["secrets"] == '[{"path": "k.pem", "line": 3, "kind": "private-key é"}]'
    bare = Checkpoint(key=KEY, seq=1, commit="c" * 40, tree="t" * 40).to_row()
    assert (bare["skipped"], bare["secrets"]) == (None, None)
    assert bare["created_at"] > 1_700_000_000  # now, when the row is built


def test_the_reply_keeps_its_keys_and_order() -> None:
    cp = Checkpoint(key=KEY, seq=3, commit="c", tree="t", worktree="/w")
    reply = cp.to_reply(deduped=True, elapsed_ms=1.5)
    assert reply == {"run_id": "run-1", "node_id": "node é", "iteration": 3, "attempt": 2,
                     "seq": 3, "commit": "c", "tree": "t", "deduped": True, "elapsed_ms": 1.5,
                     "worktree": "/w", "skipped": [],
                     "changes": {"added": 0, "modified": 0, "deleted": 0}}
    assert list(reply)[-1] == "changes"
    full = cp.to_reply(deduped=False, elapsed_ms=2.0, repeated=True, skipped=["a"],
                       changes={"added": 1, "modified": 0, "deleted": 0}, scan="fast")
    assert (full["repeated"], full["scan"], full["skipped"]) == (True, "fast", ["a"])
    assert "repeated" not in cp.to_reply(deduped=False, elapsed_ms=0.0)


def _row(seq: int, label: str | None, tool: str | None) -> dict:
    return {"run_id": "r", "node_id": "n", "iteration": 0, "attempt": 1, "seq": seq,
            "source": "hook", "tier": 1, "label": label, "tool_use_id": tool,
            "worktree": "/w", "commit": "c", "tree": "t", "secrets": [], "skipped": []}


def test_export_messages_keep_their_format() -> None:
    one = Checkpoint.from_row(_row(2, "Edit  a.py", "toolu_9"))
    assert one.export_message() == (
        "Edit a.py\n\nSnapshotd-Run: r\nSnapshotd-Node: n\nSnapshotd-Iteration: 0\n"
        "Snapshotd-Attempt: 1\nSnapshotd-Seq: 2\nSnapshotd-Tool-Use-Id: toolu_9\n")
    assert Checkpoint.from_row(_row(3, None, None)).export_message().startswith(
        "snapshotd: hook seq 3\n\n")
    rows = [Checkpoint.from_row(_row(1, None, "toolu_1")),
            Checkpoint.from_row(_row(2, "Write b", None))]
    assert squash_message(rows, "1-2") == (
        "snapshotd: r/n checkpoints 1-2\n\n- seq 1: hook [toolu_1]\n- seq 2: Write b\n\n"
        "Snapshotd-Run: r\nSnapshotd-Node: n\nSnapshotd-Iteration: 0\nSnapshotd-Attempt: 1\n"
        "Snapshotd-Seqs: 1-2\n")


def test_parse_trailers_gives_them_as_written() -> None:
    assert parse_trailers(PLAIN)["Snapshotd-Seq"] == "0"
    assert parse_trailers("subject: not a trailer\n") == {}


# -- the two row builders agree: a capture's row and the one reconcile rebuilds ----------------


def _chain(tmp_path) -> tuple[Store, Path, list[Checkpoint]]:
    wt = tmp_path / "wt"
    wt.mkdir()
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    made: list[Checkpoint] = []
    parent = None
    for seq, extra in enumerate([{}, {"label": "Edit a", "tool_use_id": "toolu_1"},
                                 {"secrets": FINDINGS, "tier": 2, "source": "watch"}]):
        (wt / "a.txt").write_text(f"{seq}\n")
        tree = caches.worktree(wt).capture().tree
        cp = Checkpoint(key=KEY, seq=seq, worktree=str(wt), tree=tree, parent=parent,
                        added=int(seq == 0), modified=int(seq > 0), **extra)
        parent = store.commit(cp, tree, parent)
        made.append(replace(cp, commit=parent, created_at=time.time()))
    return store, wt, made


def test_reconcile_rebuilds_the_rows_a_capture_recorded(tmp_path) -> None:
    store, wt, made = _chain(tmp_path)
    recorded = Ledger(tmp_path / "recorded.db")
    attempt = recorded.create_attempt(KEY, str(wt))
    for cp in made:
        recorded.record_checkpoint(attempt, cp.to_row())
    rebuilt = Ledger(tmp_path / "rebuilt.db")
    assert reconcile_attempt(store, rebuilt, KEY, made[-1].commit or "") == 3
    ours = recorded.attempt_checkpoints(attempt.pk)
    theirs = rebuilt.attempt_checkpoints(rebuilt.get_attempt(KEY).pk)
    # What a commit cannot tell: the change counts and the capture's exact time.
    unknown = {"added", "modified", "deleted", "created_at", "attempt_pk", "pk", "id"}
    assert [{k: v for k, v in r.items() if k not in unknown} for r in theirs] == \
        [{k: v for k, v in r.items() if k not in unknown} for r in ours]
    assert theirs[2]["secrets"] == FINDINGS and theirs[1]["tool_use_id"] == "toolu_1"
    assert [r["created_at"] for r in theirs] == [int(r["created_at"]) for r in theirs]


def test_reconcile_stops_at_a_commit_without_a_seq_trailer(tmp_path) -> None:
    store, wt, made = _chain(tmp_path)
    repo = pygit2.Repository(str(store.path))
    sig = pygit2.Signature("t", "t@example.invalid", 1_700_000_000, 0)
    foreign = repo.create_commit(None, sig, sig, "not a checkpoint\n",
                                 repo[made[-1].commit].peel(pygit2.Commit).tree_id,
                                 [pygit2.Oid(hex=made[-1].commit)])
    on_top = Checkpoint(key=KEY, seq=9, worktree=str(wt), tree=made[-1].tree)
    tip = store.commit(on_top, made[-1].tree or "", str(foreign))
    ledger = Ledger(tmp_path / "l.db")
    assert reconcile_attempt(store, ledger, KEY, tip) == 1
    assert [r["seq"] for r in ledger.attempt_checkpoints(ledger.get_attempt(KEY).pk)] == [9]
