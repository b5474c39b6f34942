"""Settled captures (snapshotd/service/settling.py), in process on a real store and worktree:
paths reported changed while a capture read the tree are read again, and a checkpoint whose
paths kept changing says so (``unsettled``). The change source here is scripted: each time the
capture asks what changed meanwhile, it first renames files in the worktree, as a storm landing
during the read would, and reports the paths as the watcher would (the real watcher under a
real storm: tests/system/test_rename_storm.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from snapshotd.service import settling
from snapshotd.service.service import Service
from tests.conftest import make_git_worktree


class StormSource:
    """A ``ChangeSource`` whose worktree is renamed under the capture: ``renames`` are made
    (and reported) at the first ``storms`` of its ``late`` calls, one pair per call."""

    def __init__(self, root: Path, renames: list[tuple[str, str]], storms: int,
                 vouch: bool = True) -> None:
        self.root = root
        self.renames = renames
        self.storms = storms
        self.vouch = vouch
        self.pending: set[str] = set()
        self.lates = 0
        self.failures = 0

    def take(self, root: Path, mode: str) -> set[str] | None:
        taken, self.pending = self.pending, set()
        return taken if self.vouch else None

    def late(self, root: Path) -> set[str] | None:
        if self.lates < self.storms:
            old, new = self.renames[self.lates % len(self.renames)]
            if not (self.root / old).exists():
                old, new = new, old
            os.rename(self.root / old, self.root / new)
            self.pending |= {old, new}
        self.lates += 1
        return set(self.pending)

    def failed(self, root: Path) -> None:
        self.failures += 1

    def drift(self, root: Path, found: set[str], reported: set[str]) -> None:
        pass

    def scanned(self, root: Path, seconds: float) -> None:
        pass


def worktree(tmp_path: Path) -> Path:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / ".gitignore").write_text("build/\n")
    for name in ("a.one", "b.one", "c.one"):
        (wt / name).write_text(f"content of {name}\n")
    (wt / "build").mkdir()
    (wt / "build" / "out.o").write_text("ignored\n")
    return wt


def names(service: Service, tree: str) -> set[str]:
    return {e.name for e in service.store.repo[tree]}


def read(service: Service, wt: Path, source: StormSource):
    service.change_source = source
    with service.worktree_lock(wt):
        return service.read_worktree(wt)


def test_paths_renamed_during_the_read_are_read_again(service: Service,
                                                       tmp_path: Path) -> None:
    wt = worktree(tmp_path)
    service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})
    source = StormSource(wt, [("a.one", "a.two"), ("b.one", "b.two")], storms=2)
    capture = read(service, wt, source)
    # Both renames landed after the read began: the checkpoint holds the tree after them.
    assert {"a.two", "b.two", "c.one"} <= names(service, capture.tree)
    assert not {"a.one", "b.one"} & names(service, capture.tree)
    assert capture.skipped == []
    assert service.counters["settle_retakes"] == 2 and service.counters["unsettled"] == 0


def test_paths_that_never_settle_are_listed_unsettled(service: Service,
                                                      tmp_path: Path) -> None:
    wt = worktree(tmp_path)
    service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})
    source = StormSource(wt, [("a.one", "a.two"), ("b.one", "b.two")], storms=100)
    capture = read(service, wt, source)
    assert source.lates == settling.SETTLE_ROUNDS + 1  # bounded
    unsettled = sorted(s["path"] for s in capture.skipped if s["reason"] == "unsettled")
    assert unsettled == ["b.one", "b.two"]  # what the last look found still changing
    assert service.counters["unsettled"] == 1
    # The checkpoint is still recorded, with its mark, through the same path a hook takes.
    reply = service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})
    assert any(s["reason"] == "unsettled" for s in reply["skipped"])


def test_ignored_paths_and_a_single_file_do_not_unsettle(service: Service,
                                                         tmp_path: Path) -> None:
    wt = worktree(tmp_path)
    service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})
    # A build renaming inside an ignored directory, forever: nothing to retake.
    source = StormSource(wt, [("build/out.o", "build/out.tmp")], storms=100)
    assert read(service, wt, source).skipped == []
    # One file changing alone: the rest stood still, so the tree existed as read.
    (wt / "c.one").write_text("rewritten\n")
    alone = StormSource(wt, [], storms=0)
    alone.pending = {"c.one"}
    service.change_source = alone
    with service.worktree_lock(wt):
        capture = service.caches.worktree(wt).capture()
        capture = settling.settle(service.caches.worktree(wt), alone, wt, capture,
                                  service.counters)
    assert capture.skipped == [] and service.counters["settle_retakes"] == 0


def test_a_tree_too_large_to_scan_again_is_marked_not_rescanned(
        service: Service, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(settling, "FULL_RETAKE_MAX_ENTRIES", 2)
    wt = worktree(tmp_path)
    service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})
    # The source cannot narrow the retake to the paths (a type change, an overflow...).
    source = StormSource(wt, [("a.one", "a.two"), ("b.one", "b.two")], storms=1, vouch=False)
    capture = read(service, wt, source)
    assert source.lates == 1  # asked once: no retake was made
    assert sorted(s["path"] for s in capture.skipped if s["reason"] == "unsettled") == \
        ["a.one", "a.two"]
    # What it handed over is owed: the next capture scans fully.
    assert source.failures == 1
