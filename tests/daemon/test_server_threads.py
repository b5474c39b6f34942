"""The control socket's connection threads (``snapshotd.daemon.server``, ``snapshotd.daemon.workers``): kept
for the next connection, a burst past the handler slots waits rather than fails, a frame
dribbled in never outlives the idle timeout, a stop wakes every idle connection, an acceptor
that fails stops the daemon cleanly, and a stop that hangs past its limit still ends the
process, its threads' stacks in the log."""

from __future__ import annotations

import os
import resource
import signal
import struct
import threading
import time
from pathlib import Path

import pytest

from snapshotd.daemon.server import STOP_GRACE_S
from snapshotd_client import Client
from tests.conftest import QUIET_WATCHER, Daemon, Env, MakeDaemon, make_git_worktree
from tests.support.helpers import connect_raw, recv_frame, send_frame, wait_for

pytestmark = pytest.mark.one_ledger("the socket's connection threads, their limits and the stop")


def test_connections_one_after_another_reuse_one_thread(sd_env: Env, daemon: Daemon) -> None:
    def ping_and_wait_idle() -> None:
        with Client(sd_env.socket, timeout=10) as c:
            c.ping()
        # The thread goes back to waiting once its connection is closed.
        wait_for(lambda: watcher.status()["connection_threads"]["idle"] >= 1,
                 what="the ping's thread to wait for the next connection")

    with daemon.client() as watcher:
        watcher.ping()  # connected first: it holds a thread of its own while it is open
        # The first ping may start a thread (the fixture's start-up ping may still be in its
        # thread's hands); from then on one is always waiting when the next connection comes.
        ping_and_wait_idle()
        started = watcher.status()["connection_threads"]["started"]
        for _ in range(10):
            ping_and_wait_idle()
        threads = watcher.status()["connection_threads"]
    assert threads["started"] == started, threads


def test_captures_past_the_handler_slots_wait_and_are_all_answered(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    # 16 handlers run at a time (``Server(workers=16)``); each capture here sleeps 400 ms at
    # ``before-row``, so 20 at once take two turns: none is refused, none lost.
    d = make_daemon(sd_env, {**QUIET_WATCHER, "SNAPSHOTD_DELAY_AT": "before-row:400"})
    trees = [make_git_worktree(tmp_path / f"wt{i}") for i in range(20)]
    results: list[object] = [None] * len(trees)

    def capture(i: int) -> None:
        (trees[i] / "a.txt").write_text(f"{i}\n")
        try:
            with d.client(timeout=60) as c:
                results[i] = c.snapshot(str(trees[i]), run_id=f"slots-{i}", node_id="n")
        except Exception as exc:  # noqa: BLE001 - kept for the assertion below
            results[i] = exc

    threads = [threading.Thread(target=capture, args=(i,)) for i in range(len(trees))]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    took = time.monotonic() - started
    assert all(isinstance(r, dict) and r["seq"] == 0 for r in results), results
    assert took >= 0.8, took  # two turns of the 400 ms sleep: the slots held
    assert sd_env.read_gaps() == []


def test_a_frame_sent_a_byte_at_a_time_is_cut_at_the_idle_timeout(
        sd_env: Env, make_daemon: MakeDaemon) -> None:
    make_daemon(sd_env, {"SNAPSHOTD_IDLE_TIMEOUT_S": "0.5"})
    s = connect_raw(sd_env.socket)
    s.sendall(struct.pack(">I", 40))
    cut = False
    # Each byte comes well inside the idle timeout; the frame as a whole would take 4 s. A hang-up
    # before its last byte (no reply: it never was a whole frame) is the cut, no stopwatch.
    for _ in range(40):
        time.sleep(0.1)
        try:
            s.sendall(b"\x90")
        except OSError:
            cut = True
            break
        s.setblocking(False)
        try:
            if s.recv(10) == b"":
                cut = True
                break
        except BlockingIOError:
            pass
        finally:
            s.setblocking(True)
    s.close()
    assert cut


def test_a_stop_wakes_idle_connections_and_refuses_new_ones(sd_env: Env,
                                                           make_daemon: MakeDaemon) -> None:
    d = make_daemon(sd_env)
    idle = [connect_raw(sd_env.socket) for _ in range(5)]
    with d.client() as c:
        wait_for(lambda: c.status()["connections"] >= 6, what="the idle connections accepted")
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=STOP_GRACE_S + 10) == 0
    for s in idle:
        assert recv_frame(s) is None  # closed by the daemon, with nothing sent
        s.close()
    with pytest.raises(OSError):
        connect_raw(sd_env.socket)


@pytest.mark.parametrize("point", ["serve", "accept"])
def test_a_request_sent_before_the_stop_is_answered_shutting_down(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon, point: str) -> None:
    """A request whose frame had reached the daemon when SIGTERM came, but was not yet read
    (``serve``: its connection's thread had not got to it) or its connection not yet taken
    (``accept``: still in the listener's backlog), is answered ``shutting-down``, the code a
    hook records as that gap's reason, never a connection closed without a reply."""
    mark = tmp_path / "mark"
    d = make_daemon(sd_env, {"SNAPSHOTD_DELAY_AT": f"{point}:1000",
                             "SNAPSHOTD_DELAY_MARK": str(mark)})
    # The start-up ping paused once too; it was answered, so that pause is over.
    mark.unlink(missing_ok=True)
    s = connect_raw(sd_env.socket)
    send_frame(s, {"v": 1, "op": "ping", "id": 7})
    if not _appears(mark, 3.0):
        # Taken (and answered) in the acceptor's pass that took the start-up ping, before it
        # went back to waiting: the next connection is the one that wakes it and pauses it.
        assert point == "accept" and (recv_frame(s) or {}).get("ok"), point
        s.close()
        s = connect_raw(sd_env.socket)
        send_frame(s, {"v": 1, "op": "ping", "id": 7})
    wait_for(mark.exists, what=f"the daemon to pause at {point}")
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    reply = recv_frame(s)
    s.close()
    assert reply is not None, "the daemon closed the connection without a reply"
    assert reply["id"] == 7 and not reply["ok"], reply
    assert reply["error"]["code"] == "shutting-down", reply
    assert d.proc.wait(timeout=STOP_GRACE_S + 10) == 0


def _appears(path: Path, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while not path.exists():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def test_out_of_descriptors_the_acceptor_waits_then_serves_the_backlog(
        sd_env: Env, make_daemon: MakeDaemon) -> None:
    d = make_daemon(sd_env)
    assert d.proc is not None
    pid = d.proc.pid
    soft, hard = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    # No descriptor left for accept(2): the real EMFILE, on the running daemon.
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (len(os.listdir(f"/proc/{pid}/fd")), hard))
    waiting = []
    try:
        for i in range(5):
            s = connect_raw(sd_env.socket)  # the kernel queues it in the backlog
            send_frame(s, {"v": 1, "op": "ping", "id": i})
            waiting.append(s)
        wait_for(lambda: "cannot accept a connection" in d.log.read_text(),
                 what="the acceptor to meet EMFILE")
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, (soft, hard))
    for i, s in enumerate(waiting):
        reply = recv_frame(s)
        assert reply is not None and reply["ok"] and reply["id"] == i, reply
        s.close()
    with d.client() as c:
        assert c.status()["accept_errors"] >= 1
    # Logged once for the spell, not every retry.
    assert d.log.read_text().count("cannot accept a connection") == 1


def test_an_empty_frame_is_answered_bad_frame(sd_env: Env, daemon: Daemon) -> None:
    s = connect_raw(sd_env.socket)
    s.sendall(struct.pack(">I", 0))
    reply = recv_frame(s)
    assert reply is not None and reply["error"]["code"] == "bad-frame", reply
    assert recv_frame(s) is None
    s.close()


def test_connections_their_clients_closed_never_count_against_the_cap(
        sd_env: Env, make_daemon: MakeDaemon) -> None:
    # Two slots, filled and emptied again and again as fast as a client can: a connection whose
    # client already hung up (its thread has not yet seen the end) must not take a slot.
    make_daemon(sd_env, {"SNAPSHOTD_MAX_CONNECTIONS": "2"})
    for _ in range(30):
        pair = [Client(sd_env.socket, timeout=5), Client(sd_env.socket, timeout=5)]
        for c in pair:
            assert c.ping()["pid"]
        for c in pair:
            c.close()


def test_a_stop_that_hangs_past_its_limit_dumps_the_stacks_and_exits(
        sd_env: Env, make_daemon: MakeDaemon) -> None:
    """The part of a stop no deadline of the server's covers (closing the store and ledger,
    the interpreter's exit) hangs, made with the ``close`` delay seam (10 minutes) and the
    limit shortened to 2 s: the process still exits, 1, with every thread's stack in its log,
    and the home is free for the next daemon."""
    d = make_daemon(sd_env, {"SNAPSHOTD_DELAY_AT": "close:600000",
                             "SNAPSHOTD_STOP_LIMIT_S": "2"})
    assert d.ping()
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    assert d.proc.wait(timeout=30) == 1  # 30 s, against the 10 minutes the hang would last
    log = d.log.read_text()
    assert "stopping within 2s" in log
    assert "Timeout (0:00:02)!" in log
    assert "Thread 0x" in log and "in run_daemon" in log and "in injected_delay" in log, log[-2000:]
    assert make_daemon(sd_env).ping()  # the home was let go: a new daemon takes it



def test_a_failed_acceptor_stops_the_daemon_cleanly(sd_env: Env, tmp_path: Path,
                                                    make_daemon: MakeDaemon) -> None:
    """The accepting thread failing (a bug's path: the ``acceptor`` fault seam) asks the main
    thread to stop from another thread: the daemon logs why, answers or closes what it had, lets
    go of the socket and exits 0, so the next hook can start a daemon that serves."""
    fault = tmp_path / "faults"
    d = make_daemon(sd_env, {"SNAPSHOTD_FAULT_FILE": str(fault)})
    assert d.ping()
    fault.write_text("acceptor=EIO\n")
    assert d.proc is not None
    # The seam fires when a connection wakes the acceptor. One that arrives while the acceptor
    # is still taking the previous ones (a thread the kernel has not run again yet) is taken
    # in the same pass, without a wake, and served: ping until the daemon is stopping.
    for _ in range(50):
        try:
            with Client(sd_env.socket, timeout=10) as c:
                c.ping()
        except Exception:  # noqa: BLE001 - shutting-down, refused or cut: it is stopping
            break
        time.sleep(0.05)
    assert d.proc.wait(timeout=STOP_GRACE_S + 10) == 0
    assert "the socket's accepting thread failed" in d.log.read_text()
    assert not sd_env.socket.exists()
    fault.unlink()
    assert make_daemon(sd_env).ping()  # the home was let go: a new daemon takes it
