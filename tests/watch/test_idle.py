"""What idle watched worktrees cost the daemon: the periodic stat of every root falls on one
shared tick, so the settle scheduler wakes once per tick however many worktrees it watches;
quiet worktrees' verifications take turns daemon-wide; a burst's verification counts as the
periodic one. Counted through ``status`` (scheduler passes, verifications), never timed. Real
daemon, real inotify."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from snapshotd.watch.settle import QUIET_VERIFY_GAP_S
from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, make_git_worktree
from tests.support.helpers import wait_for

pytestmark = pytest.mark.one_ledger("the settle scheduler's clocks and turns")

WORKTREES = 20


def _idle_worktrees(root: Path, count: int) -> list[Path]:
    trees = []
    for i in range(count):
        wt = make_git_worktree(root / f"wt{i}")
        (wt / "a.txt").write_text(f"{i}\n")
        trees.append(wt)
    return trees


def test_idle_worktrees_wake_the_scheduler_once_per_tick_not_once_each(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    interval = 0.5
    trees = _idle_worktrees(tmp_path, WORKTREES)
    daemon = make_daemon(sd_env, {**QUIET_WATCHER, "SNAPSHOTD_SCAN_INTERVAL_S": str(interval)})
    with daemon.client() as c:
        for i, wt in enumerate(trees):
            c.attempt_begin(f"idle{i}", "n", str(wt))
            time.sleep(0.01)  # begun apart, as agents start: their clocks would drift apart
        wait_for(lambda: len([r for r in c.status()["watched"] if r["state"] == "watching"])
                 == WORKTREES, timeout=30, what="every worktree watched")
        time.sleep(2 * interval)
        before = c.status()["watcher"]["scheduler_passes"]
        started = time.monotonic()
        time.sleep(8 * interval)
        passes = c.status()["watcher"]["scheduler_passes"] - before
        ticks = (time.monotonic() - started) / interval
    # Staggered clocks woke it at least once per worktree per tick (322 passes, measured).
    assert passes <= 2 * ticks + 4, (passes, ticks)
    assert passes >= ticks / 2, (passes, ticks)  # the roots are still looked at every tick


def test_quiet_worktrees_take_turns_for_their_verifications(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    count, window = 4, 6.0
    trees = _idle_worktrees(tmp_path, count)
    # Quiet after ten intervals (1 s); a whole core allowed, so turns are QUIET_VERIFY_GAP_S
    # apart: each worktree alone would be verified about every second.
    daemon = make_daemon(sd_env, {**QUIET_WATCHER, "SNAPSHOTD_VERIFY_INTERVAL_S": "0.1",
                                  "SNAPSHOTD_QUIET_VERIFY_SHARE": "1"})
    with daemon.client() as c:
        for i, wt in enumerate(trees):
            c.attempt_begin(f"quiet{i}", "n", str(wt))
            c.snapshot(str(wt), run_id=f"quiet{i}", node_id="n")  # the baseline a check needs
        wait_for(lambda: len([r for r in c.status()["watched"] if r["state"] == "watching"])
                 == count, timeout=30, what="every worktree watched")
        time.sleep(1.5)

        def counts() -> tuple[dict[str, int], int]:
            status = c.status()
            return ({r["path"]: r["captures"] for r in status["watched"]},
                    status["watcher"]["verifications"])

        before, verified_before = counts()
        time.sleep(window)
        after, verified_after = counts()
        ages = [r["verified_age_s"] for r in c.status()["watched"]]
    verified = verified_after - verified_before
    each = {path: after[path] - before[path] for path in after}
    assert sum(each.values()) == verified  # quiet: verifications are their only captures
    assert verified <= window / QUIET_VERIFY_GAP_S + 2, each  # about 24 if they ran at will
    assert min(each.values()) >= 1, each  # in turns: none left behind by the others
    assert all(age is not None and age < window for age in ages), ages


def test_a_bursts_verification_is_not_followed_by_a_second_scan(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """The verification after a burst covers the burst's events; counted as not covered, they
    called for a second whole-tree scan right after it (seconds of a core at a million files)."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    daemon = make_daemon(sd_env, {"SNAPSHOTD_SETTLE_MS": "100", "SNAPSHOTD_MAX_WAIT_MS": "300",
                                  "SNAPSHOTD_VERIFY_INTERVAL_S": "1"})
    with daemon.client() as c:
        c.attempt_begin("burst", "n", str(wt))
        c.snapshot(str(wt), run_id="burst", node_id="n")
        time.sleep(2.5)  # the periodic clock starts (one tick of the root's stat at least)
        (wt / "b.txt").write_text("b\n")
        wait_for(lambda: c.status()["watcher"]["verifications"] >= 1, timeout=20,
                 what="the burst's verification")
        time.sleep(3.0)  # three verify intervals, no event
        assert c.status()["watcher"]["verifications"] == 1
