"""Directories nested deeper than libgit2 walks (100): captured exactly, by the full scan (git
scans the tree where libgit2 refuses) and by the fast path, as ``git add -A`` stages them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Daemon, Env, git, make_git_worktree
from tests.store.test_fastpath_store import full_tree

pytestmark = pytest.mark.one_ledger("what a deep tree's capture holds")

DEPTH = 150


def deep_dir(root: Path, name: str) -> Path:
    path = root.joinpath(*([name] * DEPTH))
    path.mkdir(parents=True)
    return path


def test_a_tree_150_directories_deep_is_captured_exactly(sd_env: Env, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / ".gitignore").write_text("*.log\n")
    (wt / "top.txt").write_text("top\n")
    d = Daemon(sd_env, extra_env=dict(QUIET_WATCHER)).start()
    try:
        with d.client() as c:
            c.attempt_begin("deep", "n", str(wt))
            c.snapshot(str(wt), run_id="deep", node_id="n")
        d.stop()  # the next capture is a fresh daemon's full scan
        bottom = deep_dir(wt, "d")
        (bottom / "deep.txt").write_text("at the bottom\n")
        (bottom / "noise.log").write_text("ignored\n")
        d.start()
        with d.client() as c:
            full = c.snapshot(str(wt), run_id="deep", node_id="n")
            assert full["scan"] == "full", full
            assert full["tree"] == full_tree(wt, tmp_path / "oracle")
            # Again, with the deep file changed: the fallback scan keeps its stat cache.
            d.stop()
            (bottom / "deep.txt").write_text("changed at the bottom\n")
            (wt / "top.txt").unlink()
        d.start()
        with d.client() as c:
            again = c.snapshot(str(wt), run_id="deep", node_id="n")
            assert again["scan"] == "full" and again["deduped"] is False
            assert again["tree"] == full_tree(wt, tmp_path / "oracle")
            # The fast path: a change deep down, and a new deep directory.
            (bottom / "deep.txt").write_text("fast\n")
            other = deep_dir(wt, "e")
            (other / "e.txt").write_text("e\n")
            fast = c.snapshot(str(wt), run_id="deep", node_id="n")
            assert fast["tree"] == full_tree(wt, tmp_path / "oracle")
    finally:
        d.stop()
    store = ["--git-dir", str(sd_env.home / "store.git")]
    deep_path = "/".join(["d"] * DEPTH) + "/deep.txt"
    assert git(wt, *store, "show", f"{again['commit']}:{deep_path}") == "changed at the bottom\n"
