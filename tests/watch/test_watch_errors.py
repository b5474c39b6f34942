"""Errors inside the watcher that switch a guarantee off for a while are never silent: each is
logged at warning and counted in the ``watcher`` map of ``status``. Real daemons, real faults
(a deleted cookie directory, a name the ignore rules cannot take, a window marker directory that
is a file); the ``notifier-close`` fault seam only where the native error cannot be provoked."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Daemon, Env, MakeDaemon, make_git_worktree
from tests.support.helpers import full_tree, wait_for

pytestmark = pytest.mark.one_ledger("the watcher's own errors")

# The status polls of these tests (s): as often as the watcher tests always polled.
POLL_S = 0.05


def counters(d: Daemon) -> dict:
    with d.client() as c:
        return c.status()["watcher"]


def test_a_cookie_that_cannot_be_written_is_counted_and_the_capture_scans(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    d = make_daemon(sd_env, QUIET_WATCHER)
    with d.client() as c:
        c.attempt_begin("cookie", "n", str(wt))
        c.snapshot(str(wt), run_id="cookie", node_id="n")  # the baseline scan
        (wt / "b.txt").write_text("b\n")
        assert c.snapshot(str(wt), run_id="cookie", node_id="n")["scan"] == "fast"
        assert c.status()["watcher"]["cookie_errors"] == 0
        shutil.rmtree(sd_env.home / "cookies")  # no cookie can be written now
        (wt / "c.txt").write_text("c\n")
        r = c.snapshot(str(wt), run_id="cookie", node_id="n")
        assert r["scan"] == "full" and r["changes"]["added"] == 1
        assert c.status()["watcher"]["cookie_errors"] >= 1
        # The cookie directory is gone for good: the notifier is replaced by one with a new
        # directory, and captures take the fast path again (not a full scan each, forever);
        # every change made meanwhile is in its checkpoint.
        deadline = time.monotonic() + 30
        scans = []
        while time.monotonic() < deadline:
            name = f"d{len(scans)}.txt"
            (wt / name).write_text(name)
            r = c.snapshot(str(wt), run_id="cookie", node_id="n")
            # Exactly the tree git sees (the rescan after the new watch may have taken the
            # file into a tier-2 checkpoint first, so the count of added files may be 0).
            assert r["tree"] == full_tree(wt, tmp_path / "oracle"), scans
            scans.append(r["scan"])
            if r["scan"] == "fast":
                break
            time.sleep(0.2)
        assert scans[-1] == "fast", scans
        assert "watch-failed" not in c.status()["gaps_by_reason"]  # nothing was missed
    assert "cookie round trip" in d.log.read_text()


def test_a_path_the_ignore_rules_cannot_take_is_counted_and_still_captured(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    d = make_daemon(sd_env, {"SNAPSHOTD_SETTLE_MS": "100", "SNAPSHOTD_MAX_WAIT_MS": "300"})
    with d.client() as c:
        c.attempt_begin("ignore", "n", str(wt))
        assert c.status()["watcher"]["ignore_errors"] == 0
    for i in range(2):
        with open(os.path.join(os.fsencode(wt), b"bad-\xff-%d.txt" % i), "wb") as f:
            f.write(b"a name the ignore rules cannot be asked about\n")
    wait_for(lambda: counters(d)["ignore_errors"] >= 2, every=POLL_S,
             what="two ignore_errors counted")
    # Not ignored, so it armed a window: the settled checkpoint holds the files.
    with d.client() as c:
        wait_for(lambda: c.list("ignore")["checkpoints"], every=POLL_S, what="a tier-2 checkpoint")
    log = d.log.read_text()
    assert log.count("cannot apply the ignore rules") == 1  # once per watch, then counted


def test_a_notifier_that_cannot_be_closed_is_counted(sd_env: Env, tmp_path: Path,
                                                     make_daemon: MakeDaemon) -> None:
    fault = tmp_path / "faults"
    fault.write_text("notifier-close=EIO\n")
    wt = make_git_worktree(tmp_path / "wt")
    d = make_daemon(sd_env, {**QUIET_WATCHER, "SNAPSHOTD_NOTIFIER": "watchfiles",
                             "SNAPSHOTD_LINGER_S": "0", "SNAPSHOTD_FAULT_FILE": str(fault)})
    with d.client() as c:
        c.attempt_begin("close", "n", str(wt))
        c.attempt_end("close", "n")
    # No linger: the watch is dropped after a short grace and its notifier closed.
    wait_for(lambda: counters(d)["notifier_close_errors"] >= 1, timeout=20,
             every=POLL_S, what="a notifier_close_errors count")
    assert "cannot close the notifier" in d.log.read_text()
    fault.unlink()  # so the daemon's stop when the test ends is not faulted too


def test_a_window_marker_that_cannot_be_written_is_counted(sd_env: Env, tmp_path: Path,
                                                           make_daemon: MakeDaemon) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    d = make_daemon(sd_env, {"SNAPSHOTD_SETTLE_MS": "100", "SNAPSHOTD_MAX_WAIT_MS": "300"})
    with d.client() as c:
        c.attempt_begin("marker", "n", str(wt))
    shutil.rmtree(sd_env.home / "watch")
    (sd_env.home / "watch").write_text("not a directory\n")
    (wt / "a.txt").write_text("a\n")
    wait_for(lambda: counters(d)["marker_errors"] >= 1, every=POLL_S, what="a marker_errors count")
    with d.client() as c:  # the capture itself goes on
        wait_for(lambda: c.list("marker")["checkpoints"], every=POLL_S, what="a tier-2 checkpoint")
    assert "cannot write window marker" in d.log.read_text()
