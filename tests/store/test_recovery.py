"""Start-up repair (snapshotd/recovery.py) and the fsync helpers (snapshotd/durable.py): stale
locks, damaged loose objects and ref files are removed and reported, valid ones never; what the
helpers write survives a power cut (on powerfs, where FUSE is available)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshotd.core import durable
from snapshotd.store.recovery import recover_home
from tests.support import powerfs
from tests.support.powerfs import PowerFS


def git(store: Path, *args: str, stdin: bytes | None = None) -> str:
    return subprocess.run(["git", "--git-dir", str(store), *args], input=stdin,
                          capture_output=True, check=True).stdout.decode().strip()


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    subprocess.run(["git", "init", "-q", "--bare", str(home / "store.git")], check=True)
    (home / "worktrees" / "wt-1").mkdir(parents=True)
    return home


def test_stale_locks_are_removed_and_listed(home: Path) -> None:
    store = home / "store.git"
    ref_dir = store / "refs" / "snapshotd" / "runs" / "r" / "n" / "0"
    ref_dir.mkdir(parents=True)
    (ref_dir / "1.lock").write_text("0" * 40 + "\n")
    (store / "packed-refs.lock").write_text("")
    (home / "worktrees" / "wt-1" / "index.lock").write_text("")
    (home / "worktrees" / "wt-1" / "index").write_text("kept")
    report = recover_home(home)
    assert report.stale_locks == ["store.git/packed-refs.lock",
                                  "store.git/refs/snapshotd/runs/r/n/0/1.lock",
                                  "worktrees/wt-1/index.lock"]
    assert not (ref_dir / "1.lock").exists() and (home / "worktrees" / "wt-1" / "index").exists()
    assert recover_home(home).stale_locks == []


def test_damaged_loose_objects_are_removed_and_sound_ones_kept(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SNAPSHOTD_BOOT_ID", "boot-1")
    store = home / "store.git"
    ids = [git(store, "hash-object", "-w", "--stdin", stdin=f"blob {i}\n".encode())
           for i in range(4)]
    paths = [store / "objects" / oid[:2] / oid[2:] for oid in ids]
    for p in paths[1:]:
        p.chmod(0o644)
    paths[1].write_bytes(b"")  # the name reached the disk, the data did not
    paths[2].write_bytes(b"not zlib at all")
    paths[3].write_bytes(paths[0].read_bytes())  # valid object, wrong name
    report = recover_home(home)
    assert sorted(report.bad_objects) == sorted(ids[1:])
    assert paths[0].exists() and not any(p.exists() for p in paths[1:])
    assert git(store, "cat-file", "-p", ids[0]) == "blob 0"
    assert report.as_dict()["bad_objects"] == 3
    # Once per boot: a later start in the same boot does not read every object again.
    paths[0].chmod(0o644)
    paths[0].write_bytes(b"")
    assert recover_home(home).bad_objects == []
    monkeypatch.setenv("SNAPSHOTD_BOOT_ID", "boot-2")
    assert recover_home(home).bad_objects == [ids[0]]


def test_damaged_ref_files_are_removed_and_sound_ones_kept(home: Path) -> None:
    store = home / "store.git"
    blob = git(store, "hash-object", "-w", "--stdin", stdin=b"x")
    tree = git(store, "mktree", stdin=f"100644 blob {blob}\tx\n".encode())
    commit = git(store, "commit-tree", tree, "-m", "m")
    git(store, "update-ref", "refs/snapshotd/runs/r/n/0/1", commit)
    git(store, "update-ref", "refs/snapshotd/runs/r/n/0/2", commit)
    (store / "refs" / "snapshotd" / "runs" / "r" / "n" / "0" / "2").write_text("")
    report = recover_home(home)
    assert report.bad_refs == ["refs/snapshotd/runs/r/n/0/2"]
    assert git(store, "rev-parse", "refs/snapshotd/runs/r/n/0/1") == commit
    assert subprocess.run(["git", "--git-dir", str(store), "fsck", "--strict"],
                          capture_output=True).returncode == 0


def test_write_file_replaces_and_make_dirs_creates(tmp_path: Path) -> None:
    durable.make_dirs(tmp_path / "a" / "b" / "c")
    assert (tmp_path / "a" / "b" / "c").is_dir()
    durable.write_file(tmp_path / "a" / "f", b"one")
    durable.write_file(tmp_path / "a" / "f", b"two")
    assert (tmp_path / "a" / "f").read_bytes() == b"two"
    assert sorted(os.listdir(tmp_path / "a")) == ["b", "f"]


@pytest.fixture
def pfs(tmp_path: Path) -> Iterator[PowerFS]:
    reason = powerfs.unavailable()
    if reason:
        pytest.skip(reason)
    (tmp_path / "backing").mkdir()
    fs = PowerFS(tmp_path / "backing", tmp_path / "mnt")
    yield fs
    if fs.proc is not None:
        fs.unmount()


def test_what_the_helpers_write_survives_a_power_cut(pfs: PowerFS) -> None:
    m = pfs.mount()
    durable.make_dirs(m / "home" / "store.git" / "refs")
    durable.write_file(m / "home" / "store.git" / "HEAD", b"ref: refs/heads/main\n")
    (m / "home" / "new").mkdir()
    (m / "home" / "new" / "sub").mkdir()
    (m / "home" / "new" / "sub" / "f").write_text("data")
    durable.sync_tree(m / "home" / "new")
    (m / "home" / "lost").write_text("not synced")
    pfs.cut()
    b = pfs.backing / "home"
    assert (b / "store.git" / "refs").is_dir()
    assert (b / "store.git" / "HEAD").read_text() == "ref: refs/heads/main\n"
    assert (b / "new" / "sub" / "f").read_text() == "data"
    assert not (b / "lost").exists()
