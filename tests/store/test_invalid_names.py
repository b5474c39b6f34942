"""Names git refuses to hold in a tree (``.git`` in any case as a path component, ``.git``
followed by dots or spaces, as git's ``verify_path`` and libgit2's index rules say): a worktree
may hold them (an agent made a ``.GIT`` directory), but no checkpoint can. Each is listed under
``skipped`` with reason ``invalid-path``; the capture succeeds with every other file, by the
full scan, the fast path and git's scan past libgit2's depth limit alike. Before, every capture
of such a worktree failed, reported as the store refusing a write (``store-write-failed``)."""

from __future__ import annotations

from pathlib import Path

from snapshotd.capture.stat_caches import StatCaches
from snapshotd.store.store import Store
from tests.conftest import git, make_git_worktree

INVALID = (".GIT/config", "sub/.Git/x", ".git. /w", "deeper/.gIt/y.txt")
# What a capture lists: a .git in another case once, with all it holds; other names one by one.
LISTED = {".GIT": "invalid-path", "sub/.Git": "invalid-path", ".git. /w": "invalid-path",
          "deeper/.gIt": "invalid-path"}


def listing(wt: Path, store: Store, tree: str) -> list[str]:
    return git(wt, "--git-dir", str(store.path), "ls-tree", "-r", "--name-only", tree).split()


def write_all(wt: Path, names: tuple[str, ...]) -> None:
    for name in names:
        (wt / name).parent.mkdir(parents=True, exist_ok=True)
        (wt / name).write_text(name)


def invalid_skips(skipped: list[dict]) -> dict[str, str]:
    return {s["path"]: s["reason"] for s in skipped if s["reason"] == "invalid-path"}


def test_full_scan_and_fast_path_list_them_and_capture_the_rest(tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    index = caches.worktree(wt)
    index.capture()
    write_all(wt, INVALID)
    (wt / "a.txt").write_text("fast\n")
    fast = index.capture_changed({"a.txt", ".GIT", "sub", ".git. ", "deeper"})
    assert fast is not None
    assert invalid_skips(fast.skipped) == LISTED
    assert listing(wt, store, fast.tree) == ["a.txt"]
    (wt / "a.txt").write_text("full\n")
    (wt / "b.txt").write_text("b\n")
    full = StatCaches(Store(tmp_path / "home")).worktree(wt).capture()  # a new daemon's full scan
    assert invalid_skips(full.skipped) == LISTED
    assert listing(wt, store, full.tree) == ["a.txt", "b.txt"]
    assert git(wt, "--git-dir", str(store.path), "show", f"{full.tree}:a.txt") == "full\n"


def test_a_first_capture_and_git_s_deep_scan_list_them_too(tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    write_all(wt, INVALID)
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    first = caches.worktree(wt).capture()
    assert invalid_skips(first.skipped) == LISTED
    assert listing(wt, store, first.tree) == ["a.txt"]
    deep = wt.joinpath(*(["d"] * 110))
    deep.mkdir(parents=True)
    (deep / "bottom.txt").write_text("deep\n")
    scanned = StatCaches(Store(tmp_path / "home")).worktree(wt).capture()
    assert invalid_skips(scanned.skipped) == LISTED
    assert "/".join(["d"] * 110) + "/bottom.txt" in listing(wt, store, scanned.tree)
