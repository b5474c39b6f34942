"""Files the user's repository tracks although the ignore rules match them are captured as
``git add -A`` in that repository stages them, however they come back: re-created inside a
deleted ignored directory, checked out from another branch, force-added after the cache was
started. The oracle is ``git add -A`` into a copy of the user's own index."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from snapshotd.capture import stat_cache as worktree_index
from snapshotd.capture.stat_cache import WorktreeIndex
from snapshotd.capture.stat_caches import StatCaches
from snapshotd.service.service import Service
from snapshotd.store.store import Store
from snapshotd.watch.prescan import Prescan
from tests.conftest import Env, MakeDaemon, git, make_git_worktree
from tests.support.helpers import DriftRecorder, wait_for


def users_add_all(wt: Path, scratch: Path) -> str:
    """What ``git add -A && git write-tree`` gives with the user's own index (a copy of it)."""
    shutil.copy2(wt / ".git" / "index", scratch)
    env = {"GIT_INDEX_FILE": str(scratch)}
    git(wt, "add", "-A", env=env)
    return git(wt, "write-tree", env=env).strip()


def make_repo(root: Path) -> Path:
    wt = make_git_worktree(root)
    (wt / ".gitignore").write_text("ign/\n*.log\n")
    (wt / "src.txt").write_text("source\n")
    (wt / "ign").mkdir()
    (wt / "ign" / "kept.txt").write_text("tracked although ignored\n")
    (wt / "ign" / "scratch.txt").write_text("ignored\n")
    (wt / "build.log").write_text("tracked log\n")
    git(wt, "add", "-A")
    git(wt, "add", "-f", "ign/kept.txt", "build.log")
    git(wt, "commit", "-q", "-m", "base")
    return wt


def in_tree(store: Store, tree: str, path: str) -> str | None:
    """The content of ``path`` in ``tree`` as the git CLI reads it from the store, or None."""
    proc = subprocess.run(["git", "--git-dir", str(store.path), "cat-file", "-p",
                           f"{tree}:{path}"], capture_output=True, text=True)
    return proc.stdout if proc.returncode == 0 else None


def captured_then_ign_deleted(wt: Path, tmp_path: Path) -> tuple[Store, WorktreeIndex]:
    """A store whose cache of ``wt`` captured it, then saw its ignored ``ign/`` deleted (the
    tracked file in it is out of the cache)."""
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    index = caches.worktree(wt)
    index.capture()
    shutil.rmtree(wt / "ign")
    assert index.capture_changed({"ign"}) is not None
    return store, index


def test_the_fast_path_keeps_tracked_ignored_files_however_they_come_back(
        tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    index = caches.worktree(wt)
    first = index.capture()
    assert first.tree == users_add_all(wt, tmp_path / "i0")
    assert in_tree(store, first.tree, "ign/kept.txt") == "tracked although ignored\n"

    steps: list[tuple[str, set[str]]] = []

    def step(name: str, changed: set[str]) -> str:
        result = index.capture_changed(changed)
        assert result is not None, name
        expected = users_add_all(wt, tmp_path / f"i{len(steps)}")
        steps.append((name, changed))
        assert result.tree == expected, f"{name}: the capture differs from git add -A"
        return result.tree

    shutil.rmtree(wt / "ign")
    tree = step("the ignored directory deleted", {"ign"})
    assert in_tree(store, tree, "ign/kept.txt") is None
    (wt / "ign").mkdir()
    (wt / "ign" / "kept.txt").write_text("back in a new directory\n")
    (wt / "ign" / "scratch.txt").write_text("still ignored\n")
    tree = step("re-created, reported as its directory", {"ign"})
    assert in_tree(store, tree, "ign/kept.txt") == "back in a new directory\n"
    assert in_tree(store, tree, "ign/scratch.txt") is None

    shutil.rmtree(wt / "ign")
    step("deleted again", {"ign"})
    (wt / "ign").mkdir()
    (wt / "ign" / "kept.txt").write_text("back, reported apart\n")
    tree = step("directory and file reported apart", {"ign/kept.txt"})
    assert in_tree(store, tree, "ign/kept.txt") == "back, reported apart\n"

    (wt / "build.log").unlink()
    step("a tracked ignored file deleted", {"build.log"})
    (wt / "build.log").write_text("a new log\n")
    tree = step("and written again", {"build.log"})
    assert in_tree(store, tree, "build.log") == "a new log\n"

    # A directory replaced wholesale while the file under it went: the entry is dropped.
    shutil.rmtree(wt / "ign")
    (wt / "ign").mkdir()
    step("replaced, the tracked file gone", {"ign"})


def test_a_checkout_brings_tracked_files_inside_ignored_directories(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    git(wt, "checkout", "-q", "-b", "other")
    (wt / "pkg" / "gen").mkdir(parents=True)
    (wt / "pkg" / "main.py").write_text("main\n")
    (wt / "pkg" / "gen" / "table.txt").write_text("generated, but tracked\n")
    (wt / "pkg" / "gen" / "junk.txt").write_text("generated\n")
    (wt / "pkg" / "trace.log").write_text("a tracked log\n")
    git(wt, "add", "-A")
    git(wt, "add", "-f", "pkg/gen/table.txt", "pkg/trace.log")
    git(wt, "commit", "-q", "-m", "other")
    (wt / "pkg" / "gen" / "junk.txt").unlink()
    git(wt, "checkout", "-q", "main")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    index = caches.worktree(wt)
    index.capture()
    git(wt, "checkout", "-q", "other")
    (wt / "pkg" / "gen" / "junk.txt").write_text("generated\n")
    # What inotify reports of the checkout: the new top directory.
    result = index.capture_changed({"pkg"})
    assert result is not None
    assert result.tree == git(wt, "rev-parse", "HEAD^{tree}").strip()
    assert result.tree == users_add_all(wt, tmp_path / "i")


def test_the_full_scan_takes_tracked_ignored_files_its_cache_lost_or_never_had(
        tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    index = caches.worktree(wt)
    index.capture()
    shutil.rmtree(wt / "ign")
    assert index.capture().tree == users_add_all(wt, tmp_path / "i1")
    (wt / "ign").mkdir()
    (wt / "ign" / "kept.txt").write_text("back\n")
    second = index.capture()
    assert second.tree == users_add_all(wt, tmp_path / "i2")
    assert (second.added, second.modified, second.deleted) == (1, 0, 0)
    # Force-added after the cache was started: the next full scan takes it.
    (wt / "ign" / "late.txt").write_text("force-added later\n")
    git(wt, "add", "-f", "ign/late.txt")
    third = index.capture()
    assert third.tree == users_add_all(wt, tmp_path / "i3")
    assert in_tree(store, third.tree, "ign/late.txt") == "force-added later\n"
    # A new daemon's cache, loaded from disk, agrees.
    again = StatCaches(Store(tmp_path / "home")).worktree(wt).capture()
    assert again.tree == third.tree


def test_an_index_path_behind_a_symlink_is_never_followed(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    (wt / "ign" / "sub").mkdir()
    (wt / "ign" / "sub" / "x.txt").write_text("tracked\n")
    git(wt, "add", "-f", "ign/sub/x.txt")
    git(wt, "commit", "-q", "-m", "sub")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.txt").write_text("not the worktree's\n")
    store, index = captured_then_ign_deleted(wt, tmp_path)
    (wt / "ign").mkdir()
    os.symlink(outside, wt / "ign" / "sub")
    fast = index.capture_changed({"ign"})
    assert fast is not None and in_tree(store, fast.tree, "ign/sub/x.txt") is None
    full = index.capture()
    assert in_tree(store, full.tree, "ign/sub/x.txt") is None
    assert full.tree == users_add_all(wt, tmp_path / "i")


def test_a_user_index_git_cannot_read_leaves_ignored_files_out_with_a_warning(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    wt = make_repo(tmp_path / "wt")
    store, index = captured_then_ign_deleted(wt, tmp_path)
    (wt / ".git" / "index").write_bytes(b"DIRC not an index")
    (wt / "ign").mkdir()
    (wt / "ign" / "kept.txt").write_text("back\n")
    with caplog.at_level(logging.WARNING, logger="snapshotd.store"):
        result = index.capture_changed({"ign"})
    assert result is not None and in_tree(store, result.tree, "ign/kept.txt") is None
    assert in_tree(store, result.tree, "src.txt") == "source\n"
    assert any("cannot list the tracked ignored files" in r.getMessage()
               for r in caplog.records)


def test_a_cache_primed_by_git_add_takes_them_too(tmp_path: Path) -> None:
    """A user index the seed refuses (format 4) primes the cache with ``git add -A``, which
    leaves tracked ignored files out: the scan that follows takes them."""
    wt = make_repo(tmp_path / "wt")
    git(wt, "update-index", "--index-version", "4")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    first = caches.worktree(wt).capture()
    assert first.tree == git(wt, "rev-parse", "HEAD^{tree}").strip()
    assert in_tree(store, first.tree, "ign/kept.txt") == "tracked although ignored\n"


def test_a_file_force_added_with_no_write_is_taken_and_is_not_drift(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """``git add -f`` of an ignored file nobody writes: no event names it (the file is not
    written, and nothing inside ``.git`` is watched). The next capture takes it (a small tree's
    fast path looks at the user's index when it changed); the verifications after it find no
    drift, and the fast path stays on."""
    wt = make_repo(tmp_path / "wt")
    (wt / "ign" / "late.txt").write_text("ignored until force-added\n")
    env = {"SNAPSHOTD_SETTLE_MS": "200", "SNAPSHOTD_MAX_WAIT_MS": "1000",
           "SNAPSHOTD_VERIFY_INTERVAL_S": "1"}
    daemon = make_daemon(sd_env, extra_env=env)
    store = sd_env.home / "store.git"
    with daemon.client() as c:
        c.attempt_begin("fa", "n", str(wt))
        first = c.snapshot(str(wt), run_id="fa", node_id="n")
        assert first["tree"] == users_add_all(wt, tmp_path / "i0")
        (wt / "src.txt").write_text("a write, so that the fast path has a baseline\n")
        c.snapshot(str(wt), run_id="fa", node_id="n")
        git(wt, "add", "-f", "ign/late.txt")
        before = c.status()["counters"]
        taken = c.snapshot(str(wt), run_id="fa", node_id="n", tool_use_id="after-add")
        # Taken by the fast path: no full scan since (the src.txt write settling may add a
        # tier-2 fast capture of its own meanwhile, so the fast count is not exact).
        after = c.status()["counters"]
        assert after["full_scans"] == before["full_scans"]
        assert after["fast_captures"] > before["fast_captures"]
        assert taken["tree"] == users_add_all(wt, tmp_path / "i1")
        assert git(wt, "--git-dir", str(store), "show", f"{taken['tree']}:ign/late.txt") == \
            "ignored until force-added\n"
        # A file captured while ignored, force-added later; then a write that settles, and the
        # verifications after it judge.
        (wt / "ign" / "later.txt").write_text("force-added after its write was seen\n")
        c.snapshot(str(wt), run_id="fa", node_id="n")
        git(wt, "add", "-f", "ign/later.txt")
        verified = c.status()["watcher"]["verifications"]
        (wt / "src.txt").write_text("a write that settles\n")
        wait_for(lambda: c.status()["watcher"]["verifications"] >= verified + 2, timeout=30,
                 what="two verifications after the force-add")
        cps = c.list("fa")["checkpoints"]
        assert git(wt, "--git-dir", str(store), "show", f"{cps[-1]['commit']}:ign/later.txt") \
            == "force-added after its write was seen\n"
        status = c.status()
    [row] = [w for w in status["watched"] if w["path"] == str(wt)]
    assert [g for g in sd_env.read_gaps() if g["reason"] == "watcher-drift"] == []
    assert row["drifts"] == 0 and row["fast_path"] == "on"


@pytest.mark.parametrize("verification", ["off the lock", "under the lock"])
def test_past_the_listing_limit_the_verification_takes_a_force_added_file_without_drift(
        service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        verification: str) -> None:
    """A tree too large to list the user's index on every change of it: the fast path leaves
    the force-added file to the next verification, whose scan (off the worktree's lock, or a
    full scan under it) takes it and calls nothing drift."""
    monkeypatch.setattr(worktree_index, "SYNC_LIST_ENTRIES", 0)
    wt = make_repo(tmp_path / "wt")
    (wt / "ign" / "late.txt").write_text("ignored until force-added\n")
    service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})
    source = DriftRecorder(vouch=set())
    service.change_source = source
    git(wt, "add", "-f", "ign/late.txt")
    with service.worktree_lock(wt):
        fast = service.read_worktree(wt)
    assert not fast.full_scan and in_tree(service.store, fast.tree, "ign/late.txt") is None
    prescan = Prescan.run(service, wt) if verification == "off the lock" else None
    if prescan is not None:
        assert prescan.found == set()  # git's scans leave ignored files out
    with service.worktree_lock(wt):
        verified = service.read_worktree(wt, verify=True, prescan=prescan)
    assert verified.full_scan == (prescan is None)
    assert verified.tree == users_add_all(wt, tmp_path / "i")
    assert in_tree(service.store, verified.tree, "ign/late.txt") == \
        "ignored until force-added\n"
    assert source.drifted == set()
