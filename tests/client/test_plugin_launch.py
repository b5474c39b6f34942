"""The plugin's hook command (``hooks/hooks.json``), run as Claude Code runs it: the command
string through a shell (``sh -c`` and ``bash -c``), the payload on stdin, against a real daemon.

It runs ``snapshot-hook-native`` when one is installed on the ``PATH`` (an executable regular
file) and ``snapshot-hook`` otherwise, and in both cases the payload reaches the hook whole and
nothing is printed (but a session start's context line). Which one ran is told by the daemon:
the native program's requests are counted under ``status`` → ``native_hook``, the Python hook's
are not. The native program here is built by ``snapshotd native-hook``'s code and hands over to
the environment's installed ``snapshot-hook``, as ``snapshotd native-hook`` builds it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snapshotd.daemon.native_hook import build
from tests.conftest import Daemon, Env, claude_payload, load_payloads, make_git_worktree

pytestmark = pytest.mark.one_ledger("the plugin's hook command picks its hook")

CC = shutil.which(os.environ.get("CC") or "cc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc) on this machine")
HOOKS = json.loads((Path(__file__).parents[2] / "hooks" / "hooks.json").read_text())["hooks"]
PYTHON_HOOK = Path(sys.executable).parent / "snapshot-hook"
SHELLS = [s for s in ("sh", "bash") if shutil.which(s)]


def command(event: str) -> str:
    return HOOKS[event][0]["hooks"][0]["command"]


@pytest.fixture(scope="module")
def bins(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Directories for the PATH: ``python`` holds snapshot-hook alone; ``native`` holds it and
    a built snapshot-hook-native; ``decoy-dir`` and ``decoy-file`` a snapshot-hook-native that
    is a directory and one that is not executable (neither may be picked)."""
    where = tmp_path_factory.mktemp("launch")
    out = {name: where / name for name in ("python", "native", "decoy-dir", "decoy-file")}
    for path in out.values():
        path.mkdir()
    for name in ("python", "native"):
        (out[name] / "snapshot-hook").symlink_to(PYTHON_HOOK)
    (out["decoy-dir"] / "snapshot-hook-native").mkdir()
    (out["decoy-file"] / "snapshot-hook-native").write_text("#!/bin/sh\necho picked\n")
    if CC is not None:
        build(out["native"] / "snapshot-hook-native", fallback=PYTHON_HOOK)
    return out


def run(shell: str, event: str, env: dict[str, str], path: list[Path], payload: dict,
        cwd: Path) -> subprocess.CompletedProcess:
    env = dict(env, PATH=os.pathsep.join([*map(str, path), "/usr/bin", "/bin"]))
    return subprocess.run([shell, "-c", command(event)], input=json.dumps(payload).encode(),
                          env=env, cwd=cwd, capture_output=True, timeout=60)


def relayed(daemon: Daemon) -> dict:
    with daemon.client() as c:
        return c.status()["native_hook"]


def tool_calls(env: Env, worktree: Path) -> list[str]:
    return [r["tool_use_id"] for r in env.ledger_query(
        "SELECT tool_use_id FROM checkpoints WHERE worktree = ? AND source = 'hook' "
        "ORDER BY created_at", (str(worktree),))]


@needs_cc
@pytest.mark.parametrize("shell", SHELLS)
@pytest.mark.parametrize("installed", ["native", "python-only", "decoys"])
def test_each_tool_call_event_runs_the_native_hook_when_installed(
        sd_env: Env, daemon: Daemon, bins, tmp_path: Path, shell: str, installed: str) -> None:
    path = {"native": [bins["native"]], "python-only": [bins["python"]],
            "decoys": [bins["decoy-dir"], bins["decoy-file"], bins["python"]]}[installed]
    worktree = make_git_worktree(tmp_path / "proj")
    env = sd_env.environ(CLAUDE_PROJECT_DIR=str(worktree))
    start = relayed(daemon)
    for n, event in enumerate(("PreToolUse", "PostToolUse", "PostToolUseFailure")):
        (worktree / "hello.txt").write_text(f"tool call {n}\n")
        payload = claude_payload(worktree, f"toolu_launch_{n}", session_id="launch",
                                 event=event)
        if event == "PreToolUse":
            payload.pop("tool_response")
        proc = run(shell, event, env, path, payload, worktree)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b""), event
    # The payloads arrived whole: each end is its tool call's checkpoint.
    assert tool_calls(sd_env, worktree) == ["toolu_launch_1", "toolu_launch_2"]
    assert sd_env.read_gaps() == []
    now = relayed(daemon)
    ran_native = installed == "native"
    assert now["requests"] - start["requests"] == (3 if ran_native else 0)
    assert now["fallbacks"] == start["fallbacks"]


@needs_cc
@pytest.mark.parametrize("installed", ["native", "python-only"])
def test_a_session_start_still_prints_its_context_line(sd_env: Env, daemon: Daemon, bins,
                                                       tmp_path: Path, installed: str) -> None:
    worktree = make_git_worktree(tmp_path / "proj")
    (payload,) = [dict(p, cwd=str(worktree), session_id="launch-start")
                  for p in load_payloads("claude-code/session-lifecycle.ndjson")
                  if p["hook_event_name"] == "SessionStart"]
    start = relayed(daemon)
    proc = run("sh", "SessionStart", sd_env.environ(CLAUDE_PROJECT_DIR=str(worktree)),
               [bins[installed.split("-")[0]]], payload, worktree)
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert "snapshotd" in json.loads(proc.stdout)["hookSpecificOutput"]["additionalContext"]
    # The native program asked the daemon, which handed the lifecycle event back to Python.
    assert relayed(daemon)["fallbacks"] - start["fallbacks"] == (
        1 if installed == "native" else 0)


def test_every_event_runs_the_same_command() -> None:
    assert {h["command"] for entries in HOOKS.values() for e in entries
            for h in e["hooks"]} == {command("PostToolUse")}
