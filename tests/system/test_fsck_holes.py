"""The store stays ``git fsck --strict`` clean, and the chaos engine's check sees it so.

``git fsck`` reads every loose object first and the refs after. A capture that lands between
the two (the daemon's watcher captures at start-up, right after a restart, while the chaos
engine already checks) moves a ref to a commit the object scan never saw: fsck reports that
commit "missing" and the ref's old tip "dangling", on a store that is whole. The bounded chaos
test counted this apart as an ``unreachable_hole``. Here fsck is held at its ref read
(a FIFO among the loose refs: reading it blocks until it is written) while a tool call
completes, deterministically: the engine's check must not let the daemon write while fsck
runs (it freezes the daemon), so the call waits and no hole is reported.

Also a guard for the sequence first suspected: a capture killed between its commit and its
ref (an orphan commit on the attempt's tip), that tip later pruned by ``gc --keep-last 1
--prune-grace 0s``: ``git gc`` removes the orphan with its parent, and fsck stays clean.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from snapshotd_client import SnapshotdError
from tests.conftest import QUIET_WATCHER, Env, MakeDaemon
from tests.support.chaos import GIT, RUN, Chaos
from tests.support.helpers import wait_for

SEED = 16


def test_a_capture_during_the_store_check_is_no_hole() -> None:
    world = Chaos(SEED)
    try:
        for i in range(2):
            world.edit()
            assert world.hook(f"toolu_holes_setup_{i}").returncode == 0
        store = world.home / "store.git"
        tip = subprocess.run([*GIT, "--git-dir", str(store), "rev-parse",
                              f"refs/snapshotd/runs/{RUN}/agent/0/1"], capture_output=True,
                             text=True, check=True).stdout.strip()
        # Loose refs directly under refs/ are read before any below refs/snapshotd/.
        fifo = store / "refs" / "a-pause"
        os.mkfifo(fifo)
        pause = _FifoRef(fifo, f"{tip}\n".encode())
        checker = threading.Thread(target=world.check, args=("raced",))
        checker.start()
        pause.reached.wait(timeout=60)
        assert pause.reached.is_set(), "fsck never read the refs"
        replies: list[subprocess.CompletedProcess] = []
        world.edit()
        call = threading.Thread(target=lambda: replies.append(world.hook("toolu_holes_raced")))
        call.start()
        assert world.daemon is not None
        # The old check lets the call finish under fsck's feet; the fixed one froze the daemon.
        wait_for(lambda: not call.is_alive() or _stopped(world.daemon.pid), timeout=60,
                 what="the tool call, or a frozen daemon")
        pause.release()
        checker.join(timeout=120)
        call.join(timeout=120)
        pause.stop()
        assert replies and replies[0].returncode == 0, replies
        world.check("after")
        assert world.stats.violations == [], world.stats.violations
        rows = world.query("SELECT seq FROM tool_calls WHERE tool_use_id = ?",
                           ("toolu_holes_raced",))
        assert rows, "the raced tool call is a checkpoint"
    finally:
        world.close()


def test_gc_removes_a_killed_captures_orphan_with_its_parent(
        sd_env: Env, make_daemon: MakeDaemon, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    # Killed at its third commit: written, the ref not moved (an orphan on seq 1's commit).
    daemon = make_daemon(sd_env, dict(QUIET_WATCHER, SNAPSHOTD_CRASH_AT="after-commit:3"))
    with daemon.client() as c:
        c.attempt_begin("holes", "n", str(wt), attempt=1)
        for i in range(3):
            (wt / "a.txt").write_text(f"before {i}\n")
            if i < 2:
                c.snapshot(str(wt), run_id="holes", node_id="n", attempt=1, tool_use_id=f"b{i}")
                continue
            with pytest.raises(SnapshotdError):
                c.snapshot(str(wt), run_id="holes", node_id="n", attempt=1, tool_use_id="orphan")
    assert daemon.proc is not None and daemon.proc.wait(timeout=30) == 86
    orphan = re.findall(r"dangling commit ([0-9a-f]{40})", _fsck(sd_env).stdout)
    assert len(orphan) == 1
    parent = _store(sd_env, "rev-parse", f"{orphan[0]}^").stdout.strip()
    daemon = make_daemon(sd_env, QUIET_WATCHER)
    with daemon.client() as c:
        for i in range(2):
            (wt / "a.txt").write_text(f"after {i}\n")
            c.snapshot(str(wt), run_id="holes", node_id="n", attempt=1, tool_use_id=f"a{i}")
        c.attempt_begin("holes", "n", str(wt), attempt=2)  # attempt 1 ended: gc may prune it
    gc = subprocess.run([sys.executable, "-m", "snapshotd", "gc", "--keep-last", "1",
                         "--prune-grace", "0s"], env=sd_env.environ(), capture_output=True,
                        text=True, timeout=120)
    assert gc.returncode == 0, gc.stderr
    fsck = _fsck(sd_env)
    assert fsck.returncode == 0 and "missing" not in fsck.stdout, fsck.stdout + fsck.stderr
    # The parent was pruned (no longer the attempt's newest); the orphan went with it.
    assert _store(sd_env, "cat-file", "-e", parent).returncode != 0
    assert _store(sd_env, "cat-file", "-e", orphan[0]).returncode != 0


class _FifoRef:
    """A loose ref that is a FIFO: each reader blocks on it until ``release``, then reads
    ``content`` (an object id the store holds, so fsck finds nothing wrong with it)."""

    def __init__(self, path: Path, content: bytes) -> None:
        self.path, self.content = path, content
        self.reached, self._released, self._stop = (threading.Event(), threading.Event(),
                                                    threading.Event())
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def release(self) -> None:
        self._released.set()

    def stop(self) -> None:
        self._stop.set()
        self._released.set()
        # A writer waiting for its next reader: be that reader.
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._thread.join(timeout=10)
        os.close(fd)
        self.path.unlink()

    def _serve(self) -> None:
        while not self._stop.is_set():
            fd = os.open(self.path, os.O_WRONLY)  # returns once a reader opened it
            self.reached.set()
            self._released.wait()
            try:
                os.write(fd, self.content)
            except BrokenPipeError:
                pass  # the reader was ``stop``, which reads nothing
            os.close(fd)


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def _fsck(env: Env) -> subprocess.CompletedProcess:
    return _store(env, "fsck", "--strict", "--no-progress")


def _store(env: Env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "--git-dir", str(env.home / "store.git"), *args],
                          capture_output=True, text=True)
