"""A long verification scan never lands among an agent's tool calls (snapshotd.watch.settle), and
when one runs, a tool call does not wait for it (snapshotd.watch.prescan: the scan is off the lock).

A verification used to hold the worktree's lock for a full stat scan: at a million files about
nine seconds, measured, and a tool call's capture of that worktree waited all of it (past the
hook's five-second budget). Such a scan cannot be made here in a test's time, so scans are
slowed with the ``full-scan`` delay seam (``SNAPSHOTD_DELAY_AT``: the full scan and the
verification's off-lock scan) to 1.5 s, and the periodic verification set to every second: once
one scan has taken that long, the next verification waits until the worktree has been quiet
twice as long. While an agent works (a tool call every 0.3 s) no verification runs; once it
stops, the verification runs, and still finds what no event announced (a write through a hard
link from outside the worktree: ``watcher-drift``); a tool call during it is not held up."""

from __future__ import annotations

import os
import time
from pathlib import Path
from random import Random

import pytest

from tests.conftest import Env, MakeDaemon, make_git_worktree
from tests.support.helpers import Workload, full_tree, git, wait_for

pytestmark = pytest.mark.one_ledger("when the watcher's verification scans run")

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


def test_a_tool_call_during_a_verification_scan_neither_waits_nor_is_drift(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """A verification's stat scan runs off the worktree's lock (``snapshotd.watch.prescan``): a tool
    call that comes while it runs is captured at once, not after the scan (it waited all of it:
    nine seconds at a million files). And what the agent wrote meanwhile is not drift, though
    the scan finds it and the watcher's paths were taken before or beside it (drift turns the
    fast path off for five minutes: at a million files, every tool call a nine-second scan).
    The mark file says when the slowed scan has begun, so the writes and the tool call land in
    it, not before or after."""
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
        started = time.monotonic()
        during_call = c.snapshot(str(wt), run_id="busy", node_id="n", source="hook")
        waited = time.monotonic() - started
        still_scanning = verifications(c) == before
        wait_for(lambda: verifications(c) > before, timeout=30, what="the verification")
        (wt / "after.txt").write_text("after\n")
        r = c.snapshot(str(wt), run_id="busy", node_id="n", source="hook")
        status = c.status()
    assert still_scanning and waited < 1.0, waited  # the scan takes 1.5 s
    assert during_call["scan"] == "fast" and during_call["changes"]["added"] == 2
    assert [g["detail"] for g in sd_env.read_gaps() if g["reason"] == "watcher-drift"] == []
    [row] = [w for w in status["watched"] if w["path"] == str(wt)]
    assert row["drifts"] == 0 and row["fast_path"] == "on"
    assert status["watcher"]["verify_full_scans"] == 0  # the off-lock scan stood in
    assert r["scan"] == "fast"
    tree = git(wt, "--git-dir", str(sd_env.home / "store.git"), "ls-tree", "-r", "--name-only",
               r["commit"])
    assert {"a.txt", "during.txt", "newdir/inside.txt", "after.txt"} <= set(tree.split())


def test_a_verification_the_off_lock_scan_cannot_stand_in_for_scans_fully_and_says_so(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """A worktree holding a nested repository (captured by a cache of its own) is verified by
    the full scan under the lock, as before: counted in ``verify_full_scans``, drift found."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "top.txt").write_text("top\n")
    make_git_worktree(wt / "inner")
    (wt / "inner" / "lib.txt").write_text("lib\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.link(wt / "top.txt", outside / "alias.txt")
    daemon = make_daemon(sd_env, {"SNAPSHOTD_SETTLE_MS": "100", "SNAPSHOTD_MAX_WAIT_MS": "300",
                                  "SNAPSHOTD_VERIFY_INTERVAL_S": "1"})
    with daemon.client() as c:
        c.attempt_begin("nested", "n", str(wt))
        c.snapshot(str(wt), run_id="nested", node_id="n")
        (wt / "b.txt").write_text("an event\n")
        with open(outside / "alias.txt", "w") as f:
            f.write("no event\n")
        drift = wait_for(lambda: [g for g in sd_env.read_gaps()
                                  if g["reason"] == "watcher-drift"],
                         timeout=30, what="the full verification to find the drift")
        # The scan records its drift before its capture returns and is counted.
        watcher = wait_for(lambda: (w := c.status()["watcher"])["verify_full_scans"] and w,
                           timeout=10, what="the verification counted as a full scan")
    assert {(g["run_id"], g["worktree"]) for g in drift} == {("nested", str(wt.resolve()))}
    assert watcher["verify_full_scans"] >= 1 and watcher["verifications"] >= 1


def test_random_work_among_verifications_stays_exact_and_is_never_drift(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """Verifications every second, off the lock, among an agent's random work (creates, edits,
    deletions, renames, modes, links, new and removed directory trees, ignored files, bursts)
    and its tool calls: every tool call's checkpoint is ``git add -A``'s tree, and no
    verification calls anything drift (every change came with its events)."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / ".gitignore").write_text("ignored_dir/\n")
    (wt / "src").mkdir()
    for i in range(40):
        (wt / "src" / f"s{i}.txt").write_text(f"{i}\n")
    daemon = make_daemon(sd_env, {"SNAPSHOTD_SETTLE_MS": "100", "SNAPSHOTD_MAX_WAIT_MS": "300",
                                  "SNAPSHOTD_VERIFY_INTERVAL_S": "1"})
    rng = Random(21)
    work = Workload(wt, rng)
    with daemon.client() as c:
        c.attempt_begin("random", "n", str(wt))
        c.snapshot(str(wt), run_id="random", node_id="n")
        for step in range(25):
            for _ in range(rng.randrange(1, 4)):
                work.step()
            r = c.snapshot(str(wt), run_id="random", node_id="n", source="hook")
            assert r["tree"] == full_tree(wt, tmp_path / "oracle-index"), f"step {step}"
            time.sleep(rng.choice([0.02, 0.1, 0.4, 1.1]))  # verifications come in the pauses
        counters = c.status()["watcher"]
    assert counters["verifications"] >= 3, counters
    assert [g["detail"] for g in sd_env.read_gaps() if g["reason"] == "watcher-drift"] == []
