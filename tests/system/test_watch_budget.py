"""The watcher's own inotify budget (``max_watches``): a tree that needs more watches than it
allows is still captured exactly, by scans, with one ``watch-failed`` gap naming the limit and
the value to set. Real daemon, real inotify, ``git add -A`` in a scratch index as the oracle."""

from __future__ import annotations

import re
import sys
from pathlib import Path
from random import Random

import pytest

from snapshotd.watch.notifier import (
    InotifyNotifier,
    WatchLimitError,
    set_max_watches,
    watches_in_use,
)
from tests.conftest import QUIET_WATCHER, Env, make_git_worktree
from tests.support.helpers import full_tree, git, wait_for

pytestmark = pytest.mark.one_ledger("the watcher's inotify budget")

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="inotify")


def _tree_of_50_dirs(root: Path) -> list[Path]:
    dirs = []
    for i in range(10):
        top = root / f"d{i}"
        for j in range(4):
            sub = top / f"s{j}"
            sub.mkdir(parents=True)
            (sub / "f.txt").write_text(f"{i}/{j}\n")
            dirs.append(sub)
        dirs.append(top)
    assert len(dirs) == 50
    return dirs


@linux_only
def test_the_notifier_stops_at_its_budget_and_says_what_to_set(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    _tree_of_50_dirs(root)
    set_max_watches(5)
    try:
        before = watches_in_use()
        with pytest.raises(WatchLimitError) as caught:
            InotifyNotifier([str(root)])
        err = caught.value
        assert err.setting == "max_watches" and err.limit == 5 and err.needed == 51
        assert "set max_watches = 51 or more" in str(err)
        assert watches_in_use() == before  # the failed notifier gave its watches back
        set_max_watches(0)
        notifier = InotifyNotifier([str(root)])
        assert notifier.watch_count == 51 and watches_in_use() == before + 51
        notifier.close()
        assert watches_in_use() == before
    finally:
        set_max_watches(0)


@linux_only
def test_a_tree_over_the_budget_is_captured_exactly_with_the_gap(
        sd_env: Env, make_daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    dirs = _tree_of_50_dirs(wt)
    (wt / ".gitignore").write_text("*.log\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "base")
    daemon = make_daemon(sd_env, {**QUIET_WATCHER, "SNAPSHOTD_MAX_WATCHES": "5"})
    rng = Random(21)
    with daemon.client() as c:
        c.attempt_begin("budget", "n", str(wt))
        gaps = wait_for(lambda: [g for g in sd_env.read_gaps()
                                 if g["reason"] == "watch-failed"] or None,
                        what="the watch-failed gap")
        detail = gaps[0]["detail"]
        assert "max_watches = 5" in detail, detail
        wanted = int(re.search(r"set max_watches = (\d+) or more", detail).group(1))
        assert wanted >= 51
        for step in range(8):
            target = rng.choice(dirs)
            (target / f"new{step}.txt").write_text(f"step {step}\n")
            (rng.choice(dirs) / "f.txt").write_text(f"edited {step}\n")
            (target / f"noise{step}.log").write_text("ignored\n")
            if step % 3 == 2:
                (target / "f.txt").unlink(missing_ok=True)
            fresh = target / f"made{step}"
            fresh.mkdir()
            (fresh / "deep.txt").write_text("deep\n")
            reply = c.snapshot(str(wt), run_id="budget", node_id="n", source="hook",
                               tool_use_id=f"t{step}")
            assert reply["tree"] == full_tree(wt, tmp_path / "oracle.index"), step
        watcher = c.status()["watcher"]
        assert watcher["max_watches"] == 5 and watcher["watches"] <= 5
    assert len([g for g in sd_env.read_gaps() if g["reason"] == "watch-failed"]) == 1


@linux_only
def test_notifiers_merge_in_rounds_that_fit_under_the_budget(
        sd_env: Env, make_daemon, tmp_path: Path) -> None:
    """Merging needs the merged notifier's watches beside the old ones' until they retire: six
    worktrees of 51 watches each (306) cannot merge at once under a budget of 500, but in two
    rounds of three they can (the 100 worktrees of bench.many stayed 100 notifiers on a host
    whose limit was under twice their watches, at 7.7 % of a core idle)."""
    trees = []
    for i in range(6):
        wt = make_git_worktree(tmp_path / f"wt{i}")
        _tree_of_50_dirs(wt)
        trees.append(wt)
    daemon = make_daemon(sd_env, {**QUIET_WATCHER, "SNAPSHOTD_MAX_WATCHES": "500"})
    with daemon.client() as c:
        for i, wt in enumerate(trees):
            c.attempt_begin(f"merge{i}", "n", str(wt))
        wait_for(lambda: c.status()["watcher"]["notifiers"] <= 2, timeout=60,
                 what="the notifiers merged in rounds")
        watcher = c.status()["watcher"]
        assert watcher["notifiers"] == 2 and watcher["merges"] == 2, watcher
        assert watcher["watches"] <= 500
        # Every worktree is still watched: a write in each is captured by its settle window.
        for i, wt in enumerate(trees):
            (wt / "d3" / "s1" / "late.txt").write_text(f"late {i}\n")
        for i, wt in enumerate(trees):
            c.flush(str(wt))
            listing = c.list(f"merge{i}")
            last = listing["checkpoints"][-1]
            assert last["tree"] == full_tree(wt, tmp_path / f"oracle{i}.index"), i
    assert [g for g in sd_env.read_gaps() if g["reason"] == "watch-failed"] == []
