"""Agent sessions end to end: a real daemon, the real ``snapshot-hook`` as a process per event.

Two sessions in one folder each keep their own chain (one after the other, and interleaved); a
session's lifecycle events (docs/agents.md, "Session lifecycle") make its attempt working, idle,
finished, or abandoned once its agent's process is gone; restore refuses only a session that
works; tier 2 goes to the session active most recently; an attempt registered with ``attempt
begin`` still owns every hook in its worktree."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import (
    Daemon,
    Env,
    claude_payload,
    load_payloads,
    make_git_worktree,
    run_hook,
)

HARNESS_PROJ = "<harness>/runs/lifecycle/proj"
LIFECYCLE = {"claude": "claude-code/session-lifecycle.ndjson",
             "codex": "codex/session-lifecycle.ndjson",
             "gemini": "gemini/session-lifecycle.ndjson"}


def cli(env: Env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120)


def listing(env: Env, run_id: str) -> dict:
    proc = cli(env, "snapshots", run_id, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def attempts(env: Env, run_id: str) -> list[dict]:
    return env.ledger_query("SELECT * FROM attempts WHERE run_id = ? ORDER BY attempt", (run_id,))


def event(worktree: Path, session: str, name: str, **extra: object) -> dict:
    """A Claude Code lifecycle payload (tests/fixtures) of ``session`` in ``worktree``."""
    [base] = [p for p in load_payloads(LIFECYCLE["claude"]) if p["hook_event_name"] == name]
    return {**base, "session_id": session, "cwd": str(worktree), **extra}


def localized(agent: str, worktree: Path, session: str) -> list[dict]:
    return [{**json.loads(json.dumps(p).replace(HARNESS_PROJ, str(worktree))),
             "session_id": session} for p in load_payloads(LIFECYCLE[agent])]


def hook(env: Env, wt: Path, payload: dict) -> subprocess.CompletedProcess:
    """The hook as the agent runs it, with the project dir it sets; exit 0, nothing on stderr."""
    proc = run_hook(env, payload, CLAUDE_PROJECT_DIR=str(wt))
    assert (proc.returncode, proc.stderr) == (0, b"")
    return proc


def tool_call(env: Env, wt: Path, session: str, tool_use_id: str, name: str) -> None:
    (wt / name).write_text(f"{session} {tool_use_id}\n")
    proc = hook(env, wt, claude_payload(wt, tool_use_id, file_path=name, session_id=session))
    assert proc.stdout == b""


def tool_ids(env: Env, run_id: str) -> list[str]:
    return [c["tool_use_id"] for c in listing(env, run_id)["checkpoints"] if c["tool_use_id"]]


def wait_for_state(env: Env, run_id: str, state: str, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rows = attempts(env, run_id)
        if rows and rows[-1]["state"] == state:
            return rows[-1]
        time.sleep(0.2)
    raise AssertionError(f"{run_id} is not {state}: {attempts(env, run_id)}")


# -- sessions kept apart ---------------------------------------------------------------------------


def test_two_sessions_one_after_the_other_keep_their_own_runs(sd_env: Env, daemon: Daemon,
                                                              tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    for i in range(3):
        tool_call(sd_env, wt, "first", f"toolu_a{i}", f"a{i}.txt")
    for i in range(3):
        tool_call(sd_env, wt, "second", f"toolu_b{i}", f"b{i}.txt")
    assert tool_ids(sd_env, "claude-first") == ["toolu_a0", "toolu_a1", "toolu_a2"]
    assert tool_ids(sd_env, "claude-second") == ["toolu_b0", "toolu_b1", "toolu_b2"]
    assert sd_env.read_gaps() == []


def test_a_sessions_tool_call_in_another_project_is_a_gap_not_silence(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    """One session whose project changes under it (resumed in another project while its attempt
    still runs, or an agent that reports only its cwd and moved to another repository): the
    capture is of the session's attempt's worktree, as before, and the other project's changes
    are not in it. That was silent (the hook said ok, no gap); it is a gap now that names both
    directories and the tool call."""
    first = make_git_worktree(tmp_path / "first")
    other = make_git_worktree(tmp_path / "other")
    tool_call(sd_env, first, "moved", "toolu_m0", "a.txt")
    tool_call(sd_env, other, "moved", "toolu_m1", "b.txt")
    gaps = [g for g in sd_env.read_gaps() if g["reason"] == "outside-worktree"]
    assert [(g["tool_use_id"], g["run_id"]) for g in gaps] == [("toolu_m1", "claude-moved")]
    assert str(other) in gaps[0]["detail"] and str(first) in gaps[0]["detail"]
    # Work in a subdirectory of the project is the project's: no gap.
    sub = first / "pkg"
    sub.mkdir()
    (sub / "c.txt").write_text("c\n")
    proc = run_hook(sd_env, claude_payload(sub, "toolu_m2", file_path="c.txt",
                                           session_id="moved"))
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert [g["tool_use_id"] for g in sd_env.read_gaps()] == ["toolu_m1"]
    assert tool_ids(sd_env, "claude-moved")[-1] == "toolu_m2"


def test_two_sessions_interleaved_keep_their_own_runs(sd_env: Env, daemon: Daemon,
                                                      tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    hook(sd_env, wt, event(wt, "one", "SessionStart"))
    hook(sd_env, wt, event(wt, "two", "SessionStart"))
    for i in range(3):
        tool_call(sd_env, wt, "one", f"toolu_1_{i}", f"one{i}.txt")
        tool_call(sd_env, wt, "two", f"toolu_2_{i}", f"two{i}.txt")
    assert tool_ids(sd_env, "claude-one") == [f"toolu_1_{i}" for i in range(3)]
    assert tool_ids(sd_env, "claude-two") == [f"toolu_2_{i}" for i in range(3)]
    # Each chain is its own: every checkpoint's parent is the one before it in the same run.
    for run in ("claude-one", "claude-two"):
        cps = listing(sd_env, run)["checkpoints"]
        assert [c["parent"] for c in cps[1:]] == [c["commit"] for c in cps[:-1]]
        assert [(a["attempt"], a["state"]) for a in attempts(sd_env, run)] == [(1, "active")]
    assert sd_env.read_gaps() == []


def test_tier2_goes_to_the_session_active_most_recently(sd_env: Env, daemon: Daemon,
                                                       tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    tool_call(sd_env, wt, "one", "toolu_1", "one.txt")
    tool_call(sd_env, wt, "two", "toolu_2", "two.txt")
    with daemon.client() as c:
        (wt / "typed-by-hand.txt").write_text("after session two's tool call\n")
        c.flush(str(wt))
        assert [cp["tier"] for cp in listing(sd_env, "claude-two")["checkpoints"]] == [1, 2]
        tool_call(sd_env, wt, "one", "toolu_3", "one.txt")
        (wt / "typed-by-hand.txt").write_text("after session one's tool call\n")
        c.flush(str(wt))
        assert [cp["tier"] for cp in listing(sd_env, "claude-one")["checkpoints"]] == [1, 1, 2]
        # Session one ends: session two, still active in the folder, takes tier 2 over.
        hook(sd_env, wt, event(wt, "one", "SessionEnd"))
        (wt / "typed-by-hand.txt").write_text("after session one ended\n")
        c.flush(str(wt))
    assert [cp["tier"] for cp in listing(sd_env, "claude-two")["checkpoints"]] == [1, 2, 2]


def test_an_attempt_begun_for_the_worktree_owns_every_hook(sd_env: Env, daemon: Daemon,
                                                           tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    proc = cli(sd_env, "attempt", "begin", "--run", "R", "--node", "N", "--cwd", str(wt))
    assert proc.returncode == 0, proc.stderr
    start = hook(sd_env, wt, event(wt, "s", "SessionStart"))
    context = json.loads(start.stdout)["hookSpecificOutput"]["additionalContext"]
    assert "run R " in context
    tool_call(sd_env, wt, "s", "toolu_r", "r.txt")
    hook(sd_env, wt, event(wt, "s", "SessionEnd"))
    assert tool_ids(sd_env, "R") == ["toolu_r"]
    assert attempts(sd_env, "claude-s") == []
    assert [a["state"] for a in attempts(sd_env, "R")] == ["active"]


# -- lifecycle -------------------------------------------------------------------------------------


def test_session_start_to_end_finishes_and_restores_without_force(sd_env: Env, daemon: Daemon,
                                                                  tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "notes.txt").write_text("before the session\n")
    start = hook(sd_env, wt, event(wt, "life", "SessionStart"))
    output = json.loads(start.stdout)["hookSpecificOutput"]
    assert output["hookEventName"] == "SessionStart"
    assert "claude-life" in output["additionalContext"] and "MCP" in output["additionalContext"]
    [row] = attempts(sd_env, "claude-life")
    assert (row["state"], row["zero_setup"], row["idle_since"]) == ("active", 1, None)
    assert row["owner_pid"] is not None
    for name in ("UserPromptSubmit", "Stop", "SessionEnd"):
        if name == "Stop":
            tool_call(sd_env, wt, "life", "toolu_life", "notes.txt")
        assert hook(sd_env, wt, event(wt, "life", name)).stdout == b""
    [row] = attempts(sd_env, "claude-life")
    assert row["state"] == "finished" and row["ended_at"] is not None
    cps = listing(sd_env, "claude-life")["checkpoints"]
    assert [(c["seq"], c["label"]) for c in cps][0] == (0, "session start")
    assert row["final_commit"] == cps[-1]["commit"]
    proc = cli(sd_env, "restore", "claude-life", "--node", "session", "--seq", "0")
    assert proc.returncode == 0, proc.stderr
    assert (wt / "notes.txt").read_text() == "before the session\n"
    assert sd_env.read_gaps() == []


@pytest.mark.parametrize("agent", ["codex", "gemini"])
def test_codex_and_gemini_lifecycle_events(sd_env: Env, daemon: Daemon, tmp_path: Path,
                                           agent: str) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    run_id = f"{agent}-s-{agent}"
    for payload in localized(agent, wt, f"s-{agent}"):
        proc = hook(sd_env, wt, payload)
        [row] = attempts(sd_env, run_id)
        name = payload["hook_event_name"]
        if name == "SessionStart":
            context = json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
            assert run_id in context and row["owner_pid"] is not None
        elif name in ("UserPromptSubmit", "BeforeAgent"):
            assert (row["state"], row["idle_since"]) == ("active", None)
        elif name in ("Stop", "AfterAgent"):
            assert row["state"] == "active" and row["idle_since"] is not None
        else:
            assert row["state"] == "finished"
    # Codex has no end event: its session stays active (idle) until liveness sees it gone.
    assert attempts(sd_env, run_id)[-1]["state"] == ("finished" if agent == "gemini"
                                                      else "active")


def test_idle_session_restores_without_force_and_a_new_prompt_refuses(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "f.txt").write_text("v0\n")
    hook(sd_env, wt, event(wt, "idle", "SessionStart"))
    hook(sd_env, wt, event(wt, "idle", "UserPromptSubmit"))
    tool_call(sd_env, wt, "idle", "toolu_1", "f.txt")
    working = cli(sd_env, "restore", "claude-idle", "--node", "session", "--seq", "0")
    assert working.returncode != 0 and "working agent" in working.stderr
    hook(sd_env, wt, event(wt, "idle", "Stop"))
    idle = cli(sd_env, "restore", "claude-idle", "--node", "session", "--seq", "0")
    assert idle.returncode == 0, idle.stderr
    assert (wt / "f.txt").read_text() == "v0\n"
    hook(sd_env, wt, event(wt, "idle", "UserPromptSubmit"))
    again = cli(sd_env, "restore", "claude-idle", "--node", "session", "--seq", "1")
    assert again.returncode != 0 and "working agent" in again.stderr
    assert (wt / "f.txt").read_text() == "v0\n"
    # A tool call after a turn's end is its agent at work too.
    hook(sd_env, wt, event(wt, "idle", "Stop"))
    tool_call(sd_env, wt, "idle", "toolu_2", "f.txt")
    assert attempts(sd_env, "claude-idle")[-1]["idle_since"] is None


def test_session_whose_agent_dies_is_abandoned(sd_env: Env, daemon: Daemon,
                                               tmp_path: Path) -> None:
    # The agent runs the hook through a shell that stays in between (`...; true`), then becomes
    # `sleep` (same pid): the owner must be the agent, found past the shell, not the shell.
    wt = make_git_worktree(tmp_path / "proj")
    agent = textwrap.dedent("""
        import os, subprocess, sys
        hook = '"$0" -c "from snapshotd_client.hook import main; main()"; true'
        subprocess.run(["sh", "-c", hook, sys.executable], input=sys.stdin.buffer.read(),
                       stdout=subprocess.DEVNULL, check=True)
        os.execvp("sleep", ["sleep", "300"])
    """)
    proc = subprocess.Popen([sys.executable, "-c", agent], stdin=subprocess.PIPE,
                            env=sd_env.environ(CLAUDE_PROJECT_DIR=str(wt)))
    try:
        proc.stdin.write(json.dumps(event(wt, "gone", "SessionStart")).encode())
        proc.stdin.close()
        deadline = time.monotonic() + 30
        while not attempts(sd_env, "claude-gone") and time.monotonic() < deadline:
            time.sleep(0.1)
        [row] = attempts(sd_env, "claude-gone")
        assert (row["state"], row["owner_pid"]) == ("active", proc.pid)
        time.sleep(1.5)  # several liveness passes: a live agent keeps its session
        assert attempts(sd_env, "claude-gone")[0]["state"] == "active"
        (wt / "left.txt").write_text("written just before the agent died\n")
    finally:
        proc.kill()
        proc.wait()
    row = wait_for_state(sd_env, "claude-gone", "abandoned")
    cps = listing(sd_env, "claude-gone")["checkpoints"]
    assert row["final_commit"] == cps[-1]["commit"]
    # The session's next event (a resumed session) goes on in a new attempt, never fenced.
    tool_call(sd_env, wt, "gone", "toolu_after", "after.txt")
    assert [(a["attempt"], a["state"]) for a in attempts(sd_env, "claude-gone")] == [
        (1, "abandoned"), (2, "active")]
    assert [g for g in sd_env.read_gaps() if g["reason"] == "fenced"] == []


# -- the hook's side -------------------------------------------------------------------------------


@pytest.mark.parametrize("agent", sorted(LIFECYCLE))
def test_lifecycle_payloads_are_told_apart(agent: str) -> None:
    from snapshotd_client.hook import SESSION_EVENTS, detect_agent

    for payload in load_payloads(LIFECYCLE[agent]):
        assert detect_agent(payload) == agent, payload["hook_event_name"]
        assert payload["hook_event_name"] in SESSION_EVENTS


def test_an_event_no_daemon_hears_is_a_gap(sd_env: Env, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    for name in ("SessionStart", "Stop", "SessionEnd"):
        proc = hook(sd_env, wt, event(wt, "deaf", name))  # it returns: run_hook's guard
        assert proc.stdout == b""
    gaps = sd_env.read_gaps()
    assert [(g["reason"], g["run_id"], g["worktree"], g["tool_use_id"]) for g in gaps] == [
        ("daemon-unavailable", "claude-deaf", str(wt), None)] * 3
    assert [g["detail"].split(" was ")[0] for g in gaps] == [
        "session start", "session idle", "session end"]
