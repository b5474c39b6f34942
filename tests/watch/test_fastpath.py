"""The fast path: tier-1 captures take the watcher's changed paths (after a cookie round trip) instead
of a stat scan of the whole tree; after every step of a long randomized workload the fast
path's tree equals ``git add -A && git write-tree`` into a fresh private index."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path
from random import Random

import pytest

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, git, make_git_worktree
from tests.support.helpers import Workload, full_tree, wait_for

pytestmark = pytest.mark.one_ledger("the fast path's tree against git add -A")

STEPS = 150
SEED = 11


def test_fast_path_tier1_matches_a_full_capture_every_step(sd_env: Env, tmp_path: Path,
                                                           make_daemon: MakeDaemon) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / ".gitignore").write_text("ignored_dir/\n*.log\n")
    (wt / "src").mkdir()
    for i in range(30):
        (wt / "src" / f"s{i}.py").write_text(f"x = {i}\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    git(wt, "checkout", "-q", "-b", "side")
    shutil.rmtree(wt / "src")
    (wt / "lib" / "deep").mkdir(parents=True)
    for i in range(10):
        (wt / "lib" / "deep" / f"l{i}.py").write_text(f"side {i}\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "side")
    git(wt, "checkout", "-q", "main")
    daemon = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    with daemon.client() as c:
        c.attempt_begin("fast", "n", str(wt))
        c.snapshot(str(wt), run_id="fast", node_id="n")  # the full scan that makes a baseline
        work = Workload(wt, Random(SEED))
        branch = "main"
        for step in range(STEPS):
            if step % 25 == 24:
                # A branch switch rewrites whole directories under the watcher.
                git(wt, "add", "-A")
                git(wt, "commit", "-q", "-m", f"step {step}", "--allow-empty")
                branch = "side" if branch == "main" else "main"
                git(wt, "checkout", "-q", branch)
            else:
                work.step()
            r = c.snapshot(str(wt), run_id="fast", node_id="n", tool_use_id=f"t{step}")
            expected = full_tree(wt, tmp_path / "oracle-index")
            assert r["tree"] == expected, f"step {step}: the fast path diverged"
        status = c.status()
    daemon.stop()
    assert status["counters"]["fast_captures"] >= STEPS * 0.8, status["counters"]
    [row] = [w for w in status["watched"] if w["path"] == str(wt)]
    assert row["drifts"] == 0
    assert [g for g in sd_env.read_gaps() if g["reason"] == "watcher-drift"] == []


def test_drift_is_found_recorded_and_turns_the_fast_path_off(sd_env: Env, tmp_path: Path,
                                                             make_daemon: MakeDaemon) -> None:
    """A write the watcher cannot see (through a hard link outside the watched tree, which
    inotify reports only to the directory it was made through) is caught by the periodic
    verification scan: gap ``watcher-drift``, a checkpoint with the change, and full scans for
    that worktree afterwards."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("before\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.link(wt / "a.txt", outside / "alias.txt")
    env = {"SNAPSHOTD_SETTLE_MS": "200", "SNAPSHOTD_MAX_WAIT_MS": "1000",
           "SNAPSHOTD_VERIFY_INTERVAL_S": "1"}
    daemon = make_daemon(sd_env, extra_env=env)
    with daemon.client() as c:
        c.attempt_begin("drift", "n", str(wt))
        c.snapshot(str(wt), run_id="drift", node_id="n")
        (wt / "b.txt").write_text("b\n")
        r = c.snapshot(str(wt), run_id="drift", node_id="n")
        assert r["changes"]["added"] == 1
        before = c.status()["counters"]
        assert before["fast_captures"] >= 1
        with open(outside / "alias.txt", "w") as f:  # same inode, unwatched directory
            f.write("changed behind the watcher's back\n")
        wait_for(lambda: any(g["reason"] == "watcher-drift" for g in sd_env.read_gaps()),
                 what="the verification to record the drift")
        [gap] = [g for g in sd_env.read_gaps() if g["reason"] == "watcher-drift"]
        assert "a.txt" in gap["detail"] and gap["run_id"] == "drift"
        # The gap is written as the drift is found, the checkpoint of it a moment later.
        wait_for(lambda: len(c.list("drift")["checkpoints"]) >= 3,
                 what="the verification's checkpoint of the drifted file")
        cps = c.list("drift")["checkpoints"]
        store = ["--git-dir", str(sd_env.home / "store.git")]
        assert git(wt, *store, "show", f"{cps[-1]['commit']}:a.txt") == \
            "changed behind the watcher's back\n"
        status = c.status()
        [row] = [w for w in status["watched"] if w["path"] == str(wt)]
        assert row["fast_path"] == "off" and row["drifts"] == 1
        (wt / "c.txt").write_text("c\n")
        full_before = status["counters"]["full_scans"]
        c.snapshot(str(wt), run_id="drift", node_id="n")
        assert c.status()["counters"]["full_scans"] == full_before + 1


def test_a_write_just_before_a_capture_is_never_missed_while_events_stream(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """The cookie proves the notifier's queue is drained up to the capture; the poll thread may
    at that moment hold a batch it took but has not dispatched. Another worktree on the same
    notifier keeps that thread busy; every capture must still hold the write made just before
    it (same size, same second: only the event can tell)."""
    import threading

    import pygit2

    wt = make_git_worktree(tmp_path / "wt")
    busy = make_git_worktree(tmp_path / "busy")
    # Every batch the poll thread takes waits 30 ms before it is dispatched: the window is
    # wide open, so a capture that trusted the cookie alone would miss writes here.
    daemon = make_daemon(sd_env, extra_env={**QUIET_WATCHER,
                                            "SNAPSHOTD_DELAY_AT": "dispatch:30"})
    stop = threading.Event()

    def churn() -> None:
        i = 0
        while not stop.is_set():
            (busy / f"b{i % 50}.txt").write_text(f"{i}\n")
            i += 1

    try:
        with daemon.client() as c:
            c.attempt_begin("busy", "n", str(busy))
            c.attempt_begin("race", "n", str(wt))
            c.snapshot(str(wt), run_id="race", node_id="n")  # the baseline scan
            writer = threading.Thread(target=churn, daemon=True)
            writer.start()
            store = pygit2.Repository(str(sd_env.home / "store.git"))
            missed = []
            rng = Random(SEED)
            for i in range(100):
                body = f"write {i:06d}\n".encode()
                (wt / "f.txt").write_bytes(body)
                # Sometimes the poll thread takes the write's event first, sometimes the
                # capture's own drain does.
                time.sleep(rng.uniform(0, 0.06))
                r = c.snapshot(str(wt), run_id="race", node_id="n")
                if store[r["tree"]]["f.txt"].id != pygit2.hash(body):
                    missed.append(i)
            counters = c.status()["counters"]
    finally:
        stop.set()
    assert missed == [], f"captures missed the write made just before them: {missed[:10]}"
    assert counters["fast_captures"] >= 50, counters



def test_a_name_that_is_not_utf8_is_captured_exactly(sd_env: Env, tmp_path: Path,
                                                     make_daemon: MakeDaemon) -> None:
    """The inotify reader hands such a name over with surrogate escapes; the capture must
    still store the exact bytes (the git CLI, reading the same tree, is the oracle)."""
    wt = make_git_worktree(tmp_path / "wt")
    daemon = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    with daemon.client() as c:
        c.attempt_begin("bytes", "n", str(wt))
        c.snapshot(str(wt), run_id="bytes", node_id="n")
        bad = os.path.join(os.fsencode(wt), b"bad-\xff-name.txt")
        with open(bad, "wb") as f:
            f.write(b"latin-1 name\n")
        r = c.snapshot(str(wt), run_id="bytes", node_id="n")
        assert r["tree"] == full_tree(wt, tmp_path / "oracle1")
        with open(bad, "ab") as f:
            f.write(b"more\n")
        r = c.snapshot(str(wt), run_id="bytes", node_id="n")
        assert r["tree"] == full_tree(wt, tmp_path / "oracle2")
        os.unlink(bad)
        r = c.snapshot(str(wt), run_id="bytes", node_id="n")
        assert r["tree"] == full_tree(wt, tmp_path / "oracle3")
        assert not [g for g in sd_env.read_gaps()]


def test_a_kernel_queue_overflow_turns_the_next_capture_into_an_exact_full_scan(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """Events the kernel dropped can hide any change: the watcher hears of the overflow (our
    inotify reader reports it; watchfiles would not), and the next capture scans."""
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 100_000:
        pytest.skip(f"max_queued_events is {limit}: too many files to make here")
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "keep.txt").write_text("v1\n")
    # The reader thread holds each batch 2 s before dispatching it, so the kernel's queue
    # fills while it sleeps.
    daemon = make_daemon(sd_env, extra_env={**QUIET_WATCHER,
                                            "SNAPSHOTD_DELAY_AT": "dispatch:2000"})
    with daemon.client() as c:
        c.attempt_begin("flood", "n", str(wt))
        c.snapshot(str(wt), run_id="flood", node_id="n")
        (wt / "a").write_text("a\n")
        (wt / "b").write_text("b\n")
        time.sleep(0.1)  # the reader takes these events and sleeps on them
        # Alternating files: the kernel merges only an event identical to the last one.
        for i in range(limit + 500):
            os.chmod(wt / ("a" if i % 2 else "b"), 0o644 if (i // 2) % 2 else 0o600)
        (wt / "keep.txt").write_text("v2\n")
        wait_for(lambda: c.status()["watcher"]["overflows"] >= 1, timeout=30,
                 what="the reader to hear of the overflow")
        r = c.snapshot(str(wt), run_id="flood", node_id="n")
        assert r["scan"] == "full"
        assert r["tree"] == full_tree(wt, tmp_path / "oracle")


def test_a_notifier_merge_hands_over_without_a_full_scan_and_misses_nothing(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """Two attempts start two notifiers; once things are quiet they are merged into one. The
    old notifier's queue is drained into the worktree's changed paths before the fast path
    trusts the new one alone, so captures stay fast across the merge and hold every write."""
    import pygit2

    wt = make_git_worktree(tmp_path / "wt")
    other = make_git_worktree(tmp_path / "other")
    daemon = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    with daemon.client() as c:
        c.attempt_begin("merge", "n", str(wt))
        c.attempt_begin("other", "n", str(other))
        c.snapshot(str(wt), run_id="merge", node_id="n")  # the baseline scan
        assert c.status()["watcher"]["merges"] == 0
        store = pygit2.Repository(str(sd_env.home / "store.git"))
        missed, scans, i = [], [], 0
        merged_at = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            body = f"write {i:06d}\n".encode()
            (wt / "f.txt").write_bytes(body)
            r = c.snapshot(str(wt), run_id="merge", node_id="n")
            if store[r["tree"]]["f.txt"].id != pygit2.hash(body):
                missed.append(i)
            scans.append(r["scan"])
            i += 1
            if merged_at is None and c.status()["watcher"]["merges"] >= 1:
                merged_at = i
            if merged_at is not None and i >= merged_at + 50:
                break
        watched = {w["path"]: w for w in c.status()["watched"]}
    daemon.stop()
    assert merged_at is not None, "the notifiers were never merged"
    assert missed == [], f"captures missed the write made just before them: {missed[:10]}"
    assert scans[1:].count("full") == 0, ([k for k, s in enumerate(scans) if s == "full"], merged_at, len(scans))  # not even the capture after the merge
    assert watched[str(wt)]["fast_path"] == "on"


def test_a_new_directory_and_its_file_reported_apart_are_taken_once(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """The watcher reports a new directory and, once it watches it, a file written in it: the
    capture crawls the directory (which takes the file) and must not take the file again (its
    secret finding, its skip, its count twice). Seen as a key listed twice in a flaky
    tests/features/review/test_export_secrets.py run."""
    key = "sk-proj-Qm3xT8vR2kLp9Wz4Yb7Nc1Hd6Fg0Js5A"
    wt = make_git_worktree(tmp_path / "wt")
    daemon = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    with daemon.client() as c:
        c.attempt_begin("apart", "n", str(wt))
        c.snapshot(str(wt), run_id="apart", node_id="n")
        (wt / "conf").mkdir()
        time.sleep(0.5)  # the watcher now watches conf/: the file below is an event of its own
        (wt / "conf" / "keys.txt").write_text(f"key = {key}\n")
        (wt / "conf" / "fifo").parent.mkdir(exist_ok=True)
        os.mkfifo(wt / "conf" / "fifo")
        time.sleep(0.2)
        reply = c.snapshot(str(wt), run_id="apart", node_id="n", tool_use_id="t1")
    assert reply["scan"] == "fast"
    assert [f["path"] for f in reply["secrets"]] == ["conf/keys.txt"]
    assert [s["path"] for s in reply["skipped"]] == ["conf/fifo"]
    assert reply["changes"] == {"added": 1, "modified": 0, "deleted": 0}
