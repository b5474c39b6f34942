"""``bracket = true``: the hook's before-tool event takes a capture with source ``outside``, so
a file edited by hand between two tool calls is blamed to that capture, not the next call.
With bracketing off (the default) the before-tool event is a no-op in the daemon."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, claude_payload, run_hook
from tests.support.review_replay import cli

pytestmark = pytest.mark.one_ledger("which hook events take a capture")


def call(env: Env, wt: Path, tool_use_id: str, edit: str) -> None:
    """One Claude Code tool call: PreToolUse, the tool's own write, PostToolUse."""
    pre = claude_payload(wt, tool_use_id, file_path="a.txt", event="PreToolUse")
    assert run_hook(env, pre).returncode == 0
    with (wt / "a.txt").open("a") as f:
        f.write(edit + "\n")
    assert run_hook(env, claude_payload(wt, tool_use_id, file_path="a.txt")).returncode == 0


def blamed(env: Env, run: str) -> dict[str, dict]:
    proc = cli(env, "blame", run, "a.txt", "--node", "session", "--json")
    assert proc.returncode == 0, proc.stderr
    return {x["text"]: x for x in json.loads(proc.stdout)["lines"]}


def session(make_daemon: MakeDaemon, env: Env, tmp_path: Path, bracket: str) -> Path:
    """A worktree with one file, and a daemon with ``bracket`` set."""
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("from the start\n")
    make_daemon(env, dict(QUIET_WATCHER, SNAPSHOTD_BRACKET=bracket))
    return wt


def test_a_hand_edit_between_tool_calls_is_an_outside_checkpoint(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = session(make_daemon, sd_env, tmp_path, "true")
    call(sd_env, wt, "toolu_1", "agent one")
    with (wt / "a.txt").open("a") as f:
        f.write("by hand\n")
    call(sd_env, wt, "toolu_2", "agent two")
    call(sd_env, wt, "toolu_3", "agent three")  # nothing in between: deduplicated
    lines = blamed(sd_env, "claude-sess-1")
    assert lines["from the start"]["seq"] == 0
    assert lines["from the start"]["source"] == "outside"  # the first call's before-capture
    assert lines["agent one"]["tool_use_id"] == "toolu_1"
    hand = lines["by hand"]
    assert hand["source"] == "outside" and hand["tool_use_id"] is None
    assert hand["label"] == "before Write a.txt"  # named relative to the worktree
    assert lines["agent two"]["tool_use_id"] == "toolu_2"
    assert lines["agent two"]["seq"] == hand["seq"] + 1
    assert lines["agent three"]["seq"] == lines["agent two"]["seq"] + 1
    listed = json.loads(cli(sd_env, "snapshots", "claude-sess-1", "--json").stdout)
    sources = [c["source"] for c in listed["checkpoints"]]
    assert sources == ["outside", "hook", "outside", "hook", "hook"]
    text = cli(sd_env, "blame", "claude-sess-1", "a.txt", "--node", "session").stdout
    assert [line for line in text.splitlines() if "by hand" in line][0].split()[0] \
        == f"{hand['seq']}*"


def test_bracket_off_is_a_no_op(sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = session(make_daemon, sd_env, tmp_path, "false")
    pre = claude_payload(wt, "toolu_0", file_path="a.txt", event="PreToolUse")
    assert run_hook(sd_env, pre).returncode == 0
    runs = json.loads(cli(sd_env, "runs", "--json").stdout)
    assert runs["runs"] == []  # no attempt was created by it
    call(sd_env, wt, "toolu_1", "agent one")
    with (wt / "a.txt").open("a") as f:
        f.write("by hand\n")
    call(sd_env, wt, "toolu_2", "agent two")
    lines = blamed(sd_env, "claude-sess-1")
    # Without bracketing the hand edit is folded into the next tool call.
    assert lines["by hand"]["tool_use_id"] == "toolu_2"
    assert lines["from the start"]["tool_use_id"] == "toolu_1"
    assert sd_env.read_gaps() == []


def test_gemini_before_tool_names_the_gemini_run(sd_env: Env, tmp_path: Path,
                                                 make_daemon: MakeDaemon) -> None:
    wt = session(make_daemon, sd_env, tmp_path, "1")
    payload = {"session_id": "g-1", "cwd": str(wt), "hook_event_name": "BeforeTool",
               "tool_name": "write_file", "timestamp": "2026-01-01T00:00:00Z",
               "tool_input": {"file_path": "a.txt", "content": "x"}}
    assert run_hook(sd_env, payload).returncode == 0
    listed = json.loads(cli(sd_env, "snapshots", "gemini-g-1", "--json").stdout)
    assert [c["source"] for c in listed["checkpoints"]] == ["outside"]


def test_before_tool_without_a_daemon_writes_no_gap(sd_env: Env, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    pre = claude_payload(wt, "toolu_0", file_path="a.txt", event="PreToolUse")
    assert run_hook(sd_env, pre).returncode == 0
    assert sd_env.read_gaps() == []
    # The after-tool hook of the same call still records its gap.
    assert run_hook(sd_env, claude_payload(wt, "toolu_0")).returncode == 0
    assert [g["reason"] for g in sd_env.read_gaps()] == ["daemon-unavailable"]
