"""Two sessions in one folder (issue 43, "Other actors are named, not absorbed"): session A's
next tool call captures session B's new file and B's edit along with its own; ``show``,
``blame``, ``find`` and ``log`` of either run credit each change to the tool call that made it.

Real ``snapshot-hook`` processes with Claude Code's PostToolUse payloads (zero-setup runs
``claude-<session>``), a real daemon, a real git worktree; the watcher is quiet, so every
checkpoint is a hook's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import Daemon, Env, claude_payload, git, make_git_worktree, run_hook

A, B = "claude-sess-a", "claude-sess-b"
SHARED = "def one():\n    return 1\n\n\ndef two():\n    return 2\n"


def cli(env: Env, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def cli_json(env: Env, *args: str) -> dict:
    return json.loads(cli(env, *args, "--json").stdout)


def tool_call(env: Env, wt: Path, session: str, tool_use_id: str, path: str) -> None:
    proc = run_hook(env, claude_payload(wt, tool_use_id, file_path=path, session_id=session),
                    CLAUDE_PROJECT_DIR=str(wt))
    assert (proc.returncode, proc.stderr) == (0, b""), proc


def credited(line_or_entry: dict) -> tuple[str, str | None]:
    """(run, tool call id) a blamed line or a find entry is credited to."""
    foreign = line_or_entry.get("foreign")
    if foreign:
        return foreign["run_id"], foreign["tool_call"]["id"]
    call = line_or_entry.get("tool_call") or {}
    return line_or_entry["run_id"], call.get("id")


def blame(env: Env, run: str, path: str) -> dict[int, tuple[str, str | None]]:
    """line -> (run, tool call id) each line of ``path`` at ``run``'s newest checkpoint is
    credited to (the tool call's own run when another session's)."""
    out = cli_json(env, "blame", run, path, "--node", "session")
    return {ln["line"]: ((ln["tool_call"] or {}).get("run_id") or run,
                         (ln["tool_call"] or {}).get("id")) for ln in out["lines"]}


def setup_folder(tmp_path: Path) -> Path:
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "shared.py").write_text(SHARED)
    (wt / "test_a.py").write_text("def test_a():\n    assert True\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    return wt


def test_another_sessions_changes_are_credited_to_its_tool_call(sd_env: Env, daemon: Daemon,
                                                               tmp_path: Path) -> None:
    wt = setup_folder(tmp_path)
    # A edits its test file; B adds new.txt and edits a line of shared.py; A edits again.
    (wt / "test_a.py").write_text("def test_a():\n    assert 1 == 1\n")
    tool_call(sd_env, wt, "sess-a", "toolu_a1", "test_a.py")
    (wt / "new.txt").write_text("from session b\n")
    (wt / "shared.py").write_text(SHARED.replace("return 2", "return 22"))
    tool_call(sd_env, wt, "sess-b", "toolu_b1", "new.txt")
    (wt / "test_a.py").write_text("def test_a():\n    assert 2 == 2\n")
    tool_call(sd_env, wt, "sess-a", "toolu_a2", "test_a.py")

    # A's second checkpoint holds B's change: show credits it to B's tool call.
    shown = cli_json(sd_env, "show", A, "--node", "session", "--seq", "1")
    assert sorted(f["path"] for f in shown["files"]) == ["new.txt", "shared.py", "test_a.py"]
    foreign = {f["path"]: f for f in shown["foreign"]}
    assert sorted(foreign) == ["new.txt", "shared.py"]
    for entry in foreign.values():
        assert (entry["run_id"], entry["node_id"], entry["seq"]) == (B, "session", 0)
        assert entry["tool_call"]["id"] == "toolu_b1" and not entry["mixed"]
        assert entry["tool_call"]["label"] == "Write new.txt"
    text = cli(sd_env, "show", A, "--node", "session", "--seq", "1").stdout
    assert f"shared.py  by {B}/session seq 0 [toolu_b1] Write new.txt" in text
    # B's first checkpoint holds A's first edit: credited to A's tool call.
    shown_b = cli_json(sd_env, "show", B, "--node", "session", "--seq", "0")
    assert [(f["path"], f["run_id"], f["tool_call"]["id"]) for f in shown_b["foreign"]] == [
        ("test_a.py", A, "toolu_a1")]

    # blame of both runs agrees, line by line.
    for run in (A, B):
        lines = blame(sd_env, run, "shared.py")
        assert lines[6] == (B, "toolu_b1"), (run, lines)
        assert all(lines[n] == (run, None) for n in (1, 2, 5)), lines  # the base held them
    assert blame(sd_env, A, "test_a.py")[2] == (A, "toolu_a2")
    assert blame(sd_env, B, "test_a.py")[2] == (A, "toolu_a1")
    text = cli(sd_env, "blame", A, "shared.py", "--node", "session").stdout.splitlines()[5]
    assert text.startswith("   1^ [toolu_b1] " + B), text

    # find of both paths: every checkpoint that holds the change credits B's tool call.
    for path in ("new.txt", "shared.py"):
        found = cli_json(sd_env, "find", path, "--cwd", str(wt))
        assert sorted((c["run_id"], c["seq"]) for c in found["checkpoints"]) == [(A, 1), (B, 0)]
        assert {credited(c) for c in found["checkpoints"]} == {(B, "toolu_b1")}
    found = cli_json(sd_env, "find", "test_a.py", "--cwd", str(wt))
    assert sorted(credited(c) for c in found["checkpoints"]) == [
        (A, "toolu_a1"), (A, "toolu_a1"), (A, "toolu_a2")]
    # log of A names the other session's change in its entry.
    log = cli_json(sd_env, "log", A, "--patch")
    newest = log["entries"][0]
    assert newest["seq"] == 1 and sorted(f["path"] for f in newest["foreign"]) == [
        "new.txt", "shared.py"]


def test_both_sessions_editing_one_file_are_told_apart_line_by_line(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = setup_folder(tmp_path)
    (wt / "test_a.py").write_text("def test_a():\n    assert 1 == 1\n")
    tool_call(sd_env, wt, "sess-a", "toolu_a1", "test_a.py")
    (wt / "shared.py").write_text(SHARED.replace("return 2", "return 22"))
    tool_call(sd_env, wt, "sess-b", "toolu_b1", "shared.py")
    # A edits line 2 of the same file before its next capture.
    (wt / "shared.py").write_text(SHARED.replace("return 2", "return 22").replace(
        "return 1", "return 11"))
    tool_call(sd_env, wt, "sess-a", "toolu_a2", "shared.py")

    shown = cli_json(sd_env, "show", A, "--node", "session", "--seq", "1")
    [entry] = shown["foreign"]
    assert entry["path"] == "shared.py" and entry["mixed"]
    assert (entry["run_id"], entry["tool_call"]["id"]) == (B, "toolu_b1")
    lines = blame(sd_env, A, "shared.py")
    assert lines[2] == (A, "toolu_a2") and lines[6] == (B, "toolu_b1")
