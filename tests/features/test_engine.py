"""The thin engine end to end: ``snapshotd exec`` around a fake agent that edits files and runs
the real ``snapshot-hook``; attempts begun and ended from the command line; fencing of superseded
attempts; abandonment when the owner process dies; ``--resume``. Real daemon, real git store;
the ledger is read back with the backend's own driver, the store with the git CLI."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from snapshotd.features.engine import ALIVE, GONE, ZOMBIE, owner_state
from tests.conftest import (
    Daemon,
    Env,
    claude_payload,
    git,
    make_git_worktree,
    run_hook,
)
from tests.support.helpers import wait_for

FAKE_AGENT = textwrap.dedent("""
    # A stand-in for a coding agent: each "tool call" writes a file, then runs the after-tool
    # hook with a Claude-shaped payload, exactly as Claude Code would.
    import json, os, subprocess, sys, time
    steps, code, report = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    cwd = os.getcwd()
    seen = {k: v for k, v in os.environ.items() if k.startswith("SNAPSHOTD_")}
    seen["pid"] = os.getpid()
    seen["files_at_start"] = {n: open(n).read() for n in sorted(os.listdir(cwd))
                              if n.endswith(".txt")}
    for i in range(steps):
        path = os.path.join(cwd, f"file{i}.txt")
        with open(path, "w") as f:
            f.write(f"step {i}\\n")
        payload = {"session_id": "fake-session", "cwd": cwd, "hook_event_name": "PostToolUse",
                   "tool_name": "Write", "tool_input": {"file_path": path, "content": "x"},
                   "tool_response": {"type": "create"}, "tool_use_id": f"toolu_fake_{i}"}
        subprocess.run(["snapshot-hook"], input=json.dumps(payload).encode(), check=True)
    # Written after the last hook: only the capture `exec` takes when we exit holds it.
    with open(os.path.join(cwd, "after-last-hook.txt"), "w") as f:
        f.write("tail\\n")
    # Written whole, then renamed: a test polling for the report never reads half of it.
    with open(report + ".tmp", "w") as f:
        json.dump(seen, f)
    os.replace(report + ".tmp", report)
    if os.environ.get("FAKE_AGENT_HANG"):
        time.sleep(120)
    sys.exit(code)
""")


# Tier 2 (the watcher) would add its own checkpoints whenever writes go quiet for 200 ms; these
# tests count the tier-1 ones exactly, so the ``daemon`` fixture (conftest) runs with
# QUIET_WATCHER, a settle window longer than a test.


@pytest.fixture
def agent(tmp_path: Path) -> Path:
    path = tmp_path / "fake_agent.py"
    path.write_text(FAKE_AGENT)
    return path


def cli_env(env: Env, **extra: str) -> dict[str, str]:
    out = env.environ(**extra)
    # The fake agent finds `snapshot-hook` where an installed one would be: on PATH.
    out["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{out.get('PATH', '')}"
    return out


def snapshotd(env: Env, *args: str, check: bool = True,
              **extra: str) -> subprocess.CompletedProcess:
    result = subprocess.run([sys.executable, "-m", "snapshotd", *args], env=cli_env(env, **extra),
                            capture_output=True, stdin=subprocess.DEVNULL, timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"snapshotd {args} exited {result.returncode}: "
                             f"{result.stderr.decode()}")
    return result


def listing(env: Env, run_id: str) -> dict:
    return json.loads(snapshotd(env, "snapshots", run_id, "--json").stdout)


def attempt_rows(env: Env, run_id: str) -> list[dict]:
    return env.ledger_query("SELECT * FROM attempts WHERE run_id=? ORDER BY attempt", (run_id,))


def status(env: Env) -> dict:
    return json.loads(snapshotd(env, "status", "--json").stdout)


def store_git(env: Env, *args: str) -> str:
    return git(env.home, "--git-dir", str(env.home / "store.git"), *args)


def files_at(env: Env, commit: str) -> dict[str, str]:
    names = store_git(env, "ls-tree", "-r", "--name-only", commit).split()
    return {n: store_git(env, "show", f"{commit}:{n}") for n in names}


def worktree_files(wt: Path) -> dict[str, str]:
    return {str(p.relative_to(wt)): p.read_text() for p in sorted(wt.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(wt).parts}


def run_exec(env: Env, wt: Path, agent: Path, steps: int, code: int, report: Path,
             *extra: str, run: str = "run-1", node: str = "implement",
             **env_extra: str) -> subprocess.CompletedProcess:
    return snapshotd(env, "exec", "--run", run, "--node", node, "--cwd", str(wt), *extra, "--",
                     sys.executable, str(agent), str(steps), str(code), str(report),
                     check=False, **env_extra)


# -- exec ---------------------------------------------------------------------------------------


def test_exec_runs_the_agent_in_an_attempt_that_ends_finished(sd_env: Env, daemon: Daemon,
                                                              agent: Path, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    report = tmp_path / "seen.json"
    result = run_exec(sd_env, wt, agent, 3, 0, report)
    assert result.returncode == 0, result.stderr.decode()

    seen = json.loads(report.read_text())
    assert {k: seen[k] for k in ("SNAPSHOTD_RUN_ID", "SNAPSHOTD_NODE_ID", "SNAPSHOTD_ITERATION",
                                 "SNAPSHOTD_ATTEMPT")} == {
        "SNAPSHOTD_RUN_ID": "run-1", "SNAPSHOTD_NODE_ID": "implement",
        "SNAPSHOTD_ITERATION": "0", "SNAPSHOTD_ATTEMPT": "1"}
    assert seen["SNAPSHOTD_SOCKET"] == str(sd_env.socket)
    assert Path(seen["SNAPSHOTD_HOME"]) == sd_env.home.resolve()

    cps = listing(sd_env, "run-1")["checkpoints"]
    # One checkpoint per hook, labelled with its tool call, then exec's closing capture.
    assert [(c["seq"], c["tool_use_id"], c["source"]) for c in cps] == [
        (0, "toolu_fake_0", "hook"), (1, "toolu_fake_1", "hook"), (2, "toolu_fake_2", "hook"),
        (3, None, "cli")]
    assert all((c["node_id"], c["attempt"], c["worktree"]) == ("implement", 1, str(wt))
               for c in cps)
    assert cps[0]["label"] == "Write file0.txt"  # relative to the worktree
    assert files_at(sd_env, cps[3]["commit"]) == worktree_files(wt)

    [row] = attempt_rows(sd_env, "run-1")
    assert row["state"] == "finished" and row["ended_at"] is not None
    assert row["owner_pid"] == seen["pid"]  # the agent's own process owned the attempt
    assert row["final_commit"] == cps[-1]["commit"]
    ref = store_git(sd_env, "rev-parse", "refs/snapshotd/runs/run-1/implement/0/1").strip()
    assert ref == row["final_commit"]
    assert status(sd_env)["active_attempts"] == []  # no longer watched


def test_exec_of_a_failing_agent_ends_failed_and_passes_its_status(sd_env: Env, daemon: Daemon,
                                                                   agent: Path,
                                                                   tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    result = run_exec(sd_env, wt, agent, 2, 7, tmp_path / "seen.json")
    assert result.returncode == 7
    cps = listing(sd_env, "run-1")["checkpoints"]
    [row] = attempt_rows(sd_env, "run-1")
    assert row["state"] == "failed"
    assert row["final_commit"] == cps[-1]["commit"]
    assert "after-last-hook.txt" in files_at(sd_env, row["final_commit"])

    # A retry is the next attempt of the node, in its own sequence.
    assert run_exec(sd_env, wt, agent, 1, 0, tmp_path / "seen2.json").returncode == 0
    rows = attempt_rows(sd_env, "run-1")
    assert [(r["attempt"], r["state"]) for r in rows] == [(1, "failed"), (2, "finished")]
    assert [c["seq"] for c in listing(sd_env, "run-1")["checkpoints"] if c["attempt"] == 2] == [0]


def test_exec_forwards_sigterm_and_reports_the_signal(sd_env: Env, daemon: Daemon, agent: Path,
                                                      tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    report = tmp_path / "seen.json"
    cmd = [sys.executable, "-m", "snapshotd", "exec", "--run", "run-1", "--node", "n",
           "--cwd", str(wt), "--", sys.executable, str(agent), "1", "0", str(report)]
    proc = subprocess.Popen(cmd, env=cli_env(sd_env, FAKE_AGENT_HANG="1"),
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    wait_for(lambda: report.exists() or proc.poll() is not None, timeout=60,
             what="the agent to write its report")
    assert report.exists(), proc.stderr.read() if proc.poll() is not None else "agent not up"
    agent_pid = json.loads(report.read_text())["pid"]
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()
    with pytest.raises(ProcessLookupError):
        os.kill(agent_pid, 0)  # the agent got the signal and is gone (and reaped)
    [row] = attempt_rows(sd_env, "run-1")
    assert row["state"] == "cancelled"
    assert row["final_commit"] == listing(sd_env, "run-1")["checkpoints"][-1]["commit"]


def test_exec_of_a_missing_command_exits_127_and_fails_the_attempt(sd_env: Env, daemon: Daemon,
                                                                   tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    result = snapshotd(sd_env, "exec", "--run", "r", "--node", "n", "--cwd", str(wt), "--",
                       "no-such-agent-command-xyz", check=False)
    assert result.returncode == 127
    assert b"no-such-agent-command-xyz" in result.stderr
    assert [r["state"] for r in attempt_rows(sd_env, "r")] == ["failed"]


def test_exec_without_a_daemon_runs_nothing(sd_env: Env, agent: Path, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    report = tmp_path / "seen.json"
    result = run_exec(sd_env, wt, agent, 1, 0, report)  # SNAPSHOTD_AUTOSTART=0, no daemon
    assert result.returncode == 125
    assert b"SNAPSHOTD_AUTOSTART=0" in result.stderr and b"nothing was run" in result.stderr
    assert not report.exists() and not (wt / "file0.txt").exists()


# -- attempt begin / end ----------------------------------------------------------------------


def test_attempt_begin_env_is_shell_safe(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "it's a $dir with spaces")
    out = snapshotd(sd_env, "attempt", "begin", "--run", "r-env", "--node", "n", "--iteration",
                    "2", "--cwd", str(wt), "--env").stdout.decode()
    assert all(line.startswith("export SNAPSHOTD_") for line in out.splitlines())
    shown = subprocess.run(
        ["bash", "-c", 'eval "$1"; printf "%s\\n" "$SNAPSHOTD_RUN_ID" "$SNAPSHOTD_NODE_ID" '
         '"$SNAPSHOTD_ITERATION" "$SNAPSHOTD_ATTEMPT" "$SNAPSHOTD_SOCKET" "$SNAPSHOTD_HOME"',
         "-", out], capture_output=True, check=True, text=True).stdout.splitlines()
    assert shown[:5] == ["r-env", "n", "2", "1", str(sd_env.socket)]
    assert Path(shown[5]) == sd_env.home.resolve()
    assert shlex.split(out.splitlines()[0]) == ["export", "SNAPSHOTD_RUN_ID=r-env"]

    [active] = status(sd_env)["active_attempts"]
    assert (active["run_id"], active["iteration"], active["state"]) == ("r-env", 2, "active")
    assert active["worktree"] == str(wt.resolve())
    ended = json.loads(snapshotd(sd_env, "attempt", "end", "--run", "r-env", "--node", "n",
                                 "--iteration", "2", "--status", "cancelled", "--json").stdout)
    cps = listing(sd_env, "r-env")["checkpoints"]  # the end's flush may have taken one
    assert ended["state"] == "cancelled"
    assert ended["final_commit"] == (cps[-1]["commit"] if cps else None)
    assert status(sd_env)["active_attempts"] == []


def test_fencing_a_superseded_attempt(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("one\n")

    def begin() -> dict:
        return json.loads(snapshotd(sd_env, "attempt", "begin", "--run", "R", "--node", "N",
                                    "--cwd", str(wt), "--json").stdout)

    def hook(tool_use_id: str, attempt: int | None) -> None:
        env = {"SNAPSHOTD_RUN_ID": "R", "SNAPSHOTD_NODE_ID": "N"}
        if attempt is not None:
            env["SNAPSHOTD_ATTEMPT"] = str(attempt)
        result = run_hook(sd_env, claude_payload(wt, tool_use_id), **env)
        assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")

    first = begin()
    hook("toolu_a1", 1)
    second = begin()
    assert second["attempt"] == 2 and second["epoch"] == first["epoch"] + 1
    assert second["superseded"] == ["R/N/0/1"]
    (wt / "a.txt").write_text("two\n")
    hook("toolu_a2", 2)
    ref2 = store_git(sd_env, "rev-parse", "refs/snapshotd/runs/R/N/0/2").strip()
    before = listing(sd_env, "R")["checkpoints"]

    # The old attempt's agent is still running and its hook still names attempt 1.
    (wt / "a.txt").write_text("stale writer\n")
    hook("toolu_stale", 1)
    [gap] = [g for g in sd_env.read_gaps() if g["tool_use_id"] == "toolu_stale"]
    assert (gap["reason"], gap["run_id"], gap["attempt"]) == ("fenced", "R", 1)
    assert listing(sd_env, "R")["checkpoints"] == before
    assert store_git(sd_env, "rev-parse", "refs/snapshotd/runs/R/N/0/2").strip() == ref2
    rows = attempt_rows(sd_env, "R")
    assert [(r["attempt"], r["state"]) for r in rows] == [(1, "superseded"), (2, "active")]
    assert rows[0]["final_commit"] == before[0]["commit"]

    # A hook naming no attempt goes to the active one, never to the fenced one.
    hook("toolu_now", None)
    after = [c for c in listing(sd_env, "R")["checkpoints"] if c["attempt"] == 2]
    assert [(c["seq"], c["tool_use_id"]) for c in after] == [(0, "toolu_a2"), (1, "toolu_now")]


# -- liveness -------------------------------------------------------------------------------------


def wait_until_inactive(env: Env, run_id: str, timeout: float = 15.0) -> None:
    wait_for(lambda: not any(a["run_id"] == run_id for a in status(env)["active_attempts"]),
             timeout=timeout, every=0.2, what=f"{run_id} to be no longer active")


def test_owner_death_abandons_the_attempt(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    owner = subprocess.Popen(["sleep", "300"])
    try:
        snapshotd(sd_env, "attempt", "begin", "--run", "live", "--node", "n", "--cwd", str(wt),
                  "--owner-pid", str(owner.pid))
        result = run_hook(sd_env, claude_payload(wt, "toolu_1"), SNAPSHOTD_RUN_ID="live",
                          SNAPSHOTD_NODE_ID="n")
        assert result.returncode == 0
        # Let time pass: several liveness passes (every 0.5 s); a live owner keeps its attempt.
        time.sleep(1.5)
        info = status(sd_env)
        [active] = info["active_attempts"]
        assert (active["run_id"], active["owner_pid"]) == ("live", owner.pid)
        assert info["engine"]["watched_owners"] == 1
        (wt / "b.txt").write_text("written just before the crash\n")
    finally:
        owner.kill()
        owner.wait()
    wait_until_inactive(sd_env, "live")
    info = status(sd_env)
    assert info["engine"]["watched_owners"] == 0 and info["engine"]["abandoned"] == 1
    [row] = attempt_rows(sd_env, "live")
    assert row["state"] == "abandoned" and row["ended_at"] is not None
    # The daemon's last capture kept what the dead owner left behind.
    cps = listing(sd_env, "live")["checkpoints"]
    assert row["final_commit"] == cps[-1]["commit"]
    assert "b.txt" in files_at(sd_env, row["final_commit"])
    # Its hooks are fenced from now on.
    run_hook(sd_env, claude_payload(wt, "toolu_late"), SNAPSHOTD_RUN_ID="live",
             SNAPSHOTD_NODE_ID="n", SNAPSHOTD_ATTEMPT="1")
    assert [g["reason"] for g in sd_env.read_gaps() if g["tool_use_id"] == "toolu_late"] == [
        "fenced"]


def test_unreaped_owner_is_abandoned_after_the_grace(sd_env: Env, daemon: Daemon,
                                                     tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    owner = subprocess.Popen(["sleep", "300"])
    try:
        snapshotd(sd_env, "attempt", "begin", "--run", "zombie", "--node", "n", "--cwd",
                  str(wt), "--owner-pid", str(owner.pid))
        os.kill(owner.pid, signal.SIGKILL)  # dead, but not reaped: a zombie
        wait_for(lambda: owner_state(owner.pid, time.time()) == ZOMBIE, timeout=10,
                 what="the owner to be a zombie")
        # Within the grace the attempt is kept (`exec` ends its own attempt in that time)...
        time.sleep(1.5)  # let time pass: three liveness passes, well inside the 5 s grace
        assert [a["run_id"] for a in status(sd_env)["active_attempts"]] == ["zombie"]
        # ... after it, a parent that never reaps does not keep the attempt alive forever.
        wait_until_inactive(sd_env, "zombie", timeout=20)
        assert [r["state"] for r in attempt_rows(sd_env, "zombie")] == ["abandoned"]
    finally:
        owner.kill()
        owner.wait()


def test_owner_state_tells_reused_pids_apart() -> None:
    me = os.getpid()
    assert owner_state(me, time.time()) == ALIVE
    # An attempt begun long before this process started cannot be owned by it: pid reuse.
    assert owner_state(me, time.time() - 10 * 365 * 86400) == GONE
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert owner_state(child.pid, time.time()) == GONE


# -- resume -------------------------------------------------------------------------------------


def test_resume_continues_from_the_previous_attempts_last_checkpoint(sd_env: Env, daemon: Daemon,
                                                                     agent: Path,
                                                                     tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / ".gitignore").write_text("*.log\n")
    assert run_exec(sd_env, wt, agent, 2, 1, tmp_path / "first.json").returncode == 1
    last = listing(sd_env, "run-1")["checkpoints"][-1]
    assert last["attempt"] == 1
    expected = files_at(sd_env, last["commit"])

    # The failed attempt left the worktree in a state the retry must not start from.
    (wt / "file0.txt").write_text("mangled\n")
    (wt / "file1.txt").unlink()
    (wt / "junk.txt").write_text("junk\n")
    (wt / "build.log").write_text("ignored, survives\n")

    second = tmp_path / "second.json"
    result = run_exec(sd_env, wt, agent, 0, 0, second, "--resume")
    assert result.returncode == 0, result.stderr.decode()
    seen = json.loads(second.read_text())
    assert seen["SNAPSHOTD_ATTEMPT"] == "2"
    # The agent of attempt 2 started on exactly the files attempt 1 had reached.
    assert seen["files_at_start"] == {k: v for k, v in expected.items() if k.endswith(".txt")}
    assert (wt / "build.log").read_text() == "ignored, survives\n"
    attempt2 = [c for c in listing(sd_env, "run-1")["checkpoints"] if c["attempt"] == 2]
    assert attempt2[0]["seq"] == 0 and attempt2[0]["tree"] == last["tree"]
    assert [r["state"] for r in attempt_rows(sd_env, "run-1")] == ["failed", "finished"]

    # From the command line, as an engine would: the reply says what was restored.
    (wt / "file0.txt").write_text("mangled again\n")
    begun = json.loads(snapshotd(sd_env, "attempt", "begin", "--run", "run-1", "--node",
                                 "implement", "--cwd", str(wt), "--resume", "--json").stdout)
    assert begun["attempt"] == 3
    resumed = begun["resumed_from"]
    assert (resumed["attempt"], resumed["seq"], resumed["commit"]) == (
        2, attempt2[-1]["seq"], attempt2[-1]["commit"])
    assert (wt / "file0.txt").read_text() == expected["file0.txt"]

    # An engine that gives each attempt a fresh worktree gets the state copied into it. Attempt
    # 3 never reached a checkpoint, so the newest attempt that did (2) is the one resumed.
    fresh = tmp_path / "wt-attempt-4"
    fresh.mkdir()
    begun = json.loads(snapshotd(sd_env, "attempt", "begin", "--run", "run-1", "--node",
                                 "implement", "--cwd", str(fresh), "--resume", "--json").stdout)
    assert begun["attempt"] == 4 and begun["resumed_from"]["attempt"] == 2
    assert worktree_files(fresh) == files_at(sd_env, begun["resumed_from"]["commit"])


def test_resume_into_a_fresh_git_worktree_of_its_own(sd_env: Env, daemon: Daemon, agent: Path,
                                                     tmp_path: Path) -> None:
    """An engine that gives each attempt a `git worktree add` (a directory that already holds
    files and .git) gets the state restored in place there: the new attempt's first checkpoint
    is the safety checkpoint of what the directory held, then the resumed tree."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "tracked.txt").write_text("at HEAD\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    assert run_exec(sd_env, wt, agent, 2, 1, tmp_path / "first.json").returncode == 1
    last = listing(sd_env, "run-1")["checkpoints"][-1]
    expected = files_at(sd_env, last["commit"])
    fresh = tmp_path / "wt-2"
    git(wt, "worktree", "add", "-q", "--detach", str(fresh))
    (fresh / "scratch.txt").write_text("made before the resume\n")
    head_before = git(fresh, "rev-parse", "HEAD")
    begun = json.loads(snapshotd(sd_env, "attempt", "begin", "--run", "run-1", "--node",
                                 "implement", "--cwd", str(fresh), "--resume", "--json").stdout)
    assert begun["attempt"] == 2 and begun["resumed_from"]["seq"] == last["seq"]
    assert worktree_files(fresh) == expected
    assert git(fresh, "rev-parse", "HEAD") == head_before  # the user's repository untouched
    cps = [c for c in listing(sd_env, "run-1")["checkpoints"] if c["attempt"] == 2]
    # The safety checkpoint, then the restored state (issue 43: a restore is recorded).
    assert [c["source"] for c in cps] == ["restore", "restore"]
    assert "scratch.txt" in files_at(sd_env, cps[0]["commit"])  # nothing lost: undo has it
    assert files_at(sd_env, cps[1]["commit"]) == expected
    restore = begun["resumed_from"]["restore"]
    assert restore["safety"]["attempt"] == 2 and "--attempt 2" in restore["undo_command"]


def test_resume_with_nothing_to_resume_begins_normally(sd_env: Env, daemon: Daemon,
                                                       tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "keep.txt").write_text("untouched\n")
    begun = json.loads(snapshotd(sd_env, "attempt", "begin", "--run", "fresh", "--node", "n",
                                 "--cwd", str(wt), "--resume", "--json").stdout)
    assert begun["attempt"] == 1 and begun["resumed_from"] is None
    assert (wt / "keep.txt").read_text() == "untouched\n"
