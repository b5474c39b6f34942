"""Coverage, visible (issue 43): a session's tool calls seen, captured as theirs, inferred, its
gaps and the changes from outside, in ``snapshots`` and ``status`` (text and ``--json``).

A real daemon, the real ``snapshot-hook`` per tool call (Claude Code payloads from
tests/fixtures), the gap the hook writes when no daemon answers, a person's edit the watcher
captures while the session is idle, and owners set through the daemon's own ledger
(``Ledger.set_owner``)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import (
    QUIET_WATCHER,
    Daemon,
    Env,
    MakeDaemon,
    claude_payload,
    load_payloads,
    make_git_worktree,
    run_hook,
)

RUN = "claude-cov"


def cli(env: Env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120)


def hook(env: Env, wt: Path, payload: dict) -> None:
    proc = run_hook(env, payload, CLAUDE_PROJECT_DIR=str(wt))
    assert (proc.returncode, proc.stderr) == (0, b"")


def event(wt: Path, name: str) -> dict:
    [base] = [p for p in load_payloads("claude-code/session-lifecycle.ndjson")
              if p["hook_event_name"] == name]
    return {**base, "session_id": "cov", "cwd": str(wt)}


def tool_call(env: Env, wt: Path, tool_use_id: str, name: str) -> None:
    (wt / name).write_text(f"{tool_use_id}\n")
    hook(env, wt, claude_payload(wt, tool_use_id, file_path=name, session_id="cov"))


def listed(env: Env) -> tuple[dict, list[str]]:
    """``snapshots RUN --json``'s one coverage entry, and the text listing's lines."""
    proc = cli(env, "snapshots", RUN, "--json")
    assert proc.returncode == 0, proc.stderr
    [cov] = json.loads(proc.stdout)["coverage"]
    text = cli(env, "snapshots", RUN)
    assert text.returncode == 0, text.stderr
    return cov, text.stdout.splitlines()


def status(env: Env) -> tuple[dict, list[str]]:
    proc = cli(env, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)["coverage"]
    text = cli(env, "status")
    assert text.returncode == 0, text.stderr
    return info, text.stdout.splitlines()


def figures(cov: dict) -> tuple:
    return (cov["tool_calls_seen"], cov["tool_calls_captured"], cov["inferred"], cov["gaps"],
            cov["changes_from_outside"])


def test_a_session_at_100_then_a_missed_tool_call_and_a_change_from_outside(
        sd_env: Env, make_daemon: MakeDaemon, tmp_path: Path) -> None:
    daemon = make_daemon(sd_env, QUIET_WATCHER)
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "README").write_text("start\n")
    hook(sd_env, wt, event(wt, "SessionStart"))  # a baseline: not a tool call, not outside
    hook(sd_env, wt, event(wt, "UserPromptSubmit"))
    tool_call(sd_env, wt, "toolu_1", "a.txt")
    tool_call(sd_env, wt, "toolu_2", "b.txt")
    # A tool call that changed nothing: its capture deduplicates onto seq 2, still its state.
    hook(sd_env, wt, claude_payload(wt, "toolu_3", file_path="b.txt", session_id="cov"))

    cov, lines = listed(sd_env)
    assert figures(cov) == (3, 3, 0, 0, 0)
    assert (cov["percent"], cov["complete"], cov["last_gap"]) == (100, True, None)
    assert cov["summary"] == "coverage: 3/3 tool calls captured (100 %), 0 gaps"
    assert lines.count("session/0/1 " + cov["summary"]) == 1
    info, text = status(sd_env)
    [mine] = [c for c in info["attempts"] if c["run_id"] == RUN]
    assert figures(mine) == figures(info["total"]) == (3, 3, 0, 0, 0)
    assert [t for t in text if t.startswith("coverage")] == [
        "coverage  3/3 tool calls captured (100 %), 0 gaps  (1 active attempt)"]

    # The daemon is down: the hook writes a gap naming the tool call, nothing is captured.
    daemon.stop()
    tool_call(sd_env, wt, "toolu_4", "c.txt")
    [gap] = [g for g in sd_env.read_gaps() if g.get("tool_use_id") == "toolu_4"]
    daemon = make_daemon(sd_env, QUIET_WATCHER)
    cov, lines = listed(sd_env)
    assert figures(cov) == (4, 3, 0, 1, 0)
    assert cov["percent"] == 75 and not cov["complete"]
    assert cov["missed"] == ["toolu_4"]
    assert (cov["last_gap"]["reason"], cov["last_gap"]["tool_use_id"], cov["last_gap"]["ts"]) \
        == (gap["reason"], "toolu_4", gap["ts"])
    assert re.fullmatch(r"coverage: 3/4 tool calls captured \(75 %\) · 1 gap: "
                        + re.escape(gap["reason"]) + r" at \d\d:\d\d:\d\d \[toolu_4\]",
                        cov["summary"]), cov["summary"]
    assert "session/0/1 " + cov["summary"] in lines
    runs = json.loads(cli(sd_env, "runs", "--json").stdout)["runs"]
    [run] = [r for r in runs if r["run_id"] == RUN]
    assert figures(run["coverage"]) == (4, 3, 0, 1, 0) and run["coverage"]["attempts"] == 1
    table = cli(sd_env, "runs").stdout.splitlines()
    assert "COVERAGE" in table[0].split()
    [row] = [line for line in table if line.startswith(RUN)]
    assert "3/4 (75 %), 1 gap" in row
    info, text = status(sd_env)
    assert figures(info["total"]) == (4, 3, 0, 1, 0)
    assert any(t.startswith("coverage  3/4 tool calls captured (75 %) · 1 gap: ")
               for t in text), text

    # The turn ends; a person edits a file and the watcher captures it: from outside.
    hook(sd_env, wt, event(wt, "Stop"))
    (wt / "notes.txt").write_text("by hand\n")
    assert cli(sd_env, "flush", "--cwd", str(wt)).returncode == 0
    cov, _ = listed(sd_env)
    assert figures(cov) == (4, 3, 0, 1, 1)
    assert cov["summary"].endswith(" · 1 change from outside")
    info, _ = status(sd_env)
    assert info["total"]["changes_from_outside"] == 1

    # toolu_4 is retried and captured: its gap is resolved and no longer lowers the figure.
    hook(sd_env, wt, claude_payload(wt, "toolu_4", file_path="c.txt", session_id="cov"))
    cov, _ = listed(sd_env)
    assert figures(cov) == (4, 4, 0, 0, 1) and cov["resolved_gaps"] == 1
    assert cov["summary"] == ("coverage: 4/4 tool calls captured (100 %), 0 gaps"
                              " · 1 change from outside")
    daemon.stop()


def test_owned_tier2_checkpoints_count_as_their_tool_calls(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")

    def written(name: str) -> None:  # a tool call's write, captured by tier 2 (the flush)
        (wt / name).write_text(f"{name}\n")
        assert cli(sd_env, "flush", "--cwd", str(wt)).returncode == 0

    def start(tool_use_id: str) -> None:
        payload = claude_payload(wt, tool_use_id, session_id="cov", event="PreToolUse")
        payload.pop("tool_response", None)
        hook(sd_env, wt, payload)

    hook(sd_env, wt, event(wt, "SessionStart"))
    hook(sd_env, wt, event(wt, "UserPromptSubmit"))
    tool_call(sd_env, wt, "toolu_1", "a.txt")
    # toolu_2 says when it starts: what the watcher takes until its end is its, in-flight; its
    # end deduplicates onto the last of them.
    start("toolu_2")
    written("b.txt")
    written("c.txt")
    hook(sd_env, wt, claude_payload(wt, "toolu_2", file_path="c.txt", session_id="cov"))
    # toolu_3 has no start event: what changed while the session worked before its end is its,
    # inferred.
    written("d.txt")
    hook(sd_env, wt, claude_payload(wt, "toolu_3", file_path="d.txt", session_id="cov"))
    # toolu_4 started and its change was captured, but its end was never heard: still captured.
    start("toolu_4")
    written("e.txt")
    cov, _ = listed(sd_env)
    assert figures(cov) == (4, 4, 1, 0, 0) and cov["in_flight"] == 2
    assert cov["summary"] == "coverage: 4/4 tool calls captured (100 %), 0 gaps · 1 inferred"
    rows = sd_env.ledger_query("SELECT owner, owner_how FROM checkpoints WHERE run_id=?"
                               " AND tier=2 ORDER BY seq", (RUN,))
    assert [(r["owner"], r["owner_how"]) for r in rows] == [
        ("toolu_2", "in-flight"), ("toolu_2", "in-flight"), ("toolu_3", "inferred"),
        ("toolu_4", "in-flight")]


def test_a_tool_call_with_two_ids_is_one_tool_call_and_a_restore_none(sd_env: Env, daemon: Daemon,
                                                   tmp_path: Path) -> None:
    # Qwen Code names a call by its own id and the model's: one call, whatever its capture.
    wt = tmp_path / "wt"
    wt.mkdir()
    with daemon.client() as c:
        for i, (tool_id, alias) in enumerate((("t1", "call_1"), ("t2", "call_2"))):
            (wt / "f.txt").write_text(f"{i}\n")
            c.snapshot(str(wt), run_id="q", node_id="n", tool_use_id=tool_id,
                       tool_aliases=[alias], source="hook")
        c.snapshot(str(wt), run_id="q", node_id="n", tool_use_id="t3",
                   tool_aliases=["call_3"], source="hook")  # deduplicated onto t2's state
    # A restore is snapshotd's own event (its safety checkpoint and restored state are not a
    # tool call's, nor a change from outside): it changes no figure.
    restored = cli(sd_env, "restore", "q", "--node", "n", "--seq", "0", "--force")
    assert restored.returncode == 0, restored.stderr
    listing = json.loads(cli(sd_env, "snapshots", "q", "--json").stdout)
    assert [t["kind"] for cp in listing["checkpoints"] for t in cp["tool_calls"]
            if t["kind"]] == ["restore"]
    [cov] = listing["coverage"]
    assert (cov["tool_calls_seen"], cov["tool_calls_captured"], cov["changes_from_outside"]) \
        == (3, 3, 0)


@pytest.mark.one_ledger("the gap spool alone: a file, no ledger")
def test_status_reads_the_gap_spool_incrementally_for_the_runs_asked(tmp_path: Path) -> None:
    from snapshotd.service import GapFollower
    from snapshotd.service.gaps import GapSpool

    spool = GapSpool(tmp_path / "gaps.ndjson")
    follower = GapFollower(spool.path)
    assert follower.gaps({"a"}) == {}  # no spool yet
    spool.record(reason="timeout", detail="d", run_id="a", tool_use_id="t1")
    spool.record(reason="timeout", detail="d", run_id="b", tool_use_id="t2")
    assert [g["tool_use_id"] for g in follower.gaps({"a"})["a"]] == ["t1"]
    spool.record(reason="fenced", detail="d", run_id="a", tool_use_id="t3")
    # Only what was appended is read for "a"; "b", asked for the first time, gets its past.
    found = follower.gaps({"a", "b"})
    assert [g["tool_use_id"] for g in found["a"]] == ["t1", "t3"]
    assert [g["tool_use_id"] for g in found["b"]] == ["t2"]
    assert set(follower.gaps({"b"})) == {"b"}  # "a" is no longer kept
    with open(spool.path, "ab") as f:  # a writer half-way through its line
        f.write(b'{"run_id": "b", "tool_use_id": "t4", "reas')
    assert [g["tool_use_id"] for g in follower.gaps({"b"})["b"]] == ["t2"]
    with open(spool.path, "ab") as f:
        f.write(b'on": "timeout"}\n')
    assert [g["tool_use_id"] for g in follower.gaps({"b"})["b"]] == ["t2", "t4"]
    spool.path.write_text("")  # rewritten shorter (gc dropped runs): read again from the start
    spool.record(reason="timeout", detail="d", run_id="b", tool_use_id="t5")
    assert [g["tool_use_id"] for g in follower.gaps({"b"})["b"]] == ["t5"]
