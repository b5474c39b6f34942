"""The guard checkpoint: before a destructive command the daemon takes an ordinary checkpoint
(source ``guard``) and keeps the worktree's ignored files, within budget, on a local ref."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, make_git_worktree, run_hook
from tests.support.helpers import git
from tests.support.review_replay import cli

pytestmark = pytest.mark.one_ledger("the kept files are in the store; the checkpoint is a capture")

SECRET = b"API_KEY=sk-live-0123456789abcdef0123456789abcdef\n"
COMMAND = "rm -rf build .env.local && git clean -fdx"


def bash(wt: Path, tool_use_id: str, command: str, event: str = "PreToolUse") -> dict:
    """Claude Code's hook payload for a Bash tool call (tests/fixtures/claude-code shape)."""
    return {"session_id": "sess-1", "cwd": str(wt), "hook_event_name": event,
            "permission_mode": "bypassPermissions", "tool_name": "Bash",
            "tool_input": {"command": command, "description": "clean up"},
            "tool_use_id": tool_use_id}


def project(root: Path) -> Path:
    """A repository with tracked files, ignored files, a dependency folder and a large file."""
    wt = make_git_worktree(root / "wt")
    (wt / ".gitignore").write_text(".env.local\nbuild/\nnode_modules/\n*.db\n")
    (wt / "src").mkdir()
    (wt / "src" / "app.py").write_text("print('app')\n")
    (wt / ".env.local").write_bytes(SECRET)
    (wt / "dev.db").write_bytes(b"\x00db" * 100)
    (wt / "src" / "cache.db").write_bytes(b"nested")
    (wt / "huge.db").write_bytes(b"x" * 5000)
    (wt / "build").mkdir()
    (wt / "build" / "out.o").write_bytes(b"\x7fELF")
    (wt / "node_modules" / "left").mkdir(parents=True)
    (wt / "node_modules" / "left" / "index.js").write_text("module.exports = 1\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "start")
    return wt


def store_git(env: Env, *args: str) -> str:
    return git(env.home, "--git-dir", str(env.home / "store.git"), *args)


def guard_status(env: Env) -> dict:
    proc = cli(env, "status", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["guard"]


def test_a_destructive_command_gets_a_guard_checkpoint_with_its_ignored_files(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = project(tmp_path)
    make_daemon(sd_env, dict(QUIET_WATCHER, SNAPSHOTD_GUARD_MAX_FILE_BYTES="1000"))
    assert run_hook(sd_env, bash(wt, "toolu_ls", "ls -la")).returncode == 0
    assert guard_status(sd_env)["checkpoints"] == 0
    assert run_hook(sd_env, bash(wt, "toolu_rm", COMMAND)).returncode == 0

    listed = json.loads(cli(sd_env, "snapshots", "claude-sess-1", "--json").stdout)
    guards = [c for c in listed["checkpoints"] if c["source"] == "guard"]
    assert len(guards) == 1
    assert "toolu_rm" in guards[0]["label"] and "rm -r" in guards[0]["label"]
    assert "git clean" in guards[0]["label"]
    ref = "refs/snapshotd-local/guard/claude-sess-1/session/0/1"
    kept = store_git(sd_env, "ls-tree", "-r", "--name-only", ref).split()
    assert sorted(kept) == [".env.local", "dev.db", "src/cache.db"]
    assert store_git(sd_env, "cat-file", "blob", f"{ref}:.env.local").encode() == SECRET
    message = store_git(sd_env, "log", "-1", "--format=%B", ref)
    assert "build/: dependency-folder" in message
    assert "node_modules/: dependency-folder" in message
    assert "huge.db: too-large" in message
    assert f"Guard-Seq: {guards[0]['seq']}" in message
    # Kept files are not a checkpoint's: the attempt's chain never holds them.
    tracked = store_git(sd_env, "ls-tree", "-r", "--name-only", "refs/snapshotd/runs/"
                        "claude-sess-1/session/0/1").split()
    assert ".env.local" not in tracked and "src/app.py" in tracked
    counts = guard_status(sd_env)
    assert counts["enabled"] is True
    assert counts["agents"] == ["claude", "codex", "qwen", "gemini"]
    assert counts["commands"] == 2 and counts["destructive"] == 1
    assert counts["checkpoints"] == 1 and counts["ignored_kept"] == 3
    assert counts["failed"] == 0
    assert sd_env.read_gaps() == []


def test_dependency_folders_are_kept_when_configured(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = project(tmp_path)
    make_daemon(sd_env, dict(QUIET_WATCHER, SNAPSHOTD_GUARD_KEEP_DIRS="build"))
    assert run_hook(sd_env, bash(wt, "toolu_rm", "git clean -fdx")).returncode == 0
    ref = "refs/snapshotd-local/guard/claude-sess-1/session/0/1"
    kept = store_git(sd_env, "ls-tree", "-r", "--name-only", ref).split()
    assert "build/out.o" in kept and "huge.db" in kept
    assert not [k for k in kept if k.startswith("node_modules/")]


def test_guard_off_takes_nothing(sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = project(tmp_path)
    make_daemon(sd_env, dict(QUIET_WATCHER, SNAPSHOTD_GUARD="false"))
    assert run_hook(sd_env, bash(wt, "toolu_rm", COMMAND)).returncode == 0
    assert store_git(sd_env, "for-each-ref", "refs/snapshotd-local/") == ""
    counts = guard_status(sd_env)
    assert counts["enabled"] is False and counts["commands"] == 0 and counts["agents"] == []


def test_kept_objects_are_private(sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = project(tmp_path)
    make_daemon(sd_env, QUIET_WATCHER)
    assert run_hook(sd_env, bash(wt, "toolu_rm", COMMAND)).returncode == 0
    blob = store_git(sd_env, "rev-parse",
                     "refs/snapshotd-local/guard/claude-sess-1/session/0/1:.env.local").strip()
    loose = sd_env.home / "store.git" / "objects" / blob[:2] / blob[2:]
    assert loose.is_file()
    assert os.stat(loose).st_mode & 0o077 == 0


def test_deleting_a_run_drops_its_kept_files(sd_env: Env, tmp_path: Path,
                                             make_daemon: MakeDaemon) -> None:
    wt = project(tmp_path)
    make_daemon(sd_env, QUIET_WATCHER)
    begun = cli(sd_env, "attempt", "begin", "--run", "r1", "--node", "n", "--cwd", str(wt))
    assert begun.returncode == 0, begun.stderr
    proc = run_hook(sd_env, bash(wt, "toolu_rm", COMMAND), SNAPSHOTD_RUN_ID="r1",
                    SNAPSHOTD_NODE_ID="n")
    assert proc.returncode == 0
    ref = "refs/snapshotd-local/guard/r1/n/0/1"
    assert store_git(sd_env, "for-each-ref", "--format=%(refname)", ref).strip() == ref
    ended = cli(sd_env, "attempt", "end", "--run", "r1", "--node", "n", "--status", "finished")
    assert ended.returncode == 0, ended.stderr
    gone = cli(sd_env, "gc", "--run", "r1", "--all")
    assert gone.returncode == 0, gone.stderr
    assert store_git(sd_env, "for-each-ref", "refs/snapshotd-local/") == ""


SHIPPED = {"claude": "hooks/hooks.json", "codex": "contrib/codex/hooks.json",
           "qwen": "contrib/qwen/settings.json", "gemini": "contrib/gemini/settings.json"}


def test_the_guarded_agents_are_those_whose_settings_send_a_before_tool_event() -> None:
    from snapshotd.features.guard.guard import GUARDED_AGENTS

    root = Path(__file__).resolve().parents[3]
    assert set(GUARDED_AGENTS) == set(SHIPPED)
    for agent, path in SHIPPED.items():
        text = (root / path).read_text()
        assert '"PreToolUse"' in text or '"BeforeTool"' in text, agent
    for other in (root / "contrib").iterdir():
        if other.name in SHIPPED or not other.is_dir():
            continue
        for f in other.rglob("*"):
            if f.is_file():
                text = f.read_text(errors="replace")
                assert "PreToolUse" not in text and "BeforeTool" not in text, f


@pytest.mark.parametrize("agent", ["gemini", "codex", "qwen"])
def test_each_guarded_agents_before_tool_event_takes_the_guard(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon, agent: str) -> None:
    from tests.features.guard.test_commands import codex, gemini, qwen

    wt = project(tmp_path)
    make_daemon(sd_env, QUIET_WATCHER)
    payload = {"gemini": gemini, "codex": codex, "qwen": qwen}[agent](wt, COMMAND)
    assert run_hook(sd_env, payload).returncode == 0
    runs = json.loads(cli(sd_env, "runs", "--json").stdout)["runs"]
    [run] = [r["run_id"] for r in runs]
    assert run.startswith(agent + "-")
    listed = json.loads(cli(sd_env, "snapshots", run, "--json").stdout)
    assert [c["source"] for c in listed["checkpoints"]] == ["guard"]
    ref = f"refs/snapshotd-local/guard/{run}/session/0/1"
    assert ".env.local" in store_git(sd_env, "ls-tree", "-r", "--name-only", ref).split()
