"""No tool call is invisible (issue 43): a long Bash tool call whose writes the watcher took as
tier-2 checkpoints, and a failing one (PostToolUseFailure), are listed by id and label in
``snapshots`` (table and ``--json``: ``tool_call``, ``tool_calls``) and counted in ``runs``,
through the real hook and daemon, end to end: PreToolUse, writes, the watcher's checkpoints,
PostToolUse (tests/support/tool_call_session.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, make_git_worktree
from tests.support.tool_call_session import (
    RUN,
    T1,
    T2,
    T2_COMMAND,
    T3,
    T3_COMMAND,
    cli,
    cli_json,
    run_session,
)

pytestmark = pytest.mark.one_ledger("the read model on both backends: "
                                    "tests/service/test_tool_call_model.py")


def by_seq(env: Env) -> dict[int, dict]:
    return {c["seq"]: c for c in cli_json(env, "snapshots", RUN)["checkpoints"]}


def test_snapshots_json_names_each_checkpoints_tool_call(sd_env: Env, daemon: Daemon,
                                                         tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    s = run_session(sd_env, daemon, wt)
    cps = by_seq(sd_env)
    assert s.tier2 == {T2: [1, 2], T3: [3]}
    assert cps[0]["tool_call"] == {"id": T1, "aliases": [], "label": "Write a.txt",
                                   "how": "own", "failed": False, "exit_code": None,
                                   "error": None}
    for seq in (1, 2):
        call = cps[seq]["tool_call"]
        assert (call["id"], call["how"], call["failed"]) == (T2, "in-flight", False)
        assert call["label"] == f"Bash {T2_COMMAND}"
    # t2's end deduplicated onto seq 2: listed there, with its label and id.
    assert [(c["id"], c["label"], c["kind"]) for c in cps[2]["tool_calls"]] == [
        (T2, f"Bash {T2_COMMAND}", None)]
    assert cps[1]["tool_calls"] == [] and cps[0]["tool_calls"] == []
    failing = cps[3]["tool_call"]
    assert (failing["id"], failing["how"], failing["failed"], failing["exit_code"],
            failing["error"]) == (T3, "in-flight", True, 3, "Exit code 3")
    assert failing["label"] == f"Bash {T3_COMMAND}"
    assert [(c["id"], c["failed"], c["exit_code"]) for c in cps[3]["tool_calls"]] == [
        (T3, True, 3)]
    # One entry per tool call across the listing: every id is named.
    named = {c["tool_call"]["id"] for c in cps.values() if c["tool_call"]} | {
        t["id"] for c in cps.values() for t in c["tool_calls"]}
    assert named == {T1, T2, T3}


def test_snapshots_table_lists_the_owner_and_the_deduplicated_call(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    run_session(sd_env, daemon, wt)
    out = cli(sd_env, "snapshots", RUN).stdout
    lines = out.splitlines()
    rows = {line.split()[0]: line for line in lines if line.split() and line.split()[0].isdigit()}
    assert f"[{T2}] Bash {T2_COMMAND} (in flight)" in rows["1"]
    assert f"[{T2}] Bash {T2_COMMAND} (in flight)" in rows["2"]
    assert f"[{T3}] Bash {T3_COMMAND} (in flight)  FAILED (exit 3)" in rows["3"]
    held = [line for line in lines if line.lstrip().startswith("= ")]
    assert held == [
        f"  = [{T2}] Bash {T2_COMMAND} (its end changed nothing more: state of seq 2)",
        f"  = [{T3}] Bash {T3_COMMAND} (its end changed nothing more: state of seq 3)"
        "  FAILED (exit 3)"]
    # The held line sits right under the checkpoint that holds the call's state.
    assert lines.index(held[0]) == lines.index(rows["2"]) + 1


def test_without_a_start_event_the_owner_is_inferred(sd_env: Env, daemon: Daemon,
                                                     tmp_path: Path) -> None:
    """No PreToolUse: the daemon infers the owner at the call's end; listed as such, and the
    call is still listed at its state's seq."""
    wt = make_git_worktree(tmp_path / "proj")
    run_session(sd_env, daemon, wt, start=False)
    cps = by_seq(sd_env)
    for seq, call in ((1, T2), (2, T2), (3, T3)):
        assert (cps[seq]["tool_call"]["id"], cps[seq]["tool_call"]["how"]) == (call, "inferred")
    assert [c["id"] for c in cps[2]["tool_calls"]] == [T2]
    out = cli(sd_env, "snapshots", RUN).stdout
    assert f"[{T2}] Bash {T2_COMMAND} (inferred)" in out
    assert f"  = [{T3}] Bash {T3_COMMAND} (" in out


def test_runs_counts_tool_calls_with_the_deduplicated_ones(sd_env: Env, daemon: Daemon,
                                                           tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    run_session(sd_env, daemon, wt)
    [row] = [r for r in cli_json(sd_env, "runs")["runs"] if r["run_id"] == RUN]
    assert (row["tool_calls"], row["tool_calls_deduped"], row["events"]) == (3, 2, 0)
    out = cli(sd_env, "runs").stdout
    assert out.splitlines()[0].split()[5] == "CALLS"
    assert "3 (2 deduplicated)" in out
