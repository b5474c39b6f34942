"""FIFOs, sockets and devices in a worktree: never opened (a FIFO would block a daemon thread for
good), never stored as content, listed on the checkpoint as skipped (reason ``special``), by
the full scan, the fast path's crawl of a new directory and tier 2 alike. And a stop that
finds a request stuck anyway finishes within its deadline."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from snapshotd.daemon.server import STOP_GRACE_S, STOP_HOOKS_S
from tests.conftest import QUIET_WATCHER, Daemon, Env, make_git_worktree
from tests.store.test_fastpath_store import full_tree
from tests.support.helpers import wait_for

pytestmark = pytest.mark.one_ledger("special files in a capture")

RUN = {"run_id": "special", "node_id": "n"}


def specials(reply: dict) -> dict[str, str]:
    return {s["path"]: s.get("kind", "") for s in reply["skipped"] if s["reason"] == "special"}


def make_specials(wt: Path) -> socket.socket:
    """A new directory holding a FIFO, a socket and a regular file; ``a.txt`` (captured before)
    replaced by a FIFO; a FIFO in an ignored directory and one with an ignored name. Returns
    the socket (the caller closes it)."""
    (wt / "build").mkdir()
    os.mkfifo(wt / "build" / "pipe")
    os.mkfifo(wt / "ignored.log")
    (wt / "new").mkdir()
    (wt / "new" / "reg.txt").write_text("regular\n")
    os.mkfifo(wt / "new" / "pipe")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(wt / "new" / "sock"))
    (wt / "a.txt").unlink()
    os.mkfifo(wt / "a.txt")
    return sock


def snapshot_in_time(c, wt: Path, **fields) -> dict:
    """A capture that must answer (a blocked daemon thread would make it hang)."""
    out: dict = {}

    def call() -> None:
        try:
            out["reply"] = c.snapshot(str(wt), **fields)
        except Exception as exc:  # noqa: BLE001 - reported below
            out["error"] = exc

    t = threading.Thread(target=call, daemon=True)
    t.start()
    t.join(20)
    assert not t.is_alive(), "the capture hung (a FIFO was opened)"
    assert "error" not in out, out.get("error")
    return out["reply"]


@pytest.mark.parametrize("scan", ["full", "fast"])
def test_fifos_and_sockets_are_skipped_as_special(sd_env: Env, tmp_path: Path, scan: str) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a file, later a FIFO\n")
    (wt / "b.txt").write_text("stays\n")
    (wt / ".gitignore").write_text("build/\n*.log\n")
    d = Daemon(sd_env, extra_env=dict(QUIET_WATCHER)).start()
    sock = None
    try:
        with d.client(timeout=30) as c:
            c.attempt_begin("special", "n", str(wt))
            c.snapshot(str(wt), **RUN)
            (wt / "b.txt").write_text("warm\n")
            assert c.snapshot(str(wt), **RUN)["scan"] == "fast"
        if scan == "full":
            # A fresh daemon has no watch baseline yet: its first capture is a full scan.
            d.stop()
            sock = make_specials(wt)
            d.start()
        else:
            sock = make_specials(wt)
        with d.client(timeout=30) as c:
            r = snapshot_in_time(c, wt, **RUN)
            assert r["scan"] == scan, r
            assert c.ping()
        shown = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", "special"],
                               env=sd_env.environ(), capture_output=True, text=True, timeout=60)
        assert "a.txt special" in shown.stdout, shown.stdout + shown.stderr
    finally:
        if sock is not None:
            sock.close()
        d.stop()
    # Both paths list every special file outside ignored paths (libgit2's diff reports none of
    # the new ones: the full scan lists them by a walk of directory entries), each once (the
    # fast path meets ``new/pipe`` as a reported path and in the crawl of ``new``).
    assert specials(r) == {"a.txt": "fifo", "new/pipe": "fifo", "new/sock": "socket"}, \
        r["skipped"]
    assert len(r["skipped"]) == len({s["path"] for s in r["skipped"]}), r["skipped"]
    assert r["tree"] == full_tree(wt, tmp_path / "oracle-index")


def test_a_device_in_a_new_directory_is_not_stored_as_an_empty_file(
        sd_env: Env, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    d = Daemon(sd_env, extra_env=dict(QUIET_WATCHER)).start()
    try:
        with d.client() as c:
            c.attempt_begin("special", "n", str(wt))
            c.snapshot(str(wt), **RUN)
            (wt / "dev").mkdir()
            try:
                os.mknod(wt / "dev" / "null", 0o600 | 0o020000, os.makedev(1, 3))
            except PermissionError:
                pytest.skip("mknod needs CAP_MKNOD")
            (wt / "dev" / "reg.txt").write_text("r\n")
            r = snapshot_in_time(c, wt, **RUN)
    finally:
        d.stop()
    assert specials(r).get("dev/null") == "char-device", r
    assert r["tree"] == full_tree(wt, tmp_path / "oracle-index")


def test_tier2_settles_a_directory_holding_a_fifo(sd_env: Env, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    d = Daemon(sd_env, extra_env={"SNAPSHOTD_SETTLE_MS": "200",
                                  "SNAPSHOTD_MAX_WAIT_MS": "1000"}).start()
    try:
        with d.client() as c:
            c.attempt_begin("special", "n", str(wt))
            c.snapshot(str(wt), **RUN)
            (wt / "new").mkdir()
            os.mkfifo(wt / "new" / "pipe")
            (wt / "new" / "reg.txt").write_text("regular\n")
            deadline = time.monotonic() + 20
            tier2: list = []
            while time.monotonic() < deadline and not tier2:
                time.sleep(0.2)
                tier2 = [cp for cp in c.list("special")["checkpoints"] if cp["tier"] == 2]
            assert tier2, "no tier-2 capture settled"
            # The daemon still answers captures of that worktree (no thread is stuck on it).
            r = snapshot_in_time(c, wt, **RUN, tool_use_id="after")
    finally:
        d.stop()
    assert r["tree"] == full_tree(wt, tmp_path / "oracle-index")


def test_sigterm_finishes_within_its_deadline_with_a_stuck_request(
        sd_env: Env, tmp_path: Path) -> None:
    """A capture stuck for good is made with the ``before-row`` delay seam (10 minutes): no real
    stuck system call is left to provoke once FIFOs are never opened."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    d = Daemon(sd_env, extra_env={**QUIET_WATCHER,
                                  "SNAPSHOTD_DELAY_AT": "before-row:600000"}).start()
    stuck = threading.Thread(target=lambda: _try_snapshot(d, wt), daemon=True)
    stuck.start()
    time.sleep(1.0)  # the capture is now asleep in its worker thread
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    # Exits (cleanly) within its grace, far short of the 10-minute capture it abandons.
    status = d.proc.wait(timeout=STOP_GRACE_S + STOP_HOOKS_S + 15)
    assert status == 0, status
    log = d.log.read_text()
    assert "abandoned" in log and "snapshot" in log, log[-2000:]


def _try_snapshot(d: Daemon, wt: Path) -> None:
    try:
        with d.client(timeout=700) as c:
            c.snapshot(str(wt), **RUN)
    except Exception:  # noqa: BLE001 - the daemon stops under it
        pass


def test_a_special_file_reported_with_its_new_directory_is_listed_once(sd_env: Env,
                                                                       tmp_path: Path) -> None:
    # The watcher reports both the new directory and the FIFO made in it once its watch was
    # set: the fast path meets the FIFO in the crawl of ``new`` and as a path of its own.
    wt = make_git_worktree(tmp_path / "wt")
    d = Daemon(sd_env, extra_env=dict(QUIET_WATCHER)).start()
    try:
        with d.client(timeout=30) as c:
            c.attempt_begin("special", "n", str(wt))
            c.snapshot(str(wt), **RUN)
            watches = c.status()["watcher"]["watches"]
            (wt / "new").mkdir()
            wait_for(lambda: c.status()["watcher"]["watches"] > watches, what="the new watch")
            os.mkfifo(wt / "new" / "pipe")
            (wt / "new" / "reg.txt").write_text("regular\n")
            r = snapshot_in_time(c, wt, **RUN)
    finally:
        d.stop()
    assert r["scan"] == "fast", r
    assert [s["path"] for s in r["skipped"]] == ["new/pipe"], r["skipped"]
    assert r["tree"] == full_tree(wt, tmp_path / "oracle-index")
