"""First capture of a git worktree is seeded from the repository's own index and objects."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import git, make_git_worktree
from snapshotd.store import Store


def make_repo(root: Path, files: int = 300) -> Path:
    wt = make_git_worktree(root)
    (wt / ".gitignore").write_text("*.log\nbuild/\n")
    for i in range(files):
        d = wt / f"d{i % 7}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_text(f"file {i}\n")
    (wt / "tracked.log").write_text("tracked although ignored\n")
    git(wt, "add", "-A")
    git(wt, "add", "-f", "tracked.log")
    git(wt, "commit", "-q", "-m", "base")
    git(wt, "gc", "-q")  # packed, like a clone
    return wt


def test_clean_checkout_is_exactly_the_commit_tree(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    before = sorted(p.name for p in (wt / ".git").rglob("*"))
    store = Store(tmp_path / "home")
    capture = store.worktree(wt).capture()
    assert capture.tree == git(wt, "rev-parse", "HEAD^{tree}").strip()
    # Seeded: the blobs arrived as one pack copied from the repository, not hashed one by one.
    packs = list((tmp_path / "home" / "store.git" / "objects" / "pack").glob("*.pack"))
    assert len(packs) == 1
    assert sorted(p.name for p in (wt / ".git").rglob("*")) == before
    git(tmp_path, "--git-dir", str(tmp_path / "home" / "store.git"), "fsck", "--strict")


def test_dirty_checkout_differences_are_hashed(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    (wt / "d1" / "f1.txt").write_text("modified\n")
    os.unlink(wt / "d2" / "f2.txt")
    (wt / "new.txt").write_text("untracked\n")
    (wt / "tracked.log").write_text("tracked, ignored, modified\n")
    (wt / "x.log").write_text("ignored\n")
    git(wt, "update-index", "--assume-unchanged", "d3/f3.txt")
    (wt / "d3" / "f3.txt").write_text("assume-unchanged but changed\n")
    store = Store(tmp_path / "home")
    capture = store.worktree(wt).capture()
    tree = git(tmp_path, "--git-dir", str(tmp_path / "home" / "store.git"), "ls-tree", "-r",
               "--name-only", capture.tree).split()
    show = ["--git-dir", str(tmp_path / "home" / "store.git"), "show"]
    assert git(tmp_path, *show, f"{capture.tree}:d1/f1.txt") == "modified\n"
    assert "d2/f2.txt" not in tree and "new.txt" in tree and "x.log" not in tree
    assert git(tmp_path, *show, f"{capture.tree}:tracked.log") == "tracked, ignored, modified\n"
    assert git(tmp_path, *show, f"{capture.tree}:d3/f3.txt") == "assume-unchanged but changed\n"
    git(tmp_path, "--git-dir", str(tmp_path / "home" / "store.git"), "fsck", "--strict")


def test_unsupported_index_falls_back_to_a_cold_build(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt", files=40)
    git(wt, "update-index", "--index-version", "4")
    (wt / "new.txt").write_text("n\n")
    capture = Store(tmp_path / "home").worktree(wt).capture()
    tree = git(tmp_path, "--git-dir", str(tmp_path / "home" / "store.git"), "ls-tree", "-r",
               "--name-only", capture.tree).split()
    assert "new.txt" in tree and "tracked.log" in tree and len(tree) == 43
