"""The three agent CLIs end to end: their real hook payloads (tests/fixtures) replayed through
the real ``snapshot-hook`` against a real daemon, with the tool's file effects applied in between,
must give checkpoints attributed to ``<agent>-<session>`` and labelled by the tool call; and a
hook with no daemon running starts exactly one, even when eight race."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from snapshotd_client import Client
from tests.conftest import (
    QUIET_WATCHER,
    Daemon,
    Env,
    MakeDaemon,
    claude_payload,
    git,
    load_payloads,
    make_git_worktree,
    run_hook,
)
from tests.support.helpers import daemons_under, stop_daemons_under, wait_for

pytestmark = pytest.mark.one_ledger("hook payload parsing and attribution of each agent")

Effect = Callable[[Path], None]


# Tier 2 (the watcher) would add its own checkpoints whenever writes go quiet for 200 ms; these
# tests count the tier-1 ones exactly, so the ``daemon`` fixture (conftest) runs with
# QUIET_WATCHER, a settle window longer than a test.


def listing(env: Env, run_id: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", run_id, "--json"],
                         env=env.environ(), capture_output=True, check=True)
    return json.loads(out.stdout)


def show(env: Env, commit: str, path: str) -> str:
    return git(env.home, "--git-dir", str(env.home / "store.git"), "show", f"{commit}:{path}")


def files_at(env: Env, commit: str) -> set[str]:
    out = git(env.home, "--git-dir", str(env.home / "store.git"), "ls-tree", "-r",
              "--name-only", commit)
    return set(out.split())


def localize(value: object, harness_proj: str, worktree: Path) -> object:
    """The fixture with its recorded project dir replaced by the test's worktree."""
    if isinstance(value, str):
        return value.replace(harness_proj, str(worktree))
    if isinstance(value, dict):
        return {k: localize(v, harness_proj, worktree) for k, v in value.items()}
    if isinstance(value, list):
        return [localize(v, harness_proj, worktree) for v in value]
    return value


def write(rel: str, text: str, *, append: bool = False) -> Effect:
    def effect(wt: Path) -> None:
        path = wt / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a" if append else "w") as f:
            f.write(text)
    return effect


def replace(rel: str, old: str, new: str) -> Effect:
    def effect(wt: Path) -> None:
        path = wt / rel
        path.write_text(path.read_text().replace(old, new))
    return effect


def nothing(_wt: Path) -> None:
    pass


def replay(env: Env, payloads: list[dict], effects: list[Effect], wt: Path,
           **hook_env: str) -> None:
    """Apply each tool call's effect, then run the hook with its payload (as the agent does)."""
    assert len(payloads) == len(effects)
    for payload, effect in zip(payloads, effects, strict=True):
        effect(wt)
        result = run_hook(env, payload, **hook_env)
        assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def fixture_session(relative: str, harness_run: str) -> list[dict]:
    return [p for p in load_payloads(relative) if f"/runs/{harness_run}/" in p["cwd"]]


# -- Claude Code --------------------------------------------------------------------------------


def test_claude_code_payloads_give_labelled_checkpoints(sd_env: Env, daemon: Daemon,
                                                        tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    raw = load_payloads("claude-code/post-tool-use.ndjson")
    payloads = [localize(p, "<harness>/runs/canonical/proj", wt) for p in raw]
    replay(sd_env, payloads, [
        write("hello.txt", "hi\n"),
        lambda w: (write("hello.txt", "more\n", append=True)(w), write("sub/y.txt", "x\n")(w)),
        replace("hello.txt", "hi", "hello"),
    ], wt, CLAUDE_PROJECT_DIR=str(wt))

    session = raw[0]["session_id"]
    cps = listing(sd_env, f"claude-{session}")["checkpoints"]
    assert [c["seq"] for c in cps] == [0, 1, 2]
    assert [c["tool_use_id"] for c in cps] == [p["tool_use_id"] for p in raw]
    assert {(c["node_id"], c["iteration"], c["attempt"], c["source"], c["tier"])
            for c in cps} == {("session", 0, 1, "hook", 1)}
    assert [c["label"] for c in cps] == [
        "Write hello.txt",  # named relative to the worktree (issue 43)
        "Bash echo more >> hello.txt && mkdir -p sub && echo x > sub/y.txt",
        "Edit hello.txt",
    ]
    assert all(c["worktree"] == str(wt) for c in cps)
    assert show(sd_env, cps[0]["commit"], "hello.txt") == "hi\n"
    assert files_at(sd_env, cps[1]["commit"]) == {"hello.txt", "sub/y.txt"}
    assert show(sd_env, cps[2]["commit"], "hello.txt") == "hello\nmore\n"


def test_claude_code_failure_event_is_captured(sd_env: Env, daemon: Daemon,
                                               tmp_path: Path) -> None:
    # A Bash command that wrote a file and exited 3 fires only PostToolUseFailure.
    wt = make_git_worktree(tmp_path / "proj")
    raw = load_payloads("claude-code/post-tool-use-failure.ndjson")
    assert raw[0]["hook_event_name"] == "PostToolUseFailure" and "tool_response" not in raw[0]
    payloads = [localize(p, "<harness>/runs/failures/proj", wt) for p in raw]
    replay(sd_env, payloads, [write("z.txt", "z\n"), write("w.txt", "w\n")], wt,
           CLAUDE_PROJECT_DIR=str(wt))
    cps = listing(sd_env, f"claude-{raw[0]['session_id']}")["checkpoints"]
    assert [(c["seq"], c["tool_use_id"], c["label"]) for c in cps] == [
        (0, raw[0]["tool_use_id"], "Bash echo z > z.txt; exit 3"),
        (1, raw[1]["tool_use_id"], "Write w.txt"),
    ]
    assert files_at(sd_env, cps[0]["commit"]) == {"z.txt"}
    assert files_at(sd_env, cps[1]["commit"]) == {"z.txt", "w.txt"}


# -- Codex ----------------------------------------------------------------------------------------


def test_codex_payloads_give_labelled_checkpoints(sd_env: Env, daemon: Daemon,
                                                  tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    raw = fixture_session("codex/post-tool-use.ndjson", "canonical")
    payloads = [localize(p, "<harness>/runs/canonical/proj", wt) for p in raw]
    replay(sd_env, payloads, [
        write("hello.txt", "hi\n"),
        lambda w: (write("hello.txt", "hello world\n")(w), write("added.txt", "added\n")(w)),
        write("failed.txt", "partial\n"),  # exited 3: Codex still sends a plain PostToolUse
    ], wt)
    cps = listing(sd_env, f"codex-{raw[0]['session_id']}")["checkpoints"]
    assert [(c["seq"], c["tool_use_id"], c["label"]) for c in cps] == [
        (0, "call_shell_ok", "Bash echo hi > hello.txt"),
        (1, "call_patch", "apply_patch hello.txt, added.txt"),
        (2, "call_shell_fail",
         "Bash echo to-stdout; echo to-stderr >&2; echo partial > failed.txt; exit 3"),
    ]
    assert all((c["node_id"], c["attempt"], c["worktree"]) == ("session", 1, str(wt))
               for c in cps)
    assert show(sd_env, cps[1]["commit"], "hello.txt") == "hello world\n"
    assert files_at(sd_env, cps[2]["commit"]) == {"hello.txt", "added.txt", "failed.txt"}


def test_codex_parallel_calls_and_background_command(sd_env: Env, daemon: Daemon,
                                                     tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    raw = fixture_session("codex/post-tool-use.ndjson", "extended")
    a, b, bg = (localize(p, "<harness>/runs/extended/proj", wt) for p in raw)
    # Two parallel calls: both files exist before either hook runs; their hooks race.
    write("a.txt", "a\n")(wt)
    write("b.txt", "b\n")(wt)
    procs = [subprocess.Popen(
        [sys.executable, "-c", "from snapshotd_client.hook import main; main()"],
        stdin=subprocess.PIPE, env=sd_env.environ()) for _ in (a, b)]
    for proc, payload in zip(procs, (a, b), strict=True):
        proc.communicate(json.dumps(payload).encode(), timeout=30)
        assert proc.returncode == 0
    replay(sd_env, [bg], [write("late.txt", "late\n")], wt)
    data = listing(sd_env, f"codex-{raw[0]['session_id']}")
    assert data["gaps"] == []
    cps = data["checkpoints"]
    # One checkpoint holds both parallel writes (the second capture is deduplicated onto it).
    assert [c["seq"] for c in cps] == [0, 1]
    assert files_at(sd_env, cps[0]["commit"]) == {"a.txt", "b.txt"}
    assert cps[0]["tool_use_id"] in ("call_par_a", "call_par_b")
    assert (cps[1]["tool_use_id"], files_at(sd_env, cps[1]["commit"])) == (
        "call_bg", {"a.txt", "b.txt", "late.txt"})
    # The deduplicated call still maps to the seq that holds its state: replaying it is a repeat.
    with daemon.client() as c:
        again = c.snapshot(wt, source="hook", tool_use_id="call_par_a")
        assert again["seq"] == 0 and again.get("repeated") is True


# -- Gemini CLI -----------------------------------------------------------------------------------


def gemini_env(wt: Path, session: str) -> dict[str, str]:
    return {"GEMINI_PROJECT_DIR": str(wt), "CLAUDE_PROJECT_DIR": str(wt),
            "GEMINI_SESSION_ID": session, "GEMINI_CWD": str(wt)}


def test_gemini_payloads_give_labelled_checkpoints(sd_env: Env, daemon: Daemon,
                                                   tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    raw = fixture_session("gemini/after-tool.ndjson", "final-basic")
    payloads = [localize(p, "<harness>/runs/final-basic/proj", wt) for p in raw]
    session = raw[0]["session_id"]
    replay(sd_env, payloads, [
        write("hello.txt", "hello world\n"),
        replace("hello.txt", "hello world", "hello harness"),
        write("shell_out.txt", "from-shell\n"),  # exited 3: AfterTool fires normally
    ], wt, **gemini_env(wt, session))
    cps = listing(sd_env, f"gemini-{session}")["checkpoints"]
    assert [c["label"] for c in cps] == [
        "write_file hello.txt", "replace hello.txt",
        "run_shell_command " + raw[2]["tool_input"]["command"]]
    ids = [c["tool_use_id"] for c in cps]
    assert all(i.startswith("gemini-") for i in ids) and len(set(ids)) == 3
    assert show(sd_env, cps[1]["commit"], "hello.txt") == "hello harness\n"
    assert files_at(sd_env, cps[2]["commit"]) == {"hello.txt", "shell_out.txt"}

    # Gemini has no tool call id: a retried hook for the same call derives the same one and
    # creates nothing, even though the tree has changed since.
    write("later.txt", "later\n")(wt)
    replay(sd_env, [payloads[0]], [nothing], wt, **gemini_env(wt, session))
    assert len(listing(sd_env, f"gemini-{session}")["checkpoints"]) == 3


def test_gemini_failed_replace_and_relative_paths(sd_env: Env, daemon: Daemon,
                                                  tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    raw = fixture_session("gemini/after-tool.ndjson", "final-edge")
    payloads = [localize(p, "<harness>/runs/final-edge/proj", wt) for p in raw]
    session = raw[0]["session_id"]
    replay(sd_env, payloads, [
        write("a.txt", "A\n"), write("sub/b.txt", "B\n"),
        nothing,  # the replace failed: nothing changed, so no new seq
        write("ok_shell.txt", ""),
    ], wt, **gemini_env(wt, session))
    data = listing(sd_env, f"gemini-{session}")
    assert data["gaps"] == []
    cps = data["checkpoints"]
    assert [(c["seq"], c["label"]) for c in cps] == [
        (0, "write_file a.txt"), (1, "write_file sub/b.txt"),
        (2, "run_shell_command touch ok_shell.txt && echo fine")]
    assert files_at(sd_env, cps[2]["commit"]) == {"a.txt", "sub/b.txt", "ok_shell.txt"}


# -- no attribution at all ---------------------------------------------------------------------


def test_payload_with_nothing_to_go_on_gives_a_checkpoint_or_a_gap(sd_env: Env, daemon: Daemon,
                                                                   tmp_path: Path) -> None:
    # No SNAPSHOTD_* env, no project dir variable, no registered worktree: the session names
    # the run, the payload's cwd is the worktree.
    loose = tmp_path / "loose"
    loose.mkdir()
    (loose / "f.txt").write_text("f\n")
    payload = {"session_id": "orphan-1", "cwd": str(loose), "hook_event_name": "PostToolUse",
               "tool_name": "Write", "tool_input": {"file_path": str(loose / "f.txt")},
               "tool_use_id": "toolu_orphan"}
    result = run_hook(sd_env, payload)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    [cp] = listing(sd_env, "claude-orphan-1")["checkpoints"]
    assert (cp["worktree"], cp["tool_use_id"]) == (str(loose), "toolu_orphan")

    # No session id at all, and a cwd the daemon must refuse to adopt: a gap, never a crash.
    bare = {"cwd": "/", "hook_event_name": "PostToolUse", "tool_name": "Bash",
            "tool_input": {"command": "true"}, "tool_use_id": "toolu_root"}
    result = run_hook(sd_env, bare)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    [gap] = [g for g in sd_env.read_gaps() if g["tool_use_id"] == "toolu_root"]
    assert gap["reason"] == "worktree-refused" and gap["run_id"] == "claude-unknown"
    assert daemon.ping()


# -- start on first use ---------------------------------------------------------------------------


def test_eight_racing_hooks_start_exactly_one_daemon(sd_env: Env, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "main.py").write_text("print('hi')\n")
    env = sd_env.environ(CLAUDE_PROJECT_DIR=str(wt), SNAPSHOTD_HOOK_TIMEOUT_MS="30000")
    env.pop("SNAPSHOTD_AUTOSTART")  # unset means on
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    assert daemons_under(sd_env.home) == []
    procs: list[subprocess.Popen] = []
    try:
        for _ in range(8):
            proc = subprocess.Popen(["snapshot-hook"], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
            procs.append(proc)
        payloads = [claude_payload(wt, f"toolu_race_{i}", session_id="race") for i in range(8)]
        for proc, payload in zip(procs, payloads, strict=True):
            proc.stdin.write(json.dumps(payload).encode())
            proc.stdin.close()
            proc.stdin = None  # communicate() must not flush it again
        for proc in procs:
            # communicate() returns only when every holder of the pipes closed them: a daemon
            # that inherited them would hang here.
            out, err = proc.communicate(timeout=60)
            assert (proc.returncode, out, err) == (0, b"", b"")

        assert not sd_env.gaps.exists() or sd_env.read_gaps() == []
        # Losers of the start race exit on their own; exactly one daemon is left serving.
        wait_for(lambda: len(daemons_under(sd_env.home)) == 1, what="the losers to exit")
        [survivor] = daemons_under(sd_env.home)
        lock_pid = int((sd_env.home / "daemon.lock").read_text().split()[0])
        assert survivor.pid == lock_pid
        assert survivor.ppid() != os.getpid()  # detached: not a child of ours
        with Client(sd_env.socket, timeout=30) as c:
            assert c.ping()["pid"] == lock_pid
            # Every one of the 8 tool calls is on record (a repeat returns its original seq).
            for i in range(8):
                again = c.snapshot(wt, source="hook", tool_use_id=f"toolu_race_{i}")
                assert again.get("repeated") is True, i
        data = listing(sd_env, "claude-race")
        assert data["gaps"] == []
        # One tree, captured once; the other captures were deduplicated onto it.
        assert {c["tree"] for c in data["checkpoints"]} == {data["checkpoints"][0]["tree"]}
        assert [c["seq"] for c in data["checkpoints"]] == [0]
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        stop_daemons_under(sd_env.home)
    assert daemons_under(sd_env.home) == []


def test_first_hook_of_a_session_starts_the_daemon(sd_env: Env, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    # The autostarted daemon inherits the hook's environment: a long settle window keeps a
    # tier-2 capture from landing between the hooks (the second would then be a dedup onto it).
    env = sd_env.environ(CLAUDE_PROJECT_DIR=str(wt), SNAPSHOTD_HOOK_TIMEOUT_MS="30000",
                         SNAPSHOTD_AUTOSTART="1", **QUIET_WATCHER)
    # The autostarted daemon is stopped at teardown with every daemon under the test's homes.
    for i in range(2):
        (wt / "a.txt").write_text(f"a{i}\n")
        proc = subprocess.run(
            [sys.executable, "-c", "from snapshotd_client.hook import main; main()"],
            input=json.dumps(claude_payload(wt, f"toolu_{i}", session_id="first")).encode(),
            env=env, capture_output=True, timeout=60)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert len(daemons_under(sd_env.home)) == 1  # the second hook found the first's daemon
    data = listing(sd_env, "claude-first")
    assert data["gaps"] == []
    hooked = [c for c in data["checkpoints"] if c["source"] == "hook"]
    assert [c["tool_use_id"] for c in hooked] == ["toolu_0", "toolu_1"]


def test_hook_that_loses_the_start_race_waits_for_the_winner(sd_env: Env, tmp_path: Path,
                                                             monkeypatch,
                                                             make_daemon: MakeDaemon) -> None:
    # The winner holds the home's lock but is still opening its store when the daemon this hook
    # started gives up on the lock and exits: the hook must keep waiting for the winner's
    # socket rather than write a gap.
    import fcntl
    import threading

    from snapshotd_client.hook import try_autostart

    for key, value in sd_env.environ().items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("SNAPSHOTD_AUTOSTART")
    sd_env.home.mkdir(mode=0o700, parents=True)
    lock_fd = os.open(sd_env.home / "daemon.lock", os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.write(lock_fd, f"{os.getpid()}\n".encode())
    outcome: list[bool] = []
    hook = threading.Thread(target=lambda: outcome.append(
        try_autostart(str(sd_env.socket), time.monotonic() + 30)))
    winner = make_daemon(sd_env, start=False)
    try:
        hook.start()
        # Wait until the daemon the hook spawned has lost on the lock and exited.
        start, seen = time.monotonic(), False
        while time.monotonic() < start + 15:
            if daemons_under(sd_env.home):
                seen = True
            elif seen or time.monotonic() > start + 4:
                break
            time.sleep(0.05)
        # Let time pass: the hook polls every 20 ms and has seen its daemon exit by now.
        time.sleep(0.2)
        assert hook.is_alive(), "the hook gave up while the lock holder was still starting"
        os.close(lock_fd)  # the "winner" hands over to a real daemon, which now binds
        lock_fd = -1
        winner.start()
        hook.join(timeout=30)
        assert outcome == [True]
    finally:
        if lock_fd >= 0:
            os.close(lock_fd)
        hook.join(timeout=30)  # the winner and any daemon of the home are stopped at teardown
