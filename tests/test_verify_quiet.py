"""A long verification scan never lands among an agent's tool calls (snapshotd.settle).

A verification holds the worktree's lock for a full stat scan: at a million files about nine
seconds, measured, and a tool call's capture of that worktree waited all of it (past the hook's
five-second budget). Such a scan cannot be made here in a test's time, so the full scan is
slowed with the ``full-scan`` delay seam (``SNAPSHOTD_DELAY_AT``) to 1.5 s, and the periodic
verification set to every second: once one verification has taken that long, the next waits
until the worktree has been quiet twice as long. While an agent works (a tool call every 0.3 s)
no capture waits behind a scan; once it stops, the verification runs, and still finds what no
event announced (a write through a hard link from outside the worktree: ``watcher-drift``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

from conftest import Env, MakeDaemon, make_git_worktree
from helpers import git, wait_for

SLOW_SCAN = {"SNAPSHOTD_SETTLE_MS": "100", "SNAPSHOTD_MAX_WAIT_MS": "300",
             "SNAPSHOTD_VERIFY_INTERVAL_S": "1", "SNAPSHOTD_DELAY_AT": "full-scan:1500"}


def test_a_slow_verification_waits_for_a_quiet_worktree_and_still_finds_drift(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("before\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.link(wt / "a.txt", outside / "alias.txt")  # writes through it raise no event in wt
    daemon = make_daemon(sd_env, SLOW_SCAN)

    def verifications(c) -> int:
        return int(c.status()["watcher"]["verifications"])

    with daemon.client() as c:
        c.attempt_begin("quiet", "n", str(wt))
        c.snapshot(str(wt), run_id="quiet", node_id="n")  # the baseline: a full scan
        (wt / "warm.txt").write_text("warm\n")
        # One verification (1.5 s) so the daemon knows its scans are slow.
        wait_for(lambda: verifications(c) >= 1, timeout=30, what="a first verification")
        before = verifications(c)
        with open(outside / "alias.txt", "w") as f:
            f.write("an unseen write\n")
        # An agent at work: a tool call every 0.3 s for 6 s (six verification intervals).
        waits = []
        for i in range(20):
            (wt / f"tool-{i}.txt").write_text(f"{i}\n")
            started = time.monotonic()
            c.snapshot(str(wt), run_id="quiet", node_id="n", source="hook")
            waits.append(time.monotonic() - started)
            time.sleep(0.3)
        during = verifications(c) - before
        # It stops: the verification runs once the worktree has been quiet for 3 s.
        wait_for(lambda: verifications(c) > before, timeout=30, what="the deferred verification")
    assert during == 0
    assert max(waits) < 1.0, waits  # a scan's 1.5 s was never among them
    wait_for(lambda: [g for g in sd_env.read_gaps() if g["reason"] == "watcher-drift"],
             timeout=30, what="the drift the deferred verification found")


def test_a_write_during_a_verification_scan_is_not_drift(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """A verification takes the watcher's changed paths, then scans: a file the agent writes
    while the scan runs is found by the scan and is not among the paths taken, yet its event
    came. That is not drift (at a million files, drift turns the fast path off for five
    minutes: every tool call a nine-second scan). The mark file says when a scan is inside
    its slowed window, so the writes land in it, not before or after."""
    wt = make_git_worktree(tmp_path / "wt")
    mark = tmp_path / "scan-began"
    daemon = make_daemon(sd_env, {**SLOW_SCAN, "SNAPSHOTD_DELAY_MARK": str(mark)})

    def verifications(c) -> int:
        return int(c.status()["watcher"]["verifications"])

    with daemon.client() as c:
        c.attempt_begin("busy", "n", str(wt))
        c.snapshot(str(wt), run_id="busy", node_id="n")  # the baseline: a full scan
        mark.unlink()
        before = verifications(c)
        (wt / "a.txt").write_text("a tool call's write\n")
        c.snapshot(str(wt), run_id="busy", node_id="n", source="hook")  # through the events
        # The verification those events call for starts once the worktree is quiet.
        wait_for(mark.exists, timeout=30, what="a verification scan to begin")
        (wt / "during.txt").write_text("written while the scan runs\n")
        (wt / "newdir").mkdir()
        (wt / "newdir" / "inside.txt").write_text("a new directory's file\n")
        wait_for(lambda: verifications(c) > before, timeout=30, what="the verification")
        # A tool call after it: everything written is in its checkpoint, through the events.
        r = c.snapshot(str(wt), run_id="busy", node_id="n", source="hook")
        status = c.status()
    assert [g["detail"] for g in sd_env.read_gaps() if g["reason"] == "watcher-drift"] == []
    [row] = [w for w in status["watched"] if w["path"] == str(wt)]
    assert row["drifts"] == 0 and row["fast_path"] == "on"
    assert r["scan"] == "fast"
    tree = git(wt, "--git-dir", str(sd_env.home / "store.git"), "ls-tree", "-r", "--name-only",
               r["commit"])
    assert {"a.txt", "during.txt", "newdir/inside.txt"} <= set(tree.split())
