"""The tool call read model (``service.tool_calls``) on the real ledger of both backends: ids of
one call grouped (its own capture's and a deduplicated one's), an owner named with its own
label and outcome, an owner whose end has not come yet known by its id, and a call's span
found by any of its ids."""

from __future__ import annotations

from snapshotd.core.keys import AttemptKey
from snapshotd.ledger.ledger import Ledger
from snapshotd.service import annotate, call_span, count_calls
from tests.ledger.test_ledger_backends import ledger, row, url  # noqa: F401 (fixtures)


def test_model_groups_ids_and_names_owners(ledger: Ledger) -> None:  # noqa: F811
    ledger.ensure_worktree("w", "/wt")
    a = ledger.create_attempt(AttemptKey("run", "node", 0, 1), "/wt")
    # Qwen Code's two ids for one call, on its own checkpoint.
    ledger.record_checkpoint(a, {**row(0, tool="t1"), "tool_aliases": ["call_1"],
                                 "label": "Edit a.txt"})
    ledger.record_checkpoint(a, row(1, tier=2))
    ledger.record_checkpoint(a, row(2, tier=2))
    ledger.record_checkpoint(a, row(3, tier=2))
    ledger.set_owner(a, [1, 2], "t2", "in-flight")
    ledger.set_owner(a, [3], "t9", "inferred")  # its end has not come yet
    ledger.record_tool_call(a, "t2", 2, '{"failed": true, "exit_code": 3}', ["call_2"],
                            label="Bash make")
    ledger.record_tool_call(a, "r1", 2, label="restore to seq 0", kind="restore")
    rows = annotate(ledger.checkpoints("run"), ledger.tool_calls("run"))
    assert rows[0]["tool_call"] == {"id": "t1", "aliases": ["call_1"], "label": "Edit a.txt",
                                    "how": "own", "failed": False, "exit_code": None,
                                    "error": None}
    assert rows[0]["tool_calls"] == []
    for seq in (1, 2):
        assert rows[seq]["tool_call"] == {"id": "t2", "aliases": ["call_2"],
                                          "label": "Bash make", "how": "in-flight",
                                          "failed": True, "exit_code": 3, "error": None}
    assert rows[2]["tool_calls"] == [
        {"id": "t2", "aliases": ["call_2"], "label": "Bash make", "kind": None, "failed": True,
         "exit_code": 3, "error": None},
        {"id": "r1", "aliases": [], "label": "restore to seq 0", "kind": "restore",
         "failed": False, "exit_code": None, "error": None}]
    assert rows[3]["tool_call"]["id"] == "t9" and rows[3]["tool_call"]["label"] is None
    assert count_calls(ledger.tool_calls("run")) == {"tool_calls": 2, "tool_calls_deduped": 1,
                                                     "events": 1}
    for tool_id in ("t2", "call_2"):
        [(call, owned, held)] = call_span(ledger.checkpoints("run"), ledger.tool_calls("run"),
                                          tool_id)
        assert call["id"] == "t2" and [c["seq"] for c in owned] == [1, 2]
        assert held is not None and held["seq"] == 2
    [(call, owned, held)] = call_span(ledger.checkpoints("run"), ledger.tool_calls("run"), "t9")
    assert [c["seq"] for c in owned] == [3] and held is None
    assert call_span(ledger.checkpoints("run"), ledger.tool_calls("run"), "nope") == []
