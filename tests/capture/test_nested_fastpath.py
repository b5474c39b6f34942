"""A nested repository (a directory with its own ``.git``) is captured whole, under its own
ignore rules, the same way by the fast path as by the full scan. A directory captured before it
gained a ``.git`` stays an ordinary directory of the worktree, by both, as ``git add -A`` keeps
it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Daemon, Env, git, make_git_worktree

pytestmark = pytest.mark.one_ledger("nested repositories in a capture")

RUN = {"run_id": "nested", "node_id": "n"}


def nested(reply: dict) -> set[str]:
    return {s["path"] for s in reply["skipped"] if s["reason"] == "nested-repository"}


def test_files_in_a_nested_repository_come_in_through_the_fast_path(
        sd_env: Env, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    (wt / ".gitignore").write_text("*.out\n")
    (wt / "vendor").mkdir()
    (wt / "vendor" / "keep.txt").write_text("captured before the nested repository\n")
    d = Daemon(sd_env, extra_env=dict(QUIET_WATCHER)).start()
    try:
        with d.client() as c:
            c.attempt_begin("nested", "n", str(wt))
            c.snapshot(str(wt), **RUN)  # the baseline scan
            (wt / "a.txt").write_text("warm\n")
            assert c.snapshot(str(wt), **RUN)["scan"] == "fast"
            # A new nested repository, and one made inside a directory already watched.
            make_git_worktree(wt / "lib")
            (wt / "lib" / "inner.txt").write_text("inner\n")
            (wt / "lib" / ".gitignore").write_text("*.tmp\n")
            (wt / "lib" / "ours.out").write_text("the worktree's *.out is not lib's rule\n")
            (wt / "lib" / "x.tmp").write_text("ignored by lib's own rule\n")
            (wt / "x.out").write_text("ignored by the worktree's rule\n")
            git(wt / "vendor", "init", "-q")
            (wt / "vendor" / "new.txt").write_text("written inside the nested repository\n")
            (wt / "vendor" / "keep.txt").write_text("changed inside the nested repository\n")
            (wt / "b.txt").write_text("b\n")
            fast = c.snapshot(str(wt), **RUN, tool_use_id="fast")
            assert fast["scan"] == "fast", fast
    finally:
        d.stop()
    store = ["--git-dir", str(sd_env.home / "store.git")]
    files = set(git(wt, *store, "ls-tree", "-r", "--name-only", fast["commit"]).split())
    assert {"lib/inner.txt", "lib/ours.out", "lib/.gitignore"} <= files, files
    assert not {"lib/x.tmp", "x.out"} & files and not [p for p in files if ".git/" in p]
    assert not nested(fast), fast["skipped"]
    # A directory captured before it became a repository stays an ordinary directory (as
    # libgit2's scan and ``git add -A`` keep it): its files are captured.
    assert {"vendor/new.txt", "vendor/keep.txt"} <= files and "vendor" not in nested(fast)
    # A fresh daemon's full scan of the same tree agrees with the fast path.
    d.start()
    try:
        with d.client() as c:
            scanned = c.snapshot(str(wt), **RUN, tool_use_id="scan")
    finally:
        d.stop()
    assert scanned["scan"] == "full"
    assert scanned["tree"] == fast["tree"], (scanned["skipped"], fast["skipped"])
    assert not nested(scanned)
