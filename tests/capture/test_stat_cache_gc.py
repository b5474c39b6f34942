"""A stat cache left on disk by a killed daemon must not vouch for trees gc has since removed.

The cache on disk carries libgit2's tree cache: for each directory whose entries did not change,
the id of its tree. A directory changed and changed back (a file added, captured, removed)
has the same entries and so the same tree id as before; when gc has meanwhile removed that tree
(its checkpoints pruned, no grace) and the daemon is killed before it writes its cache again,
the next start reused the id: every capture of that worktree failed ("invalid object") until
the cache was dropped. Found by the randomized fault test (tests/support/chaos.py), as a "missing tree"
from ``git fsck``."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, git, make_git_worktree

pytestmark = pytest.mark.one_ledger("the stat cache against the store's objects")

RUN = {"run_id": "cachegc", "node_id": "n"}


def test_a_killed_daemons_cache_does_not_name_a_tree_gc_removed(
        sd_env: Env, make_daemon: MakeDaemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "d").mkdir()
    (wt / "d" / "a.txt").write_text("a\n")
    (wt / "d" / "b.txt").write_text("b\n")
    (wt / "top.txt").write_text("0\n")
    d = make_daemon(sd_env, QUIET_WATCHER)
    with d.client() as c:
        c.attempt_begin("cachegc", "n", str(wt), attempt=1)
        c.snapshot(str(wt), **RUN)
    d.stop()  # writes the cache to disk: its tree cache names d's tree
    d = make_daemon(sd_env, QUIET_WATCHER)
    with d.client() as c:
        (wt / "d" / "c.txt").write_text("c\n")
        (wt / "top.txt").write_text("1\n")
        c.snapshot(str(wt), **RUN)
        c.attempt_end("cachegc", "n", attempt=1)
        c.attempt_begin("cachegc", "n", str(wt), attempt=2)
        c.request("gc", keep_last=1, safety_interval_s=0)
    (wt / "d" / "c.txt").unlink()  # d as it was: the tree id gc just removed
    (wt / "top.txt").write_text("2\n")
    d.kill9()
    d = make_daemon(sd_env, QUIET_WATCHER)
    with d.client() as c:
        reply = c.snapshot(str(wt), **RUN)
    store = sd_env.home / "store.git"
    fsck = subprocess.run(["git", "--git-dir", str(store), "fsck", "--strict"],
                          capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    listed = git(wt, "--git-dir", str(store), "ls-tree", "-r", reply["commit"])
    assert "d/a.txt" in listed and "d/c.txt" not in listed
