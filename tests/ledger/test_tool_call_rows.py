"""The ledger's tool-call rows and checkpoint owners (issue 43) on both backends: a row keeps
its label, start, kind and outcome; ``set_owner`` gives only unowned tier-2 checkpoints, once."""

from __future__ import annotations

import pytest

from snapshotd.core.keys import AttemptKey
from snapshotd.ledger.ledger import Ledger
from tests.ledger.test_ledger_backends import ledger, row, url  # noqa: F401 (fixtures)


def test_tool_call_rows_keep_label_start_kind_and_outcome(ledger: Ledger) -> None:  # noqa: F811
    ledger.ensure_worktree("w", "/wt")
    a = ledger.create_attempt(AttemptKey("run", "node", 0, 1), "/wt")
    ledger.record_checkpoint(a, {**row(0, tool="t1"), "label": "Edit a.txt",
                                 "started_at": 10.0})
    ledger.record_tool_call(a, "t2", 0, '{"failed": true, "exit_code": 3}', ["call_2"],
                            label="Bash: make", started_at=11.0)
    ledger.record_tool_call(a, "restore-1", 0, label="restore to seq 0", kind="restore")
    calls = ledger.tool_calls("run")
    assert [(c["tool_use_id"], c["seq"], c["deduped"], c["label"], c["kind"]) for c in calls] \
        == [("t1", 0, False, "Edit a.txt", None), ("t2", 0, True, "Bash: make", None),
            ("call_2", 0, True, "Bash: make", None),
            ("restore-1", 0, True, "restore to seq 0", "restore")]
    assert calls[0]["started_at"] == 10.0 and calls[1]["started_at"] == 11.0
    assert (calls[1]["failed"], calls[1]["exit_code"]) == (True, 3)
    assert ledger.tool_calls("run", "other") == [] and ledger.tool_calls("nope") == []


def test_set_owner_gives_unowned_tier2_checkpoints_once(ledger: Ledger) -> None:  # noqa: F811
    ledger.ensure_worktree("w", "/wt")
    a = ledger.create_attempt(AttemptKey("run", "node", 0, 1), "/wt")
    ledger.record_checkpoint(a, row(0, tool="t1"))
    ledger.record_checkpoint(a, row(1, tier=2))
    ledger.record_checkpoint(a, {**row(2, tier=2), "owner": "t2", "owner_how": "in-flight"})
    ledger.record_checkpoint(a, row(3, tier=2))
    assert ledger.last_checkpoint(a.pk)["owner"] is None  # cached, then changed below
    assert ledger.set_owner(a, [0, 1, 2, 3], "t3", "inferred") == 2
    owners = [(c["seq"], c["owner"], c["owner_how"]) for c in ledger.attempt_checkpoints(a.pk)]
    assert owners == [(0, None, None), (1, "t3", "inferred"), (2, "t2", "in-flight"),
                      (3, "t3", "inferred")]
    assert ledger.last_checkpoint(a.pk)["owner"] == "t3"
    assert ledger.set_owner(a, [1], "t4", "in-flight") == 0  # never moved once given
    with pytest.raises(ValueError):
        ledger.set_owner(a, [1], "t4", "guessed")
