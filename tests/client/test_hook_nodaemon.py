"""snapshot-hook, Client and wrap against no daemon, a mute daemon and fake daemons that speak the
real framing over real Unix sockets (no mocked sockets)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from snapshotd_client import Client, DaemonUnavailable, SnapshotdError, wrap
from snapshotd_client.client import DaemonTimeout
from snapshotd_client.gaps import read_gaps
from snapshotd_client.hook import try_autostart
from tests.support.fake_daemon import (
    HOOK,
    SESSION,
    WAIT_WOULD_HANG,
    FakeDaemon,
    assert_silent_success,
    fail,
    hook_stdin,
    ok,
    run_hook_timed,
)

# -- snapshot-hook, as the agent runs it --------------------------------------------------------


def test_hook_with_no_daemon_exits_0_silently_fast_and_records_a_gap(hook_env, short_dir):
    hook_env.update(WAIT_WOULD_HANG)  # fast: it gives up without waiting on its budget
    proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert gap["reason"] == "daemon-unavailable"
    assert gap["tool_use_id"] == "toolu_test_1"
    assert (gap["run_id"], gap["node_id"], gap["iteration"], gap["attempt"]) == (
        f"claude-{SESSION}", "session", 0, 1)
    assert (gap["worktree"], gap["tier"], gap["source"]) == ("/srv/proj", 1, "hook")
    assert hook_env["SNAPSHOTD_SOCKET"] in gap["detail"]
    assert "No such file or directory" in gap["detail"]


def test_hook_with_a_stale_socket_file_reports_refused(hook_env, short_dir):
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(hook_env["SNAPSHOTD_SOCKET"])  # bound, never listening: like a crashed daemon's
    hook_env.update(WAIT_WOULD_HANG)
    try:
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    finally:
        stale.close()
    assert_silent_success(proc)
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert gap["reason"] == "daemon-unavailable"
    assert "Connection refused" in gap["detail"]


def test_hook_times_out_on_a_mute_daemon_within_its_budget(hook_env, short_dir):
    hook_env["SNAPSHOTD_HOOK_TIMEOUT_MS"] = "500"
    with FakeDaemon(short_dir / "d.sock", lambda req: "silent") as daemon:
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)  # it returned (the 20 s guard), and the gap says why
    assert [r["op"] for r in daemon.requests] == ["snapshot"]
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert gap["reason"] == "timeout"
    assert "500 ms" in gap["detail"]
    assert gap["tool_use_id"] == "toolu_test_1"


def test_hook_zero_setup_request_and_no_gap_on_success(hook_env, short_dir):
    with FakeDaemon(short_dir / "d.sock", ok()) as daemon:
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)
    assert not (short_dir / "gaps.ndjson").exists()
    (req,) = daemon.requests
    assert isinstance(req.pop("id"), int)
    assert req == {
        "v": 1, "op": "snapshot", "cwd": "/srv/proj", "tier": 1,
        "source": "hook", "label": "Write /srv/proj/hello.txt", "tool_use_id": "toolu_test_1",
        "fallback": {"run_id": f"claude-{SESSION}", "node_id": "session", "iteration": 0,
                     "attempt": 1, "worktree": "/srv/proj"},
    }


def test_hook_explicit_attribution_from_env(hook_env, short_dir):
    hook_env.update(SNAPSHOTD_RUN_ID="run-9", SNAPSHOTD_NODE_ID="impl", SNAPSHOTD_ITERATION="1",
                    SNAPSHOTD_ATTEMPT="2", CLAUDE_PROJECT_DIR="/srv/proj")
    with FakeDaemon(short_dir / "d.sock", ok()) as daemon:
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj/sub"))
    assert_silent_success(proc)
    (req,) = daemon.requests
    assert (req["run_id"], req["node_id"], req["iteration"], req["attempt"]) == (
        "run-9", "impl", 1, 2)
    assert req["cwd"] == "/srv/proj/sub"
    assert "fallback" not in req


def test_hook_does_not_duplicate_a_gap_the_daemon_recorded(hook_env, short_dir):
    with FakeDaemon(short_dir / "d.sock", fail("fenced")):
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)
    assert read_gaps(short_dir / "gaps.ndjson") == []


@pytest.mark.parametrize("code", ["bad-id", "bad-request"])
def test_hook_records_the_gap_for_a_request_the_daemon_could_not_attribute(hook_env, short_dir,
                                                                           code):
    hook_env.update(SNAPSHOTD_RUN_ID="run-9", SNAPSHOTD_NODE_ID="impl")
    with FakeDaemon(short_dir / "d.sock", fail(code)):
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert (gap["reason"], gap["run_id"], gap["node_id"]) == (code, "run-9", "impl")
    assert gap["detail"] == f"refused: {code}"


def test_hook_records_a_protocol_error_for_a_garbled_reply(hook_env, short_dir):
    with FakeDaemon(short_dir / "d.sock", lambda req: {"id": req["id"] + 1000, "ok": True,
                                                       "result": {}}):
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert gap["reason"] == "protocol-error"


@pytest.mark.parametrize("stdin", [b"", b"not json", b"[1, 2]", b"\xff\xfe"])
def test_hook_records_a_bad_payload(hook_env, short_dir, stdin):
    hook_env.update(WAIT_WOULD_HANG)
    proc, _ = run_hook_timed(hook_env, stdin)
    assert_silent_success(proc)
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert gap["reason"] == "bad-payload"
    assert gap["run_id"] is None and gap["tool_use_id"] is None


def test_hook_whose_stdin_never_closes_still_returns_within_its_budget(hook_env, short_dir):
    hook_env["SNAPSHOTD_HOOK_TIMEOUT_MS"] = "300"
    proc = subprocess.Popen(HOOK, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=hook_env)
    try:
        proc.stdin.write(b'{"session_id": "s", "cwd": "/x"')  # half a payload, pipe kept open
        proc.stdin.flush()
        assert proc.wait(timeout=20) == 0  # a hang guard: it returns, the pipe still open
        out, err = proc.stdout.read(), proc.stderr.read()
    finally:
        proc.stdin.close()
        proc.kill()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert (out, err) == (b"", b"")
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert gap["reason"] == "bad-payload" and "300 ms" in gap["detail"]


@pytest.mark.parametrize("line", [
    b'{"session_id":"g1","cwd":"/w","hook_event_name":"AfterTool",'
    b'"timestamp":"2026-11-29T11:51:49.435Z","tool_name":"write_file",'
    b'"tool_input":{"file_path":"a.txt"}}',
    b'{"session_id":"c1","turn_id":"t","cwd":"/w","hook_event_name":"PostToolUse",'
    b'"tool_name":"Bash","tool_input":{"command":"ls"},"tool_use_id":"call_1"}',
], ids=["gemini", "codex"])
def test_hook_gap_attribution_for_the_other_agents(hook_env, short_dir, line):
    hook_env["GEMINI_PROJECT_DIR"] = "/g"
    proc, _ = run_hook_timed(hook_env, line)
    assert_silent_success(proc)
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    payload = json.loads(line)
    agent = "gemini" if "timestamp" in payload else "codex"
    assert gap["run_id"] == f"{agent}-{payload['session_id']}"
    assert gap["worktree"] == ("/g" if agent == "gemini" else "/w")
    assert gap["tool_use_id"].startswith("gemini-" if agent == "gemini" else "call_1")


def test_importing_the_hook_loads_nothing_heavy():
    probe = ("import sys, snapshotd_client.hook; "
             "print(sorted({m.split('.')[0] for m in sys.modules}))")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    loaded = set(json.loads(out.replace("'", '"')))
    heavy = {"click", "pygit2", "watchfiles", "psutil", "asyncio", "snapshotd", "logging",
             "subprocess", "inspect"}
    assert loaded & heavy == set()
    assert "snapshotd_client" in loaded


# -- autostart ----------------------------------------------------------------------------------

FAKE_DAEMON_PROCESS = textwrap.dedent("""
    import os, socket, sys, time
    from snapshotd_client.protocol import encode_frame, read_frame
    path = os.environ["SNAPSHOTD_SOCKET"]
    with open(os.environ["FAKE_DAEMON_INFO"], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(float(os.environ.get("FAKE_DAEMON_DELAY", "0")))
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(8)
    s.settimeout(30)
    end = time.monotonic() + 30
    while time.monotonic() < end:
        try:
            c, _ = s.accept()
        except OSError:
            break
        req = read_frame(c)
        if req is not None:
            with open(os.environ["FAKE_DAEMON_INFO"] + ".req", "a") as f:
                f.write(req["op"] + "\\n")
            c.sendall(encode_frame({"id": req["id"], "ok": True, "result": {"seq": 0}}))
        c.close()
""")


@pytest.fixture
def spawned(short_dir):
    """The pid file of a fake daemon process; the process is killed (by pid) afterwards."""
    info = short_dir / "fake.pid"
    yield info
    if info.exists() and info.read_text():
        pid = int(info.read_text())
        try:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)  # reap it when it is our own child (the in-process autostart)
        except (ProcessLookupError, ChildProcessError):
            pass


@pytest.mark.filterwarnings("ignore::ResourceWarning")
def test_autostart_spawns_a_detached_daemon_and_waits_for_its_socket(hook_env, short_dir,
                                                                     spawned, monkeypatch):
    for key, value in hook_env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setenv("SNAPSHOTD_AUTOSTART", "1")
    monkeypatch.setenv("FAKE_DAEMON_INFO", str(spawned))
    monkeypatch.setenv("FAKE_DAEMON_DELAY", "0.3")
    sock = hook_env["SNAPSHOTD_SOCKET"]
    assert try_autostart(sock, time.monotonic() + 5,
                          argv=[sys.executable, "-c", FAKE_DAEMON_PROCESS])
    pid = int(spawned.read_text())
    assert os.getsid(pid) == pid  # its own session: no controlling terminal of the agent's
    if Path("/proc").is_dir():
        for fd in (0, 1, 2):
            assert os.readlink(f"/proc/{pid}/fd/{fd}") == "/dev/null"
        assert os.readlink(f"/proc/{pid}/cwd") == "/"
    assert Client(sock, timeout=5).snapshot("/w", source="hook")["seq"] == 0


def test_autostart_gives_up_early_when_the_daemon_cannot_start(hook_env, monkeypatch):
    monkeypatch.setenv("SNAPSHOTD_AUTOSTART", "1")
    # A deadline an hour away: giving up early is returning at all (the 60 s guard), not
    # waiting for the deadline.
    gave_up: list[bool] = []
    waiter = threading.Thread(target=lambda: gave_up.append(not try_autostart(
        hook_env["SNAPSHOTD_SOCKET"], time.monotonic() + 3600,
        argv=[sys.executable, "-c", "raise SystemExit(3)"])), daemon=True)
    waiter.start()
    waiter.join(60)
    assert gave_up == [True]


def test_autostart_is_off_with_snapshotd_autostart_0(hook_env, short_dir, monkeypatch):
    monkeypatch.setenv("SNAPSHOTD_AUTOSTART", "0")
    marker = short_dir / "spawned"
    assert not try_autostart(hook_env["SNAPSHOTD_SOCKET"], time.monotonic() + 5,
                              argv=[sys.executable, "-c", f"open({str(marker)!r}, 'w')"])
    time.sleep(0.2)  # let time pass: a child that was spawned would have written it by now
    assert not marker.exists()


def test_hook_autostarts_and_never_holds_the_agents_pipes(hook_env, short_dir, spawned):
    # The real main(), with only the daemon command swapped for the fake daemon process.
    # communicate() returns only when every holder of stdout/stderr has closed them: a daemon
    # child that inherited them would keep it waiting for its 30 s life (Gemini's failure mode).
    script = ("import sys; import snapshotd_client.hook as h; real = h.try_autostart; "
              "h.try_autostart = lambda s, d: real(s, d, [sys.executable, '-c', sys.argv[1]]); "
              "h.main()")
    hook_env.update(SNAPSHOTD_AUTOSTART="1", FAKE_DAEMON_INFO=str(spawned))
    # The 20 s guard is shorter than the fake daemon's 30 s life: a daemon holding the pipes
    # would trip it.
    proc = subprocess.run([sys.executable, "-c", script, FAKE_DAEMON_PROCESS],
                          input=hook_stdin("/srv/proj"), env=hook_env,
                          capture_output=True, timeout=20)
    assert_silent_success(proc)
    assert Path(str(spawned) + ".req").read_text() == "snapshot\n"
    assert not (short_dir / "gaps.ndjson").exists()


# -- Client ------------------------------------------------------------------------------------


def test_client_keeps_one_connection_for_many_requests(short_dir):
    with FakeDaemon(short_dir / "d.sock", ok({"pid": 1})) as daemon, \
            Client(short_dir / "d.sock") as client:
        assert client.ping() == {"pid": 1}
        client.snapshot("rel/dir", run_id="r", node_id="n", label=None)
        client.attempt_end("r", "n")
        assert daemon.connections == 1
    ping, snap, end = daemon.requests
    assert ping == {"v": 1, "op": "ping", "id": 1}
    assert snap["id"] == 2 and snap["cwd"] == os.path.abspath("rel/dir")
    assert "label" not in snap and "attempt" not in snap  # None-valued fields are left out
    assert (snap["source"], snap["tier"], snap["iteration"]) == ("wrap", 1, 0)
    assert end == {"v": 1, "op": "attempt_end", "id": 3, "run_id": "r", "node_id": "n",
                   "iteration": 0, "status": "finished"}


def test_client_reconnects_once_when_the_daemon_closed_between_calls(short_dir):
    def respond(req: dict) -> dict:
        # answer, then hang up (an idle timeout or daemon restart between calls)
        return {"id": req["id"], "ok": True, "result": {"n": req["id"]}}

    with FakeDaemon(short_dir / "d.sock", respond) as daemon, \
            Client(short_dir / "d.sock") as client:
        assert client.ping() == {"n": 1}
        daemon.hang_up()
        time.sleep(0.05)
        assert client.ping() == {"n": 2}
        assert daemon.connections == 2
        assert [r["id"] for r in daemon.requests] == [1, 2]  # nothing sent twice


def test_client_errors(short_dir):
    with pytest.raises(DaemonUnavailable) as info:
        Client(short_dir / "absent.sock").ping()
    assert info.value.code == "daemon-unavailable" and not info.value.remote

    with FakeDaemon(short_dir / "d.sock", fail("not-found")), Client(short_dir / "d.sock") as c:
        with pytest.raises(SnapshotdError) as info:
            c.list("nope")
        assert (info.value.code, info.value.message, info.value.remote) == (
            "not-found", "refused: not-found", True)
        assert info.value.daemon_recorded
        with pytest.raises(SnapshotdError) as info:
            c.snapshot("/w", label="x" * (1 << 20))
        assert info.value.code == "frame-too-large" and not info.value.remote


def test_client_timeout_and_a_daemon_that_hangs_up(short_dir):
    with FakeDaemon(short_dir / "d.sock", lambda req: "silent"), \
            Client(short_dir / "d.sock", timeout=0.3) as client:
        with pytest.raises(DaemonTimeout) as info:  # the mute daemon never answers
            client.ping()
        assert info.value.code == "timeout"
    with FakeDaemon(short_dir / "d.sock", lambda req: "close"), \
            Client(short_dir / "d.sock") as client:
        with pytest.raises(DaemonUnavailable, match="without replying"):
            client.ping()


# -- wrap --------------------------------------------------------------------------------------


def test_wrap_decorator_captures_after_return_and_after_raise(short_dir):
    with FakeDaemon(short_dir / "d.sock", ok({"seq": 4})) as daemon:
        client = Client(short_dir / "d.sock")
        w = wrap(short_dir, "run-1", "node-a", iteration=2, attempt=1, client=client)

        @w
        def write_file(name: str) -> str:
            return f"wrote {name}"

        @w
        def broken() -> None:
            raise KeyError("tool's own error")

        assert write_file("a.txt", tool_use_id="call-7") == "wrote a.txt"
        with pytest.raises(KeyError, match="tool's own error"):
            broken()
        client.close()
    first, second = daemon.requests
    assert (first["label"], first["tool_use_id"], first["source"], first["tier"]) == (
        "write_file", "call-7", "wrap", 1)
    assert (first["run_id"], first["node_id"], first["iteration"], first["attempt"]) == (
        "run-1", "node-a", 2, 1)
    assert first["cwd"] == str(short_dir)
    assert second["label"] == "broken" and len(second["tool_use_id"]) == 32
    assert w.result == {"seq": 4} and w.error is None


def test_wrap_context_manager_and_async(short_dir):
    import asyncio

    with FakeDaemon(short_dir / "d.sock", ok({"seq": 1})) as daemon:
        with wrap(short_dir, "r", "n", client=Client(short_dir / "d.sock"), label="step") as w:
            pass
        assert w.result == {"seq": 1}

        calls: list[str] = []

        @wrap(short_dir, "r", "n", client=Client(short_dir / "d.sock"))
        async def fetch() -> str:
            await asyncio.sleep(0.01)
            calls.append(f"done before capture #{len(daemon.requests)}")
            return "ok"

        assert asyncio.run(fetch()) == "ok"
    assert calls == ["done before capture #1"]  # captured after the coroutine ran, not before
    assert [r["label"] for r in daemon.requests] == ["step", "fetch"]


def test_wrap_failure_never_hides_the_tools_outcome_and_leaves_a_gap(short_dir, monkeypatch):
    monkeypatch.setenv("SNAPSHOTD_GAPS", str(short_dir / "gaps.ndjson"))
    client = Client(short_dir / "absent.sock")
    with pytest.raises(ValueError, match="inner"):
        with wrap(short_dir, "r", "n", client=client, tool_use_id="t-1") as w:
            raise ValueError("inner")
    assert isinstance(w.error, DaemonUnavailable) and w.result is None
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert (gap["reason"], gap["source"], gap["tool_use_id"], gap["run_id"]) == (
        "daemon-unavailable", "wrap", "t-1", "r")

    @wrap(short_dir, "r", "n", client=client)
    def tool() -> int:
        return 42

    assert tool() == 42
    assert len(read_gaps(short_dir / "gaps.ndjson")) == 2


def test_wrap_leaves_daemon_recorded_failures_to_the_daemon(short_dir, monkeypatch):
    monkeypatch.setenv("SNAPSHOTD_GAPS", str(short_dir / "gaps.ndjson"))
    with FakeDaemon(short_dir / "d.sock", fail("fenced")):
        with wrap(short_dir, "r", "n", client=Client(short_dir / "d.sock")) as w:
            pass
    assert w.error is not None and w.error.code == "fenced"
    assert read_gaps(short_dir / "gaps.ndjson") == []
