"""The store's file system out of inodes (bytes to spare): the capture fails with a gap of its
own reason, ``inodes-exhausted`` (it was ``store-write-failed``, which sends one to look for
bytes with ``df``, or ``capture-failed``), nothing is acknowledged, and once inodes are free the
next capture holds every change (checked against ``git add -A && git write-tree``).

The disk is real: a tmpfs with few inodes, mounted for the test (skipped, saying why, when
mounting is not permitted). The gap spool and the ledger are kept off it."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshotd_client import SnapshotdError
from tests.conftest import QUIET_WATCHER, Daemon, make_git_worktree
from tests.support.helpers import full_tree
from tests.system.test_full_disk import env_with_home_on, mount_tmpfs

RUN = {"run_id": "inodes", "node_id": "n"}


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "disk"
    mount_tmpfs(where, "64m", "nr_inodes=600")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def use_every_inode(where: Path) -> Path:
    filler = where / "filler"
    filler.mkdir()
    n = 0
    try:
        while True:
            (filler / str(n)).touch()
            n += 1
    except OSError:
        pass
    assert os.statvfs(where).f_favail == 0 and os.statvfs(where).f_bavail > 0
    return filler


def test_inode_exhaustion_is_its_own_gap_and_the_next_capture_has_the_change(
        tmp_path: Path, disk: Path) -> None:
    env = env_with_home_on(disk, tmp_path)
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("before\n")
    fresh = make_git_worktree(tmp_path / "fresh")
    (fresh / "b.txt").write_text("never captured\n")
    daemon = Daemon(env, extra_env=dict(QUIET_WATCHER)).start()
    with daemon.client() as c:
        c.attempt_begin("inodes", "n", str(wt))
        first = c.snapshot(str(wt), **RUN, tool_use_id="t0")
        c.attempt_begin("fresh", "n", str(fresh))
        filler = use_every_inode(disk)
        for i in range(5):
            (wt / f"new{i}.txt").write_text(f"new {i}\n")
        with pytest.raises(SnapshotdError) as err:
            c.snapshot(str(wt), **RUN, tool_use_id="t-full")
        assert err.value.code == "capture-failed", err.value
        with pytest.raises(SnapshotdError) as err:
            c.snapshot(str(fresh), run_id="fresh", node_id="n", tool_use_id="t-fresh")
        assert err.value.code == "capture-failed", err.value
        assert [cp["seq"] for cp in c.list("inodes")["checkpoints"]] == [first["seq"]]
        gaps = {g["tool_use_id"]: g for g in env.read_gaps() if g.get("tool_use_id")}
        assert gaps["t-full"]["reason"] == "inodes-exhausted", gaps["t-full"]
        assert gaps["t-fresh"]["reason"] == "inodes-exhausted", gaps["t-fresh"]
        assert "inode" in gaps["t-full"]["detail"]
        shutil.rmtree(filler)
        after = c.snapshot(str(wt), **RUN, tool_use_id="t-after")
    daemon.stop()
    assert after["tree"] == full_tree(wt, tmp_path / "oracle-index")
