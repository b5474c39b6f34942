"""A file whose content is not the size its stat reports, read after read (a ``/sys`` file
bind-mounted into a tree, a file system that reports sizes larger than it holds): libgit2
fails it with the same "failed to read file into stream" and no OS reason as a file changing
under it, but its stat never moves. It is listed ``unreadable`` with both sizes; the capture
succeeds with every other file, by the full scan, the fast path and git's scan past libgit2's
depth limit alike. Before, every capture of such a worktree failed as a store write
(``store-write-failed``): one odd file stopped all its checkpoints; and git's scan left it out
without a word."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshotd.capture.stat_caches import StatCaches
from snapshotd.store.store import Store
from tests.conftest import git, make_git_worktree

# sysfs files report a size of a page (4096) and hold a line or two.
CANDIDATES = ("/sys/kernel/mm/transparent_hugepage/enabled", "/sys/kernel/profiling",
              "/sys/power/state", "/sys/kernel/mm/transparent_hugepage/defrag")


def lying_source() -> Path | None:
    for name in CANDIDATES:
        try:
            with open(name, "rb") as f:
                held = len(f.read())
            if os.stat(name).st_size > held:
                return Path(name)
        except OSError:
            continue
    return None


@pytest.fixture
def lying(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A git worktree holding ``ok.txt`` and ``odd`` (a sysfs file bind-mounted there)."""
    source = lying_source()
    if os.geteuid() != 0 or source is None:
        pytest.skip("needs root (a bind mount) and a sysfs file whose size is not its content")
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "ok.txt").write_text("fine\n")
    odd = wt / "odd"
    odd.write_text("")
    subprocess.run(["mount", "--bind", str(source), str(odd)], check=True)
    try:
        yield wt, odd
    finally:
        subprocess.run(["umount", str(odd)], check=True)


def odd_skip(skipped: list[dict], name: str = "odd") -> dict:
    [entry] = [s for s in skipped if s["path"] == name]
    return entry


def test_full_scan_and_fast_path_list_it_and_capture_the_rest(
        lying: tuple[Path, Path], tmp_path: Path) -> None:
    wt, odd = lying
    size = odd.stat().st_size
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    index = caches.worktree(wt)
    full = index.capture()
    entry = odd_skip(full.skipped)
    assert entry["reason"] == "unreadable", entry
    assert f"reports {size} bytes" in entry["detail"], entry
    listing = git(wt, "--git-dir", str(store.path), "ls-tree", "-r", "--name-only", full.tree)
    assert listing.split() == ["ok.txt"]
    (wt / "ok.txt").write_text("changed\n")
    fast = index.capture_changed({"ok.txt", "odd"})
    assert fast is not None
    assert odd_skip(fast.skipped)["reason"] == "unreadable"
    assert git(wt, "--git-dir", str(store.path), "show", f"{fast.tree}:ok.txt") == "changed\n"
    # A full scan again (a new daemon's cache, loaded from disk): still listed, still no failure.
    again = StatCaches(Store(tmp_path / "home")).worktree(wt).capture()
    assert again.tree == fast.tree and odd_skip(again.skipped)["reason"] == "unreadable"


def test_git_s_scan_past_the_depth_limit_lists_it_too(lying: tuple[Path, Path],
                                                      tmp_path: Path) -> None:
    wt, odd = lying
    deep = wt.joinpath(*(["d"] * 110))
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_text("deep\n")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    capture = caches.worktree(wt).capture()
    assert odd_skip(capture.skipped)["reason"] == "unreadable"
    listing = git(wt, "--git-dir", str(store.path), "ls-tree", "-r", "--name-only", capture.tree)
    assert "ok.txt" in listing.split() and "odd" not in listing.split()
    assert "/".join(["d"] * 110) + "/bottom.txt" in listing.split()
