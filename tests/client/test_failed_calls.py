"""A failed tool call through the real ``snapshot-hook`` and daemon (issue 43): the captured
PostToolUseFailure payloads of Claude Code and Qwen Code give checkpoints marked failed, with the
exit code and the (redacted) error, in ``snapshots --json``, the text listing and ``show``; a
successful call has no mark; a failed call that changed nothing keeps its mark on its tool call
row."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.test_agents import listing, localize, nothing, replay, write
from tests.conftest import Daemon, Env, load_payloads, make_git_worktree

pytestmark = pytest.mark.one_ledger("the hook's outcome fields, end to end")


def cli(env: Env, *args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                         capture_output=True, check=True, text=True)
    return out.stdout


def test_claude_code_failure_is_marked(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    raw = load_payloads("claude-code/post-tool-use-failure.ndjson")
    payloads = [localize(p, "<harness>/runs/failures/proj", wt) for p in raw]
    replay(sd_env, payloads, [write("z.txt", "z\n"), write("w.txt", "w\n")], wt,
           CLAUDE_PROJECT_DIR=str(wt))
    run = f"claude-{raw[0]['session_id']}"
    cps = listing(sd_env, run)["checkpoints"]
    assert [(c["failed"], c["exit_code"], c["error"]) for c in cps] == [
        (True, 3, "Exit code 3"), (False, None, None)]
    lines = {line.split()[0]: line for line in cli(sd_env, "snapshots", run).splitlines()
             if line.split() and line.split()[0].isdigit()}
    assert "FAILED (exit 3)" in lines["0"] and "FAILED" not in lines["1"]
    shown = cli(sd_env, "show", run, "--node", "session", "--seq", "0", "--stat")
    assert "FAILED (exit 3): Exit code 3" in shown
    assert "FAILED" not in cli(sd_env, "show", run, "--node", "session", "--seq", "1", "--stat")


def test_qwen_failure_is_marked(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    raw = load_payloads("qwen/post-tool-use.ndjson")
    assert raw[2]["hook_event_name"] == "PostToolUseFailure"
    payloads = [localize(p, "<harness>/proj", wt) for p in raw]
    replay(sd_env, payloads, [write("hello.txt", "hello\n"), write("shell_out.txt", "x\n"),
                              write("failed.txt", "partial\n")], wt)
    cps = listing(sd_env, f"qwen-{raw[0]['session_id']}")["checkpoints"]
    assert [(c["failed"], c["exit_code"]) for c in cps] == [(False, None), (False, None),
                                                           (True, 3)]
    assert cps[2]["error"].startswith("Command: echo partial > failed.txt; exit 3 ")
    assert "Exit Code: 3" in cps[2]["error"]


def test_error_text_is_redacted(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    token = "ghp_" + "Qm3xT8vR2kLp9Wz4Yb7Nc1Hd6Fg0Js5AxYz9"
    payload = localize(load_payloads("claude-code/post-tool-use-failure.ndjson")[0],
                       "<harness>/runs/failures/proj", wt)
    payload["error"] = f"Exit code 1\nfatal: auth {token} rejected"
    replay(sd_env, [payload], [write("z.txt", "z\n")], wt, CLAUDE_PROJECT_DIR=str(wt))
    [cp] = listing(sd_env, f"claude-{payload['session_id']}")["checkpoints"]
    assert (cp["failed"], cp["exit_code"]) == (True, 1)
    assert token not in cp["error"] and cp["error"].startswith("Exit code 1 fatal: auth ")


def test_failed_call_that_changed_nothing_keeps_its_mark(sd_env: Env, daemon: Daemon,
                                                         tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    raw = load_payloads("qwen/post-tool-use.ndjson")
    payloads = [localize(p, "<harness>/proj", wt) for p in raw]
    # The failing command wrote nothing: its tool call maps to the previous checkpoint.
    replay(sd_env, payloads, [write("hello.txt", "hello\n"), write("shell_out.txt", "x\n"),
                              nothing], wt)
    cps = listing(sd_env, f"qwen-{raw[0]['session_id']}")["checkpoints"]
    assert len(cps) == 2 and not any(c["failed"] for c in cps)
    db = sd_env.home / "snapshotd.db"
    assert db.is_file(), "this test reads the SQLite ledger's tool call rows"
    with sqlite3.connect(db) as con:
        rows = con.execute("SELECT seq, deduped, outcome FROM tool_calls WHERE tool_use_id=?",
                           (raw[2]["tool_use_id"],)).fetchall()
    assert len(rows) == 1 and rows[0][:2] == (1, 1)
    assert '"exit_code": 3' in rows[0][2] and '"failed": true' in rows[0][2]


@pytest.mark.parametrize(("fixture", "line", "expected"), [
    ("claude-code/post-tool-use-failure.ndjson", 0, {"failed": True, "exit_code": 3,
                                                     "error": "Exit code 3"}),
    ("claude-code/post-tool-use-failure.ndjson", 1, {}),
    ("qwen/post-tool-use.ndjson", 1, {}),
    ("goose/post-tool-use.ndjson", 2, {"failed": True, "exit_code": 3, "error": "exit code 3"}),
    ("amp/tool-result.ndjson", 2, {"failed": True, "exit_code": 3, "error": "exit code 3"}),
    ("kiro/post-tool-use.ndjson", 1, {}),
    ("kiro/post-tool-use.ndjson", 2, {"failed": True, "exit_code": 3}),
    # Gemini's failed replace: an error object, no exit code.
    ("gemini/after-tool.ndjson", 5, {"failed": True, "error": "Could not find an exact match"}),
    # Exit codes only in a tool's output text are not read (Gemini's, Copilot's shell).
    ("gemini/after-tool.ndjson", 2, {}),
    ("copilot/post-tool-use.ndjson", 2, {}),
    ("codex/post-tool-use.ndjson", 2, {}),
])
def test_outcome_of_each_agents_payload(fixture: str, line: int, expected: dict) -> None:
    from snapshotd_client.hook import route, snapshot_fields

    payload, kind = route(load_payloads(fixture)[line])
    assert kind == "snapshot"
    fields = snapshot_fields(payload, {})
    found = {k: fields[k] for k in ("failed", "exit_code", "error") if k in fields}
    if "error" in expected and "error" in found:  # a long text: its start says enough
        found["error"] = found["error"][:len(expected["error"])]
    assert found == expected
