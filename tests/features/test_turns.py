"""Turns end to end (issue 44): a real daemon, the real ``snapshot-hook`` per event with Claude
Code's payloads (tests/fixtures). Two prompts with tool calls under each: ``turns --json`` lists
both first lines (a made-up token redacted), ``snapshots --json`` names each checkpoint's turn,
``restore --before-turn 2`` gives the exact tree of the end of turn 1 (``git write-tree`` of the
worktree as oracle) and prints the command that resumes the real session; with
``record_prompts = false`` no prompt text is anywhere in the home."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, claude_payload, make_git_worktree
from tests.features.test_sessions import cli, event, hook

SESSION = "7e1c2a9b-5f0d-4c3e-9a61-2b8d4f7c0e15"
RUN = f"claude-{SESSION}"
TOKEN = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


def tree_of(wt: Path) -> str:
    """The worktree's files as git would write them (a private index: the repo is untouched)."""
    env = {**os.environ, "GIT_INDEX_FILE": str(wt.parent / f"{wt.name}.oracle-index")}
    subprocess.run(["git", "-C", str(wt), "add", "-A", "."], env=env, check=True)
    out = subprocess.run(["git", "-C", str(wt), "write-tree"], env=env, check=True,
                         capture_output=True, text=True)
    os.unlink(env["GIT_INDEX_FILE"])
    return out.stdout.strip()


def tool(env: Env, wt: Path, tool_use_id: str, name: str, text: str) -> None:
    (wt / name).write_text(text)
    hook(env, wt, claude_payload(wt, tool_use_id, file_path=name, session_id=SESSION))


def two_turns(env: Env, wt: Path, second_prompt: str) -> str:
    """A session with two prompts and tool calls under each; the tree at the end of turn 1."""
    hook(env, wt, event(wt, SESSION, "SessionStart"))
    hook(env, wt, event(wt, SESSION, "UserPromptSubmit",
                        prompt="add a greeting file\nand a second line nobody lists"))
    tool(env, wt, "toolu_t1a", "greeting.txt", "hello\n")
    tool(env, wt, "toolu_t1b", "notes.txt", "notes\n")
    hook(env, wt, event(wt, SESSION, "Stop"))
    end_of_turn_1 = tree_of(wt)
    hook(env, wt, event(wt, SESSION, "UserPromptSubmit", prompt=second_prompt))
    tool(env, wt, "toolu_t2a", "greeting.txt", "hello, world\n")
    tool(env, wt, "toolu_t2b", "extra.txt", "extra\n")
    hook(env, wt, event(wt, SESSION, "Stop"))
    return end_of_turn_1


def ok_json(env: Env, *args: str) -> dict:
    proc = cli(env, *args, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_turns_list_restore_before_turn_and_resume(sd_env: Env, make_daemon: MakeDaemon,
                                                    ledger_backend: str, tmp_path: Path) -> None:
    # A shared (PostgreSQL) ledger keeps prompt text only when told to ("remote").
    mode = "remote" if ledger_backend == "postgres" else "local"
    make_daemon(sd_env, {**QUIET_WATCHER, "SNAPSHOTD_RECORD_PROMPTS": mode})
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "README").write_text("base\n")
    end_of_turn_1 = two_turns(sd_env, wt, f"call the API with {TOKEN} please")

    turns = ok_json(sd_env, "turns", RUN)["turns"]
    assert [t["turn"] for t in turns] == [1, 2]
    assert turns[0]["first_line"] == "add a greeting file"
    assert TOKEN not in json.dumps(turns) and "[redacted:github]" in turns[1]["first_line"]
    assert turns[0]["agent_session"] == SESSION
    labels = [[c["id"] for c in t["tool_calls"]] for t in turns]
    assert labels == [["toolu_t1a", "toolu_t1b"], ["toolu_t2a", "toolu_t2b"]]
    assert {f["path"] for f in turns[1]["files"]} == {"greeting.txt", "extra.txt"}

    listing = ok_json(sd_env, "snapshots", RUN)
    by_tool = {c["tool_use_id"]: c["turn"] for c in listing["checkpoints"] if c["tool_use_id"]}
    assert by_tool == {"toolu_t1a": 1, "toolu_t1b": 1, "toolu_t2a": 2, "toolu_t2b": 2}
    assert [t["turn"] for t in listing["turns"]] == [1, 2]
    text = cli(sd_env, "snapshots", RUN)
    assert "turn 1: add a greeting file" in text.stdout, text.stdout

    runs = cli(sd_env, "runs").stdout  # the session waits for its user: idle, not active
    assert "idle=1" in runs and "active=" not in runs, runs

    log = ok_json(sd_env, "log", RUN)["entries"]
    assert {e["tool_use_id"]: e["turn"] for e in log if e["tool_use_id"]} == by_tool
    seq = next(c["seq"] for c in listing["checkpoints"] if c["tool_use_id"] == "toolu_t2a")
    assert ok_json(sd_env, "show", RUN, "--node", "session", "--seq", str(seq))[
        "checkpoint"]["turn"] == 2
    # A run with one node (every zero-setup session) needs no --node.
    assert "turn 2" in cli(sd_env, "show", RUN, "--seq", str(seq)).stdout
    for args in (("diff", RUN, "--seq", str(seq)), ("blame", RUN, "greeting.txt")):
        proc = cli(sd_env, *args)
        assert proc.returncode == 0, proc.stderr
    assert ok_json(sd_env, "blame", RUN, "greeting.txt")["turn"] == 2
    found = ok_json(sd_env, "find", "extra.txt", "--cwd", str(wt))["checkpoints"]
    assert [c["turn"] for c in found] == [2]

    proc = cli(sd_env, "restore", RUN, "--before-turn", "2")
    assert proc.returncode == 0, proc.stderr
    assert tree_of(wt) == end_of_turn_1
    assert f"claude --resume {SESSION}" in proc.stdout, proc.stdout
    assert "undo with" in proc.stdout

    proc = cli(sd_env, "restore", RUN, "--after-turn", "2")
    assert proc.returncode == 0, proc.stderr
    assert (wt / "extra.txt").read_text() == "extra\n"

    proc = cli(sd_env, "restore", RUN, "--before-turn", "3")
    assert proc.returncode == 1 and "turn 3" in proc.stderr


def test_record_prompts_false_keeps_no_prompt_text(sd_env: Env, make_daemon: MakeDaemon,
                                                    tmp_path: Path) -> None:
    make_daemon(sd_env, {**QUIET_WATCHER, "SNAPSHOTD_RECORD_PROMPTS": "false"})
    wt = make_git_worktree(tmp_path / "proj")
    marker = "zebracorn-" + "quux-" * 3
    two_turns(sd_env, wt, f"{marker} the second prompt")
    turns = ok_json(sd_env, "turns", RUN)["turns"]
    assert [(t["turn"], t["first_line"]) for t in turns] == [(1, None), (2, None)]
    assert all(t["started_at"] for t in turns)
    home = sd_env.home
    found = [p for p in home.rglob("*") if p.is_file() and marker.encode() in p.read_bytes()]
    assert not found
    objects = subprocess.run(["git", "--git-dir", str(home / "store.git"), "cat-file",
                              "--batch-all-objects", "--batch"], capture_output=True, check=True)
    assert objects.stdout and marker.encode() not in objects.stdout
    assert b"add a greeting file" not in objects.stdout
