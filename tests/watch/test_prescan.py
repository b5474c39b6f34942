"""A verification's scan off the worktree's lock (snapshotd.watch.prescan): what it finds, and when it
declines so that the verification scans fully under the lock instead.

In-process, with a real store, ledger and worktree (no watcher: ``Prescan.run`` needs only the
service's stat cache). The daemon-level behaviour, a tool call during a slowed scan that does
not wait and drift still found, is in test_verify_quiet.py and test_fastpath.py."""

from __future__ import annotations

import inspect
import os
import shutil
from pathlib import Path

import pytest

from snapshotd.service.change_source import OffLockScan
from snapshotd.service.service import Service
from snapshotd.watch import prescan
from snapshotd.watch.fastpath import DIRTY_LIMIT
from snapshotd.watch.prescan import Prescan
from tests.conftest import make_git_worktree
from tests.support.helpers import DriftRecorder, git

pytestmark = pytest.mark.one_ledger("a verification's scan of the stat cache")


@pytest.fixture(params=["libgit2", "git"])
def scan_by(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which scan runs: libgit2's in the daemon (small caches) or git's in processes (from
    ``GIT_SCAN_FROM_BYTES``), forced whatever the test tree's size."""
    monkeypatch.setattr(prescan, "GIT_SCAN_FROM_BYTES", 0 if request.param == "git" else 1 << 62)
    return request.param


def test_prescan_is_the_off_lock_scan_the_service_declares() -> None:
    """The service calls ``verify`` through its own ``OffLockScan`` (it may not import watch):
    ``Prescan.verify`` takes the very parameters and returns what that protocol says."""
    promised, given = inspect.signature(OffLockScan.verify), inspect.signature(Prescan.verify)
    assert [(p.name, p.kind, p.default, p.annotation) for p in given.parameters.values()] == \
        [(p.name, p.kind, p.default, p.annotation) for p in promised.parameters.values()]
    assert given.return_annotation == promised.return_annotation


def captured(service: Service, wt: Path) -> None:
    service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})


def test_it_finds_exactly_what_differs_from_the_cache(service: Service, tmp_path: Path,
                                                      scan_by: str) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / ".gitignore").write_text("*.log\n")
    for name in ("keep.txt", "edit.txt", "gone.txt"):
        (wt / name).write_text(name)
    (wt / "sub").mkdir()
    (wt / "sub" / "deep.txt").write_text("deep")
    captured(service, wt)
    assert Prescan.run(service, wt).found == set()

    (wt / "edit.txt").write_text("edited")
    (wt / "gone.txt").unlink()
    (wt / "new.txt").write_text("new")
    (wt / "newdir" / "inner").mkdir(parents=True)
    (wt / "newdir" / "inner" / "f.txt").write_text("f")
    (wt / "noise.log").write_text("ignored")
    scan = Prescan.run(service, wt)
    assert scan.why_not == ""
    assert scan.found == {"edit.txt", "gone.txt", "new.txt", "newdir/inner/f.txt"}


def test_it_compares_with_the_cache_as_captured_not_as_last_written(
        service: Service, tmp_path: Path, scan_by: str) -> None:
    """Captures through the fast path change the cache in memory only: the scan's copy is
    written first, so what they captured is not found again."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("one")
    captured(service, wt)
    (wt / "a.txt").write_text("two, captured")
    index = service.caches.worktree(wt)
    assert index.capture_changed({"a.txt"}) is not None  # the fast path's update, in memory
    assert Prescan.run(service, wt).found == set()


def test_it_never_writes_the_live_cache_file_while_it_scans(service: Service,
                                                            tmp_path: Path, scan_by: str) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("one")
    (wt / "b.txt").write_text("same")
    captured(service, wt)
    cache_file = service.caches.worktree(wt).gitdir / "index"
    service.caches.worktree(wt).persist()
    before = cache_file.read_bytes()
    (wt / "a.txt").write_text("two")
    # Same content, new times: git's full refresh would write such an entry to the file.
    os.utime(wt / "b.txt", (1_000_000_000, 1_000_000_000))
    scan = Prescan.run(service, wt)
    assert cache_file.read_bytes() == before
    # git lists a file whose stat data alone changed (libgit2 compares its content): the update
    # under the lock re-reads it and keeps its new stat data, so it is neither drift nor found
    # again.
    assert scan.found == ({"a.txt", "b.txt"} if scan_by == "git" else {"a.txt"})
    source = DriftRecorder()
    with service.worktree_lock(wt):
        capture = scan.verify(service.caches.worktree(wt), source, wt, reported={"a.txt"})
    assert capture is not None and source.drifted == set()
    tree = service.store.repo[capture.tree]
    assert (tree["a.txt"].data, tree["b.txt"].data) == (b"two", b"same")
    assert Prescan.run(service, wt).found == set()


@pytest.mark.parametrize("change, reason", [
    ("file-to-dir", "changed between file and directory"),
    ("dir-to-file", "changed between file and directory"),
    ("nested-repo", "nested repository"),
    ("too-many", f"more than {DIRTY_LIMIT} paths"),
])
def test_what_only_a_full_scan_can_say_declines(service: Service, tmp_path: Path, change: str,
                                                reason: str, scan_by: str) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "x").write_text("a file")
    (wt / "d").mkdir()
    (wt / "d" / "f").write_text("in a directory")
    captured(service, wt)
    if change == "file-to-dir":
        (wt / "x").unlink()
        (wt / "x").mkdir()
        (wt / "x" / "inside").write_text("now a directory")
    elif change == "dir-to-file":
        shutil.rmtree(wt / "d")
        (wt / "d").write_text("now a file")
    elif change == "nested-repo":
        make_git_worktree(wt / "vendor")
        (wt / "vendor" / "lib.txt").write_text("lib")
    else:
        (wt / "many").mkdir()
        for i in range(DIRTY_LIMIT + 1):
            (wt / "many" / f"f{i}").write_text("")
    scan = Prescan.run(service, wt)
    assert scan.found is None
    assert reason in scan.why_not


def test_no_cache_and_nested_repositories_decline_before_scanning(service: Service,
                                                                  tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a")
    scan = Prescan.run(service, wt)  # nothing captured yet: no stat cache loaded
    assert scan.found is None and "no stat cache" in scan.why_not

    nested = make_git_worktree(tmp_path / "outer")
    (nested / "top.txt").write_text("top")
    make_git_worktree(nested / "inner")
    (nested / "inner" / "f.txt").write_text("f")
    git(nested / "inner", "add", "-A")
    captured(service, nested)  # the inner repository gets a stat cache of its own
    scan = Prescan.run(service, nested)
    assert scan.found is None and scan.why_not == "nested repositories"


def test_without_git_or_when_git_fails_it_declines(service: Service, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(prescan, "GIT_SCAN_FROM_BYTES", 0)
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a")
    captured(service, wt)
    with monkeypatch.context() as patched:
        patched.setenv("PATH", str(tmp_path / "no-git-here"))
        scan = Prescan.run(service, wt)
    assert scan.found is None and "the scan failed" in scan.why_not
    # git refuses the cache's git dir (its HEAD gone): it says so, and the scan declines.
    head = service.caches.worktree(wt).gitdir / "HEAD"
    saved = head.read_bytes()
    head.unlink()
    try:
        scan = Prescan.run(service, wt)
    finally:
        head.write_bytes(saved)
    assert scan.found is None and "exit" in scan.why_not
    assert Prescan.run(service, wt).found == set()
