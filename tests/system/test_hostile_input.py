"""Nothing let in: fuzzed frames, hostile paths, idle and surplus connections, bursts of hooks."""

from __future__ import annotations

import os
import socket
import struct
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from random import Random

import msgpack
import psutil
import pytest

from snapshotd_client import SnapshotdError
from tests.conftest import Daemon, Env, MakeDaemon, claude_payload, make_git_worktree, run_hook
from tests.support.helpers import connect_raw, wait_for
from tests.support.helpers import recv_frame as _read_reply

pytestmark = pytest.mark.one_ledger("framing, hostile paths and connection limits")

# The suite sends 3,000 frames: each of the ten kinds of frame about 300 times, checked below
# (10,000 took about 24 s of the suite's 10-minute budget, 3,000 about 5 s);
# the long soak sets SNAPSHOTD_FUZZ_FRAMES=100000, and SNAPSHOTD_FUZZ_SEED another seed (the
# seed is printed, so a failure replays).
FUZZ_FRAMES = int(os.environ.get("SNAPSHOTD_FUZZ_FRAMES", "3000"))
FUZZ_SEED = int(os.environ.get("SNAPSHOTD_FUZZ_SEED", "20261129"))
FRAME_KINDS = 10


def _frame(body: bytes) -> bytes:
    return struct.pack(">I", len(body)) + body


class FrameFactory:
    """Seeded generator of hostile and half-valid frames."""

    OPS = ["ping", "snapshot", "attempt_begin", "attempt_end", "list", "status", "flush",
           "restore", "diff", "nope", "", "\udcff", None, 7]

    def __init__(self, rng: Random, safe_dir: Path, fifo: Path, afile: Path) -> None:
        self.rng = rng
        self.kinds: Counter[int] = Counter()  # frames made, by kind (0-5: a request)
        self.paths = ["relative", "", "/", "/proc/self", "/proc", "/dev/null", str(fifo),
                      str(afile), str(safe_dir / "missing"), "/nonexistent/\x00x"]

    def value(self, depth: int = 0) -> object:
        r = self.rng
        kind = r.randrange(12 if depth < 3 else 8)
        if kind == 0:
            return r.randint(-2**70, 2**70) if r.random() < 0.1 else r.randint(-5, 5)
        if kind == 1:
            return r.random()
        if kind == 2:
            return bytes(r.randrange(256) for _ in range(r.randrange(20)))
        if kind == 3:
            return "".join(chr(r.randrange(0x20, 0x3000)) for _ in range(r.randrange(20)))
        if kind == 4:
            return r.choice(["../x", "a/b", "x\x00y", "x" * 10_000, "..", ".", "ok-id"])
        if kind == 5:
            return None
        if kind == 6:
            return r.choice([True, False])
        if kind == 7:
            return r.choice(self.paths)
        if kind in (8, 9):
            return [self.value(depth + 1) for _ in range(r.randrange(4))]
        return {self.key(): self.value(depth + 1) for _ in range(r.randrange(4))}

    def key(self) -> object:
        return self.rng.choice(["cwd", "run_id", "node_id", "attempt", "iteration", "tier",
                                "source", "label", "tool_use_id", "fallback", "seq", "status",
                                "owner_pid", 1, b"\xff", "\udcff"])

    def request(self) -> dict:
        req: dict = {"v": self.rng.choice([1, 1, 1, 2, "1", None]),
                     "op": self.rng.choice(self.OPS), "id": self.rng.randrange(1 << 30)}
        for _ in range(self.rng.randrange(6)):
            req[self.key()] = self.value()
        return req

    def frame(self) -> tuple[bytes, bool]:
        """(bytes, closes): whether the daemon must close the connection after it."""
        r = self.rng
        kind = r.randrange(FRAME_KINDS)
        self.kinds[kind] += 1
        if kind <= 5:
            try:
                body = msgpack.packb(self.request(), use_bin_type=r.random() < 0.5,
                                     unicode_errors="surrogateescape")
            except (ValueError, OverflowError, TypeError):
                body = b"\x80"
            return _frame(body), False
        if kind == 6:
            return _frame(bytes(r.randrange(256) for _ in range(r.randrange(1, 64)))), True
        if kind == 7:
            return struct.pack(">I", r.randrange((1 << 20) + 1, 1 << 32)), True
        if kind == 8:
            nested: object = 1
            for _ in range(r.randrange(50, 3000)):
                nested = {"a": nested} if r.random() < 0.5 else [nested]
            try:
                return _frame(msgpack.packb(nested)), True
            except (ValueError, RecursionError):
                return _frame(b"\xc1"), True
        return _frame(b"\xa3" + bytes([0xff, 0xfe, 0xfd])), True  # non-UTF-8 str


def test_fuzzed_frames_never_hurt_the_daemon(sd_env: Env, tmp_path: Path,
                                             make_daemon: MakeDaemon) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    afile = tmp_path / "afile"
    afile.write_text("x")
    daemon = make_daemon(sd_env)
    assert daemon.proc is not None
    proc = psutil.Process(daemon.proc.pid)
    rss_start = proc.memory_info().rss
    print(f"fuzz: {FUZZ_FRAMES} frames, SNAPSHOTD_FUZZ_SEED={FUZZ_SEED}")
    factory = FrameFactory(Random(FUZZ_SEED), tmp_path, fifo, afile)
    conn = connect_raw(sd_env.socket)
    replies = 0
    for i in range(FUZZ_FRAMES):
        data, closes = factory.frame()
        try:
            conn.sendall(data)
            if closes:
                conn.shutdown(socket.SHUT_WR)
            reply = _read_reply(conn)
        except (BrokenPipeError, ConnectionResetError):
            reply = None
        if reply is not None:
            replies += 1
            assert isinstance(reply, dict) and "ok" in reply
        if closes or reply is None:
            conn.close()
            conn = connect_raw(sd_env.socket)
        if i % 500 == 0:
            assert daemon.ping(), f"daemon stopped answering after {i} frames"
    conn.close()
    assert daemon.ping()
    growth = proc.memory_info().rss - rss_start
    assert growth < 50 * 1024 * 1024, f"RSS grew by {growth} bytes"
    assert replies > FUZZ_FRAMES // 2
    # Every kind of frame was sent often enough to matter (the seed decides the mix).
    assert min(factory.kinds[k] for k in range(FRAME_KINDS)) >= FUZZ_FRAMES // 20, factory.kinds
    daemon.stop()
    log = daemon.log.read_text()
    assert "Traceback" not in log, log[-3000:]
    # Nothing was captured from the hostile paths.
    assert not list((sd_env.home / "worktrees").glob("*")) or all(
        "proc" not in p.name and p.name != "root" for p in (sd_env.home / "worktrees").iterdir())


@pytest.mark.parametrize("kind", ["file", "fifo", "proc", "root", "dev"])
def test_hostile_cwd_gets_a_clear_error(sd_env: Env, daemon: Daemon, tmp_path: Path,
                                        kind: str) -> None:
    target = {"file": tmp_path / "afile", "fifo": tmp_path / "fifo", "proc": Path("/proc/self"),
              "root": Path("/"), "dev": Path("/dev")}[kind]
    if kind == "file":
        target.write_text("x")
    if kind == "fifo":
        os.mkfifo(target)
    with daemon.client() as c:
        with pytest.raises(SnapshotdError) as err:
            c.snapshot(str(target), run_id="r", node_id="n")
        assert err.value.code in ("worktree-missing", "worktree-refused")
        assert str(target) in err.value.message or "filesystem" in err.value.message
        assert c.ping()
    created = [p for p in tmp_path.iterdir() if p.name not in ("afile", "fifo", "home",
                                                               "config", "daemon.log")]
    assert created == []


def test_worktree_swapped_for_a_symlink_to_root_is_refused(sd_env: Env, daemon: Daemon,
                                                           tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "f").write_text("x")
    with daemon.client() as c:
        c.snapshot(str(wt), run_id="r", node_id="n")
        os.rename(wt, tmp_path / "moved")
        os.symlink("/", wt)
        with pytest.raises(SnapshotdError) as err:  # refused, never a walk of /
            c.snapshot(str(wt), run_id="r", node_id="n")
        assert err.value.code == "worktree-replaced"
        assert c.ping()
    # The watcher may notice first that the directory went away; the capture's refusal is on
    # record either way.
    assert "worktree-replaced" in [g["reason"] for g in sd_env.read_gaps()]


def test_idle_connections_do_not_delay_a_new_client(sd_env: Env, tmp_path: Path,
                                                    make_daemon: MakeDaemon) -> None:
    daemon = make_daemon(sd_env, extra_env={"SNAPSHOTD_MAX_CONNECTIONS": "520"})
    idle: list[socket.socket] = []
    try:
        for _ in range(500):
            idle.append(connect_raw(sd_env.socket))
        with daemon.client() as c:  # every idle connection accepted (and this one)
            wait_for(lambda: c.status()["connections"] >= 501, what="500 accepted connections")
        samples = []
        for _ in range(5):
            t0 = time.monotonic()
            assert daemon.ping()
            samples.append(time.monotonic() - t0)
        assert sorted(samples)[2] < 0.1, samples
        for _ in range(30):
            idle.append(connect_raw(sd_env.socket))
        # The daemon takes connections in the order they came: the extra one is judged after
        # the 30 before it have filled the last 20 slots.
        extra = connect_raw(sd_env.socket)
        reply = _read_reply(extra)
        assert reply is not None and reply["error"]["code"] == "busy"
        extra.close()
    finally:
        for s in idle:
            s.close()
    wait_for(daemon.ping, what="the daemon to serve again once the idle connections closed")


def test_slow_and_idle_connections_time_out(sd_env: Env, make_daemon: MakeDaemon) -> None:
    daemon = make_daemon(sd_env, extra_env={"SNAPSHOTD_IDLE_TIMEOUT_S": "0.5"})
    slow = connect_raw(sd_env.socket)
    slow.sendall(struct.pack(">I", 100) + b"\x81")
    idle = connect_raw(sd_env.socket)
    # Each recv blocks (up to the socket's 10 s) until the daemon's 0.5 s idle timeout hangs up.
    assert slow.recv(10) == b"" and idle.recv(10) == b""
    assert daemon.ping()


def test_bursts_of_hooks_across_worktrees_leave_no_gap(sd_env: Env, daemon: Daemon,
                                                        tmp_path: Path) -> None:
    trees = [make_git_worktree(tmp_path / f"wt{i}") for i in range(8)]
    per_tree = 6

    def fire(n: int) -> int:
        wt = trees[n % 8]
        (wt / f"f{n}.txt").write_text(str(n))
        return run_hook(sd_env, claude_payload(wt, f"toolu_{n}", session_id=f"load-{n % 8}"),
                        SNAPSHOTD_HOOK_TIMEOUT_MS="30000").returncode

    with ThreadPoolExecutor(16) as pool:
        codes = list(pool.map(fire, range(8 * per_tree)))
    assert codes == [0] * len(codes)
    assert sd_env.read_gaps() == []
    with daemon.client() as c:
        for i in range(8):
            cps = c.list(f"claude-load-{i}")["checkpoints"]
            assert [cp["seq"] for cp in cps] == list(range(len(cps)))
