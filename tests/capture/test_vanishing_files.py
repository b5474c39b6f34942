"""Files that vanish while a capture reads the worktree: the real service, a real git worktree
whose files another thread deletes and writes again without pause.

A file deleted between libgit2's walk and its read failed the whole capture as ``scan-failed``
(or, when its name was back by the time the daemon looked, ``store-write-failed``: "the store's
disk"). A vanished file is the worktree changing under the capture, not a fault: the read is
retaken, and only a tree whose files keep vanishing on every retake is a gap, of its own reason
(``file-vanished``). Once the churn stops, the next capture holds the tree exactly (checked
against ``git add -A && git write-tree`` in a scratch index)."""

from __future__ import annotations

import random
import threading
from pathlib import Path

from snapshotd.core import ServiceError
from tests.conftest import make_git_worktree
from tests.support.helpers import full_tree

FILES = 150
CAPTURES = 30


def churn(wt: Path, stop: threading.Event) -> None:
    rng = random.Random(7)
    while not stop.is_set():
        path = wt / f"f{rng.randrange(FILES)}.txt"
        try:
            path.unlink()
        except FileNotFoundError:
            path.write_bytes(b"y" * rng.randrange(1, 20000))


def test_files_vanishing_mid_capture_are_retaken_not_store_or_scan_failures(
        service, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    for i in range(FILES):
        (wt / f"f{i}.txt").write_bytes(b"x" * (i * 40 + 1))
    request = {"cwd": str(wt), "run_id": "r", "node_id": "n", "tier": 1, "source": "hook"}
    service.snapshot(request)
    stop = threading.Event()
    thread = threading.Thread(target=churn, args=(wt, stop))
    thread.start()
    failures: list[str] = []
    try:
        for _ in range(CAPTURES):
            try:
                service.snapshot(request)
            except ServiceError as exc:
                failures.append(exc.message)
    finally:
        stop.set()
        thread.join()
    reasons = [g["reason"] for g in service.gaps.all()]
    assert set(reasons) <= {"file-vanished"}, (reasons, failures[:3])
    assert len(reasons) == len(failures)
    after = service.snapshot(request)
    assert after["tree"] == full_tree(wt, tmp_path / "oracle-index")
