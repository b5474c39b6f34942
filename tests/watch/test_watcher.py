"""Tier 2 end to end: the daemon's own watcher, settle windows, flush, crash and failure paths.

Real daemon subprocesses, real worktrees and file writes, the git CLI as the oracle for trees.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, MakeDaemon, git, make_git_worktree
from tests.support.helpers import open_markers, wait_for, wait_windows_recovered

pytestmark = pytest.mark.one_ledger("tier 2's settle windows and trees")

WATCH_ENV = {"SNAPSHOTD_SCAN_INTERVAL_S": "0.3"}


def checkpoints(d: Daemon, run_id: str, node_id: str | None = None) -> list[dict]:
    with d.client() as c:
        return c.list(run_id, node_id)["checkpoints"]


def scratch_tree(src: Path, scratch: Path) -> str:
    """What ``git add -A && git write-tree`` gives for the same files in a fresh repository."""
    shutil.copytree(src, scratch, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    git(scratch, "init", "-q")
    git(scratch, "add", "-A")
    return git(scratch, "write-tree").strip()


def watched_row(d: Daemon, root: Path) -> dict | None:
    with d.client() as c:
        rows = c.status().get("watched", [])
    return next((r for r in rows if r["path"] == str(root.resolve())), None)


def begin(d: Daemon, run: str, wt: Path, **timing: int) -> dict:
    with d.client() as c:
        return c.attempt_begin(run, "n", str(wt), **timing)


def test_one_write_settles_into_one_checkpoint_and_idle_records_nothing(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    d = make_daemon(sd_env, extra_env=WATCH_ENV)
    wt = make_git_worktree(tmp_path / "wt")
    begin(d, "settle", wt, settle_ms=600, max_wait_ms=5000)
    written = time.time()
    (wt / "notes.txt").write_text("first draft\n")
    [cp] = wait_for(lambda: checkpoints(d, "settle"), timeout=10)
    assert cp["tier"] == 2 and cp["source"] == "watch" and cp["seq"] == 0
    # Not before the writes went quiet for settle_ms, and soon after (generous slack).
    assert 0.55 <= cp["created_at"] - written < 0.6 + 3.0
    assert cp["tree"] == scratch_tree(wt, tmp_path / "scratch")
    row = watched_row(d, wt)
    assert row is not None and row["state"] == "watching" and row["settle_ms"] == 600
    captures = row["captures"]
    # One verification follows the capture (VERIFY_DELAY_S after it) ...
    wait_for(lambda: (watched_row(d, wt) or {}).get("captures", 0) > captures,
             what="the verification after the settled capture")
    # ... then idle time passes (several scan intervals): no checkpoint, not even a capture.
    time.sleep(1.5)
    assert len(checkpoints(d, "settle")) == 1
    after = watched_row(d, wt)
    assert after is not None and after["captures"] == captures + 1  # one verification
    assert after["window_open_s"] is None


def test_writes_that_never_settle_are_captured_every_max_wait(sd_env: Env,
                                                               tmp_path: Path,
                                                               make_daemon: MakeDaemon) -> None:
    d = make_daemon(sd_env)
    wt = make_git_worktree(tmp_path / "wt")
    begin(d, "burst", wt, settle_ms=200, max_wait_ms=1000)
    target = wt / "log.txt"
    started = time.time()
    # Every 50 ms for 8 s: never quiet for 200 ms. Due every 1 s, at least 4 captures must land:
    # a generous bound that still fails without max-wait (no window would ever settle), and
    # leaves room for a capture stalled seconds on a loaded CI machine (seen once).
    for i in range(160):
        with target.open("a") as f:
            f.write(f"line {i}\n")
        time.sleep(0.05)
    ended = time.time()
    during = [cp for cp in checkpoints(d, "burst") if started <= cp["created_at"] <= ended]
    assert len(during) >= 4, [cp["created_at"] - started for cp in during]
    expected = scratch_tree(wt, tmp_path / "scratch")
    final = wait_for(lambda: [cp for cp in checkpoints(d, "burst")
                              if cp["tree"] == expected], timeout=10)
    assert final, "the end state never reached a checkpoint"
    cps = checkpoints(d, "burst")
    assert cps[-1]["tree"] == expected
    assert [cp["seq"] for cp in cps] == list(range(len(cps)))
    assert all(cp["source"] == "watch" and cp["tier"] == 2 for cp in cps)


def test_files_in_new_nested_directories_all_reach_the_settled_checkpoint(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    d = make_daemon(sd_env)
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "README").write_text("base\n")
    begin(d, "nested", wt, settle_ms=300, max_wait_ms=3000)
    for i in range(50):  # mkdir -p a/b/c then files at once: the race native watchers lose
        deep = wt / f"pkg{i}" / "sub" / "deeper"
        deep.mkdir(parents=True)
        for j in range(40):
            (deep / f"f{j}.py").write_text(f"# {i}/{j}\n")
    expected = scratch_tree(wt, tmp_path / "scratch")
    assert wait_for(lambda: any(cp["tree"] == expected for cp in checkpoints(d, "nested")),
                    timeout=20), "no checkpoint holds all 2,000 files"
    last = checkpoints(d, "nested")[-1]
    assert last["tree"] == expected
    out = git(sd_env.home, "--git-dir", str(sd_env.home / "store.git"), "ls-tree", "-r",
              "--name-only", last["commit"])
    assert len(out.splitlines()) == 2001


def test_ignored_paths_and_git_internals_arm_nothing(sd_env: Env, tmp_path: Path,
                                                     make_daemon: MakeDaemon) -> None:
    d = make_daemon(sd_env)
    wt = make_git_worktree(tmp_path / "wt")
    (wt / ".gitignore").write_text("build/\n*.log\n")
    (wt / "src").mkdir()
    (wt / "src" / ".gitignore").write_text("generated/\n")
    (wt / "src" / "main.py").write_text("print(1)\n")
    begin(d, "ignored", wt, settle_ms=100, max_wait_ms=500)
    with d.client() as c:
        c.flush(str(wt))
    base = wait_for(lambda: watched_row(d, wt))
    assert base and len(checkpoints(d, "ignored")) == 1
    wait_for(lambda: (watched_row(d, wt) or {}).get("captures", 0) > base["captures"],
             what="the flush's own verification")
    before = watched_row(d, wt)
    assert before is not None
    (wt / "build" / "obj").mkdir(parents=True)
    (wt / "build" / "obj" / "a.o").write_bytes(b"\0" * 100)
    (wt / "debug.log").write_text("noise\n")
    (wt / "src" / "generated" / "deep").mkdir(parents=True)
    (wt / "src" / "generated" / "deep" / "x.py").write_text("x = 1\n")
    git(wt, "add", "src/main.py")
    git(wt, "commit", "-q", "-m", "only .git changes")
    (wt / ".git" / "scratch-file").write_text("inside .git\n")
    # Let time pass: an armed window would have settled (100 ms) and been captured by now.
    time.sleep(1.0)
    after = watched_row(d, wt)
    assert after is not None
    assert after["captures"] == before["captures"], "an ignored change armed a capture"
    assert after["window_open_s"] is None
    assert len(checkpoints(d, "ignored")) == 1
    # The watcher is alive: a real change is captured.
    (wt / "src" / "main.py").write_text("print(2)\n")
    assert wait_for(lambda: len(checkpoints(d, "ignored")) == 2, timeout=10)


def test_kill_9_with_an_open_window_is_a_gap_and_a_capture_on_restart(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    first = make_daemon(sd_env)
    begin(first, "crash", wt, settle_ms=20000, max_wait_ms=60000)
    (wt / "unsaved.txt").write_text("written just before the crash\n")
    assert wait_for(lambda: open_markers(sd_env.home), timeout=10), "no window opened"
    first.kill9()
    assert checkpoints_offline(sd_env, "crash") == []
    second = make_daemon(sd_env)
    cps = wait_for(lambda: checkpoints(second, "crash"), timeout=15)
    assert len(cps) == 1 and cps[0]["source"] == "watch"
    assert cps[0]["tree"] == scratch_tree(wt, tmp_path / "scratch")
    [gap] = [g for g in sd_env.read_gaps() if g["reason"] == "settle-window-missed"]
    assert gap["run_id"] == "crash" and gap["worktree"] == str(wt.resolve())
    assert "opened at" in gap["detail"] and gap["tier"] == 2
    assert wait_for(lambda: not open_markers(sd_env.home), timeout=5)


def test_a_window_marker_is_rewritten_in_place_not_made_and_removed_each_window(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """A settle window's crash marker is one file per watched worktree, rewritten in place as
    windows open and close: a window costs no file made and removed (on ext4 without a journal
    every freed inode slows each later file creation near it for minutes). Its record still
    does its job: a kill -9 with a later window open is one gap and a capture."""
    wt = make_git_worktree(tmp_path / "wt")
    first = make_daemon(sd_env)
    begin(first, "inplace", wt, settle_ms=200, max_wait_ms=2000)
    inodes = set()
    for i in range(3):
        (wt / "notes.txt").write_text(f"draft {i}\n")
        [record] = wait_for(lambda: open_markers(sd_env.home), timeout=10)
        assert record["worktree"] == str(wt.resolve()) and record["run_id"] == "inplace"
        [marker] = (sd_env.home / "watch").glob("*.json")
        inodes.add(marker.stat().st_ino)
        wait_for(lambda: not open_markers(sd_env.home), timeout=10, what="the window to settle")
        assert marker.exists() and marker.stat().st_ino in inodes
        assert len(checkpoints(first, "inplace")) == i + 1  # the capture closed the window
    assert len(inodes) == 1, inodes
    # The next attempt takes the watch over; its window stays open until the kill.
    with first.client() as c:
        c.attempt_begin("inplace", "n", str(wt), attempt=2, settle_ms=20000, max_wait_ms=60000)
    (wt / "notes.txt").write_text("unsaved at the crash\n")
    [record] = wait_for(lambda: open_markers(sd_env.home), timeout=10)
    assert record["attempt"] == 2
    assert [m.stat().st_ino for m in (sd_env.home / "watch").glob("*.json")] == list(inodes)
    first.kill9()
    make_daemon(sd_env)
    wait_windows_recovered(sd_env.home)
    gaps = [g for g in sd_env.read_gaps() if g["reason"] == "settle-window-missed"]
    assert [(g["run_id"], g["attempt"]) for g in gaps] == [("inplace", 2)], gaps


def checkpoints_offline(env: Env, run_id: str) -> list[dict]:
    import json

    out = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", run_id, "--json"],
                         env=env.environ(), capture_output=True)
    if out.returncode != 0:
        return []
    return json.loads(out.stdout)["checkpoints"]


def test_sigterm_captures_the_pending_window_and_restart_resumes_watching(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    first = make_daemon(sd_env)
    begin(first, "term", wt, settle_ms=3000, max_wait_ms=6000)
    (wt / "pending.txt").write_text("pending at shutdown\n")
    assert wait_for(lambda: open_markers(sd_env.home), timeout=10)
    assert not checkpoints(first, "term")
    assert first.stop() == 0
    [cp] = checkpoints_offline(sd_env, "term")
    assert cp["source"] == "watch" and cp["tree"] == scratch_tree(wt, tmp_path / "s1")
    assert not list((sd_env.home / "watch").glob("*.json"))
    second = make_daemon(sd_env)
    (wt / "after-restart.txt").write_text("seen by the resumed watch\n")
    assert wait_for(lambda: len(checkpoints(second, "term")) == 2, timeout=15)
    assert checkpoints(second, "term")[1]["tree"] == scratch_tree(wt, tmp_path / "s2")
    assert not [g for g in sd_env.read_gaps() if g["reason"] == "settle-window-missed"]


def test_deleted_worktree_ends_its_watch_and_the_others_keep_working(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    d = make_daemon(sd_env, extra_env=WATCH_ENV)
    doomed = make_git_worktree(tmp_path / "doomed")
    kept = make_git_worktree(tmp_path / "kept")
    for wt in (doomed, kept):
        (wt / "a.txt").write_text("a\n")
    begin(d, "doomed", doomed, settle_ms=100, max_wait_ms=500)
    begin(d, "kept", kept, settle_ms=100, max_wait_ms=500)
    (doomed / "b.txt").write_text("b\n")
    assert wait_for(lambda: checkpoints(d, "doomed"), timeout=10)
    shutil.rmtree(doomed)
    gaps = wait_for(lambda: [g for g in sd_env.read_gaps()
                             if g["reason"] == "worktree-missing"], timeout=10)
    assert gaps and gaps[0]["worktree"] == str(doomed.resolve())
    row = wait_for(lambda: (watched_row(d, doomed) or {}).get("state") == "missing"
                   and watched_row(d, doomed), timeout=5)
    assert row and row["degraded_reason"] == "worktree-missing"
    (kept / "c.txt").write_text("c\n")
    assert wait_for(lambda: checkpoints(d, "kept"), timeout=10)
    assert d.ping() and d.proc is not None and d.proc.poll() is None
    time.sleep(1.0)  # periodic probes of the missing worktree stay quiet
    assert len([g for g in sd_env.read_gaps() if g["reason"] == "worktree-missing"]) == 1
    assert "Traceback" not in d.log.read_text()


@pytest.mark.parametrize("notifier", ["inotify", "watchfiles"])
def test_a_failing_watcher_degrades_to_periodic_scans_then_recovers(
        sd_env: Env, tmp_path: Path, notifier: str, make_daemon: MakeDaemon) -> None:
    fault = tmp_path / "faults"
    d = make_daemon(sd_env, extra_env={**WATCH_ENV, "SNAPSHOTD_NOTIFIER": notifier,
                                       "SNAPSHOTD_FAULT_FILE": str(fault)})
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    begin(d, "degraded", wt, settle_ms=100, max_wait_ms=500)
    if notifier == "inotify":
        # The watch limit reached while a new directory is being watched.
        fault.write_text("watch=ENOSPC\n")
        (wt / "newdir").mkdir()
        (wt / "newdir" / "f.txt").write_text("in a directory nobody could watch\n")
    else:
        # A file name that is not UTF-8 kills watchfiles' event queue for good.
        bad = os.path.join(os.fsencode(wt), b"bad-\xff-name")
        with open(bad, "wb") as f:
            f.write(b"x")
    gap = wait_for(lambda: [g for g in sd_env.read_gaps() if g["reason"] == "watch-failed"],
                   timeout=10)
    assert gap and gap[0]["worktree"] == str(wt.resolve()) and gap[0]["tier"] == 2
    if notifier == "inotify":
        assert "watch limit" in gap[0]["detail"]
    row = watched_row(d, wt)
    assert row is not None and row["state"] == "degraded"
    assert row["degraded_reason"] == "watch-failed"
    if notifier == "watchfiles":
        os.unlink(bad)
    # No watcher now, yet a change is captured by the periodic stat scan.
    count = len(checkpoints(d, "degraded"))
    (wt / "while-degraded.txt").write_text("found by a scan\n")
    expected = scratch_tree(wt, tmp_path / "scratch")
    assert wait_for(lambda: any(cp["tree"] == expected
                                for cp in checkpoints(d, "degraded")[count:]), timeout=10)
    # The watch is retried (15 scan intervals; silently while it still fails) and comes back.
    time.sleep(1.0)
    fault.unlink(missing_ok=True)
    assert wait_for(lambda: (watched_row(d, wt) or {}).get("state") == "watching",
                    timeout=15)
    count = len(checkpoints(d, "degraded"))
    (wt / "watched-again.txt").write_text("x\n")
    assert wait_for(lambda: len(checkpoints(d, "degraded")) > count, timeout=10)
    assert len([g for g in sd_env.read_gaps() if g["reason"] == "watch-failed"]) == 1
    assert "Traceback" not in d.log.read_text()


def test_tier1_racing_tier2_keeps_seqs_increasing_and_no_tree_twice(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    d = make_daemon(sd_env)
    wt = make_git_worktree(tmp_path / "wt")
    begin(d, "race", wt, settle_ms=30, max_wait_ms=60)
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            (wt / f"f{i % 7}.txt").write_text(f"{i}\n")
            i += 1
            time.sleep(0.01)

    thread = threading.Thread(target=writer)
    thread.start()
    replies = []
    try:
        with d.client() as c:
            for i in range(40):
                replies.append(c.snapshot(str(wt), run_id="race", node_id="n",
                                          source="hook", tool_use_id=f"toolu_{i}"))
                time.sleep(0.02)
    finally:
        stop.set()
        thread.join()
    with d.client() as c:
        c.flush(str(wt))
    cps = checkpoints(d, "race")
    seqs = [cp["seq"] for cp in cps]
    assert seqs == list(range(len(cps)))
    assert {cp["source"] for cp in cps} == {"hook", "watch"}
    for prev, cur in zip(cps, cps[1:], strict=False):
        assert prev["tree"] != cur["tree"], (prev["seq"], cur["seq"])
        assert cur["parent"] == prev["commit"]
    assert all(r["seq"] in seqs for r in replies)
    assert cps[-1]["tree"] == scratch_tree(wt, tmp_path / "scratch")


def test_flush_cli_and_ended_or_superseded_attempts_are_never_captured(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    d = make_daemon(sd_env)
    wt = make_git_worktree(tmp_path / "wt")
    begin(d, "flush", wt, settle_ms=30000, max_wait_ms=60000)
    (wt / "sub").mkdir()
    (wt / "sub" / "now.txt").write_text("flush me\n")
    out = subprocess.run([sys.executable, "-m", "snapshotd", "flush", "--cwd",
                          str(wt / "sub")], env=sd_env.environ(), capture_output=True)
    assert out.returncode == 0, out.stderr
    [cp] = checkpoints(d, "flush")
    assert cp["source"] == "watch" and cp["tree"] == scratch_tree(wt, tmp_path / "s1")
    # A superseding attempt takes the watch over; the old one gets nothing more.
    with d.client() as c:
        new = c.attempt_begin("flush", "n", str(wt), settle_ms=100, max_wait_ms=400)
    assert new["attempt"] == 2
    (wt / "later.txt").write_text("belongs to attempt 2\n")
    assert wait_for(lambda: [cp for cp in checkpoints(d, "flush") if cp["attempt"] == 2],
                    timeout=10)
    assert len([cp for cp in checkpoints(d, "flush") if cp["attempt"] == 1]) == 1
    with d.client() as c:
        c.attempt_end("flush", "n", attempt=2)
    count = len(checkpoints(d, "flush"))
    (wt / "after-end.txt").write_text("nobody's\n")
    # Let time pass: a window on it would have settled (100 ms) or hit max_wait (400 ms).
    time.sleep(1.0)
    assert len(checkpoints(d, "flush")) == count
    assert not [g for g in sd_env.read_gaps() if g["reason"] == "fenced"]
    # Flushing a directory nobody watches is a no-op; with no daemon it says so (exit 3).
    out = subprocess.run([sys.executable, "-m", "snapshotd", "flush", "--cwd", str(wt)],
                         env=sd_env.environ(), capture_output=True)
    assert out.returncode == 0, out.stderr
    d.stop()
    out = subprocess.run([sys.executable, "-m", "snapshotd", "flush", "--cwd", str(wt)],
                         env=sd_env.environ(), capture_output=True)
    assert out.returncode == 3 and b"snapshotd serve" in out.stderr


def test_a_lingering_watch_records_nothing_verifies_and_ends(sd_env: Env, tmp_path: Path,
                                                             make_daemon: MakeDaemon) -> None:
    """After its attempt ends a worktree stays passively watched: changes open no window and
    record nothing, a verification (a full scan, recording nothing) still finds a write no event
    reported, and the watch ends after ``linger_s`` without events or when the worktree goes."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("before\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.link(wt / "a.txt", outside / "alias.txt")  # a write through it raises no event in wt
    gone = make_git_worktree(tmp_path / "gone")
    env = {"SNAPSHOTD_SETTLE_MS": "100", "SNAPSHOTD_MAX_WAIT_MS": "300",
           "SNAPSHOTD_VERIFY_INTERVAL_S": "1", "SNAPSHOTD_LINGER_S": "6", **WATCH_ENV}
    d = make_daemon(sd_env, extra_env=env)
    with d.client() as c:
        for run, root in (("linger", wt), ("gone", gone)):
            c.attempt_begin(run, "n", str(root))
            c.snapshot(str(root), run_id=run, node_id="n")
            c.attempt_end(run, "n")
    row = watched_row(d, wt)
    assert row is not None and row["state"] == "lingering", row
    assert row["ended_attempt"] == "linger/n/0/1" and row["fast_path"] == "on"
    assert watched_row(d, gone)["state"] == "lingering"
    count = len(checkpoints(d, "linger"))
    # A deleted worktree ends its lingering watch, with no gap (nothing was owed to it).
    shutil.rmtree(gone)
    assert wait_for(lambda: watched_row(d, gone) is None, timeout=4)
    (wt / "b.txt").write_text("b\n")  # an event: a verification follows
    with open(outside / "alias.txt", "w") as f:
        f.write("changed behind the watcher's back\n")
    assert wait_for(lambda: [g for g in sd_env.read_gaps()
                             if g["reason"] == "watcher-drift"], timeout=10)
    [gap] = [g for g in sd_env.read_gaps() if g["reason"] == "watcher-drift"]
    assert "a.txt" in gap["detail"] and gap["run_id"] == "linger"
    row = watched_row(d, wt)
    assert row["state"] == "lingering" and row["fast_path"] == "off" and row["drifts"] == 1
    assert len(checkpoints(d, "linger")) == count  # no window, no tier-2 checkpoint
    assert not [g for g in sd_env.read_gaps() if g["reason"] == "worktree-missing"]
    # No event for linger_s: the watch ends.
    assert wait_for(lambda: watched_row(d, wt) is None, timeout=20)


def test_a_symlinked_directory_turns_the_fast_path_off_and_captures_stay_exact(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """watchfiles (the notifier where there is no inotify) follows a symlink to a directory when
    it walks, and then reports the real directory's changes under the link's path; such a watch
    must not feed the fast path."""
    from tests.conftest import QUIET_WATCHER

    wt = make_git_worktree(tmp_path / "wt")
    (wt / "src").mkdir()
    (wt / "src" / "app.py").write_text("v1\n")
    os.symlink("src", wt / "dirlink")
    d = make_daemon(sd_env, extra_env={**QUIET_WATCHER, "SNAPSHOTD_NOTIFIER": "watchfiles"})
    with d.client() as c:
        c.attempt_begin("alias", "n", str(wt))
        c.snapshot(str(wt), run_id="alias", node_id="n")
        (wt / "src" / "app.py").write_text("v2\n")
        r = c.snapshot(str(wt), run_id="alias", node_id="n")
    assert r["scan"] == "full"
    assert r["tree"] == scratch_tree(wt, tmp_path / "oracle")
    assert r["changes"] == {"added": 0, "modified": 1, "deleted": 0}
    row = watched_row(d, wt)
    assert row["symlinked_dirs"] is True and row["fast_path"] == "off"


def test_inotify_never_follows_a_symlinked_directory_and_keeps_the_fast_path(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """Our inotify reader watches the real directory under its own name only: writes through
    the link, deleting the link, and links pointing out of the worktree change nothing about
    what the fast path sees."""
    from tests.conftest import QUIET_WATCHER

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "o.txt").write_text("outside\n")
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "src").mkdir()
    (wt / "src" / "app.py").write_text("v1\n")
    os.symlink("src", wt / "dirlink")
    os.symlink(str(outside), wt / "outlink")
    d = make_daemon(sd_env, extra_env={**QUIET_WATCHER, "SNAPSHOTD_NOTIFIER": "inotify"})
    with d.client() as c:
        c.attempt_begin("alias", "n", str(wt))
        c.snapshot(str(wt), run_id="alias", node_id="n")
        steps = [
            lambda: (wt / "dirlink" / "app.py").write_text("v2 through the link\n"),
            lambda: (wt / "dirlink").unlink(),
            lambda: (wt / "src" / "app.py").write_text("v3 after the link went\n"),
            lambda: (outside / "o.txt").write_text("changed outside\n"),
            lambda: (wt / "src" / "new.py").write_text("new\n"),
        ]
        for i, step in enumerate(steps):
            step()
            r = c.snapshot(str(wt), run_id="alias", node_id="n")
            assert r["scan"] == "fast", (i, r)
            assert r["tree"] == scratch_tree(wt, tmp_path / f"oracle{i}"), i
    row = watched_row(d, wt)
    assert row["symlinked_dirs"] is False and row["fast_path"] == "on"


def test_a_path_that_changes_type_is_captured_exactly(sd_env: Env, tmp_path: Path,
                                                      make_daemon: MakeDaemon) -> None:
    """File -> directory (even one holding only ignored files) and directory -> file: the
    per-path update of the fast path cannot express these, so such a capture scans."""
    from tests.conftest import QUIET_WATCHER

    wt = make_git_worktree(tmp_path / "wt")
    (wt / ".gitignore").write_text("*.log\n")
    (wt / "f2d").write_text("file\n")
    (wt / "f2ign").write_text("file\n")
    (wt / "d2f").mkdir()
    (wt / "d2f" / "x").write_text("x\n")
    (wt / "plain.txt").write_text("plain\n")
    d = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    with d.client() as c:
        c.attempt_begin("types", "n", str(wt))
        c.snapshot(str(wt), run_id="types", node_id="n")
        steps = [
            lambda: ((wt / "f2d").unlink(), (wt / "f2d").mkdir(),
                     (wt / "f2d" / "in").write_text("in\n")),
            lambda: (shutil.rmtree(wt / "d2f"), (wt / "d2f").write_text("a file now\n")),
            lambda: ((wt / "f2ign").unlink(), (wt / "f2ign").mkdir(),
                     (wt / "f2ign" / "a.log").write_text("ignored\n")),
        ]
        for n, step in enumerate(steps):
            step()
            r = c.snapshot(str(wt), run_id="types", node_id="n")
            assert r["scan"] == "full", n
            assert r["tree"] == scratch_tree(wt, tmp_path / f"oracle{n}"), n
        (wt / "plain.txt").write_text("edited\n")  # an ordinary edit: fast again
        r = c.snapshot(str(wt), run_id="types", node_id="n")
        assert r["scan"] == "fast"
        assert r["tree"] == scratch_tree(wt, tmp_path / "oracle-last")
