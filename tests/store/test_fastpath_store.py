"""The O(changes) capture agrees with a from-scratch full capture after every step of a long
randomized workload (fixed seed, bounded count), given the paths a watcher would report."""

from __future__ import annotations

import shutil
from pathlib import Path
from random import Random

from snapshotd.capture.stat_caches import StatCaches
from snapshotd.store.store import Store
from snapshotd.store.trees import compute_tree_changes, tree_changes
from tests.conftest import git, make_git_worktree
from tests.support.helpers import Workload, full_tree

STEPS = 250
SEED = 8


def test_fast_path_matches_full_capture_every_step(tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / ".gitignore").write_text("ignored_dir/\n*.log\n")
    (wt / "src").mkdir()
    for i in range(20):
        (wt / "src" / f"s{i}.py").write_text(f"x = {i}\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    index = caches.worktree(wt)
    previous = index.capture().tree
    work = Workload(wt, Random(SEED))
    fast_steps = 0
    for step in range(STEPS):
        changed = work.step()
        result = index.capture_changed(changed)
        if result is None:
            result = index.capture()
        else:
            fast_steps += 1
        expected = full_tree(wt, tmp_path / "oracle-index")
        assert result.tree == expected, f"step {step}: fast path diverged after {changed}"
        # The change counts the fast path learnt on the way equal a tree comparison's, and
        # that comparison agrees with git's own.
        counts = tree_changes(store.repo, previous, result.tree)
        assert counts == compute_tree_changes(store.repo, previous, result.tree) \
            == diff_counts(wt, store, previous, result.tree), f"step {step}: {changed}"
        previous = result.tree
    assert fast_steps > STEPS * 0.9


def diff_counts(wt: Path, store: Store, old: str, new: str) -> tuple[int, int, int]:
    """(added, modified, deleted) by ``git diff-tree -r``; a type change is a modification."""
    out = git(wt, "--git-dir", str(store.path), "diff-tree", "-r", "--no-renames",
              "--name-status", old, new)
    status = [line.split("\t", 1)[0] for line in out.splitlines() if line]
    return (status.count("A"), sum(s in ("M", "T") for s in status), status.count("D"))


def test_checkout_of_another_branch_via_directory_events(tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "common.txt").write_text("c\n")
    (wt / "pkg").mkdir()
    (wt / "pkg" / "a.py").write_text("a\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "main")
    git(wt, "checkout", "-q", "-b", "other")
    shutil.rmtree(wt / "pkg")
    (wt / "pkg2" / "deep").mkdir(parents=True)
    (wt / "pkg2" / "deep" / "b.py").write_text("b\n")
    (wt / "common.txt").write_text("changed on other\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "other")
    git(wt, "checkout", "-q", "main")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    index = caches.worktree(wt)
    index.capture()
    git(wt, "checkout", "-q", "other")
    # What inotify reports: the changed file, the removed and the new top directories.
    result = index.capture_changed({"common.txt", "pkg", "pkg/a.py", "pkg2"})
    assert result is not None
    assert result.tree == git(wt, "rev-parse", "HEAD^{tree}").strip()


def test_a_path_that_came_and_went_between_captures_changes_nothing(tmp_path: Path) -> None:
    """An editor's temp file (or a restore's) written and renamed away: the watcher reports
    its path, the index never had it. Nothing was deleted, and the tree is the same object."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "pkg").mkdir()
    (wt / "pkg" / "a.py").write_text("a\n")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    index = caches.worktree(wt)
    before = index.capture().tree
    (wt / "pkg" / ".a.py.swp").write_text("x\n")
    (wt / "pkg" / ".a.py.swp").unlink()
    result = index.capture_changed({"pkg/.a.py.swp", "gone-dir"})
    assert result is not None
    assert (result.tree, result.added, result.modified, result.deleted) == (before, 0, 0, 0)
