"""The power-loss test layer itself (tests/support/powerfs.py): after ``cut()`` the backing directory
holds exactly what fsync and directory fsync made durable, and nothing a clean unmount loses.
Real FUSE mounts; skipped, saying why, where FUSE is unavailable."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import powerfs
from tests.support.powerfs import PowerFS


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


def write(path: Path, data: str, sync: bool = False) -> None:
    with open(path, "w") as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def sync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def tree(root: Path) -> dict[str, str]:
    """Every regular file under root, by relative path, with its content ('<dir>' for dirs)."""
    out: dict[str, str] = {}
    for top, dirs, files in os.walk(root):
        for name in dirs:
            out[os.path.relpath(os.path.join(top, name), root)] = "<dir>"
        for name in files:
            out[os.path.relpath(os.path.join(top, name), root)] = Path(top, name).read_text()
    return out


def test_unsynced_data_is_lost_and_a_durable_name_comes_back_empty(pfs: PowerFS) -> None:
    m = pfs.mount()
    write(m / "a", "never fsynced")
    write(m / "b", "fsynced", sync=True)
    sync_dir(m)
    pfs.cut()
    assert tree(pfs.backing) == {"a": "", "b": "fsynced"}


def test_a_name_is_lost_without_a_directory_fsync(pfs: PowerFS) -> None:
    m = pfs.mount()
    write(m / "kept", "x", sync=True)
    sync_dir(m)
    write(m / "lost", "y", sync=True)  # the data is durable, the name is not
    pfs.cut()
    assert tree(pfs.backing) == {"kept": "x"}


def test_a_later_unsynced_change_rolls_back_to_the_last_fsync(pfs: PowerFS) -> None:
    m = pfs.mount()
    write(m / "f", "one", sync=True)
    sync_dir(m)
    write(m / "f", "two, not synced")
    pfs.cut()
    assert tree(pfs.backing) == {"f": "one"}


def test_what_was_there_at_mount_is_durable_and_survives_unsynced_changes(pfs: PowerFS) -> None:
    (pfs.backing / "old").write_text("at mount")
    (pfs.backing / "gone").write_text("removed without dir fsync")
    (pfs.backing / "sub").mkdir()
    (pfs.backing / "sub" / "deep").write_text("deep")
    m = pfs.mount()
    write(m / "old", "overwritten in place")
    os.unlink(m / "gone")
    os.unlink(m / "sub" / "deep")
    pfs.cut()
    assert tree(pfs.backing) == {"old": "at mount", "gone": "removed without dir fsync",
                                 "sub": "<dir>", "sub/deep": "deep"}


def test_rename_without_directory_fsync_is_lost_and_with_it_is_kept(pfs: PowerFS) -> None:
    (pfs.backing / "d1").mkdir()
    (pfs.backing / "d2").mkdir()
    (pfs.backing / "d1" / "HEAD").write_text("old")
    m = pfs.mount()
    write(m / "d1" / "HEAD.lock", "new", sync=True)
    os.rename(m / "d1" / "HEAD.lock", m / "d1" / "HEAD")
    write(m / "d2" / "HEAD.lock", "new2", sync=True)
    os.rename(m / "d2" / "HEAD.lock", m / "d2" / "HEAD")
    sync_dir(m / "d2")
    pfs.cut()
    assert tree(pfs.backing) == {"d1": "<dir>", "d1/HEAD": "old", "d2": "<dir>",
                                 "d2/HEAD": "new2"}


def test_git_style_link_then_unlink_needs_the_file_fsync_for_its_content(pfs: PowerFS) -> None:
    # git's loose objects: write a temporary file, link it to its final name, unlink the
    # temporary. A directory fsync then makes the name durable -- with the data only if the
    # file itself was fsynced (core.fsync).
    m = pfs.mount()
    (m / "objects").mkdir()
    sync_dir(m)
    write(m / "objects" / "tmp_a", "object a")  # not fsynced
    os.link(m / "objects" / "tmp_a", m / "objects" / "aa")
    os.unlink(m / "objects" / "tmp_a")
    write(m / "objects" / "tmp_b", "object b", sync=True)
    os.link(m / "objects" / "tmp_b", m / "objects" / "bb")
    os.unlink(m / "objects" / "tmp_b")
    sync_dir(m / "objects")
    pfs.cut()
    assert tree(pfs.backing) == {"objects": "<dir>", "objects/aa": "", "objects/bb": "object b"}


def test_a_new_directory_needs_its_parent_fsynced(pfs: PowerFS) -> None:
    m = pfs.mount()
    (m / "a").mkdir()
    (m / "a" / "b").mkdir()
    write(m / "a" / "b" / "f", "data", sync=True)
    sync_dir(m / "a" / "b")
    sync_dir(m / "a")  # but not m: a itself is not durable, so nothing under it is
    pfs.cut()
    assert tree(pfs.backing) == {}


def test_fsync_after_rename_makes_content_durable_under_the_durable_name(pfs: PowerFS) -> None:
    m = pfs.mount()
    write(m / "tmp", "v1")
    os.rename(m / "tmp", m / "final")
    sync_dir(m)
    with open(m / "final", "a") as f:
        f.write("+v2")
        f.flush()
        os.fsync(f.fileno())
    pfs.cut()
    assert tree(pfs.backing) == {"final": "v1+v2"}


def test_clean_unmount_loses_nothing_and_remount_starts_durable(pfs: PowerFS) -> None:
    m = pfs.mount()
    write(m / "f", "unsynced but cleanly unmounted")
    pfs.unmount()
    assert tree(pfs.backing) == {"f": "unsynced but cleanly unmounted"}
    m = pfs.mount()
    write(m / "f", "changed")
    pfs.cut()
    assert tree(pfs.backing) == {"f": "unsynced but cleanly unmounted"}


def test_a_sync_limit_cuts_after_that_many_syncs(pfs: PowerFS) -> None:
    m = pfs.mount(sync_limit=2)
    write(m / "a", "a", sync=True)  # sync 1
    sync_dir(m)  # sync 2: "a" is durable
    assert not pfs.status()["frozen"]
    write(m / "b", "b", sync=True)  # ignored: the power is already out
    sync_dir(m)
    assert pfs.status() == {"syncs": 2, "limit": 2, "frozen": True}
    pfs.cut()
    assert tree(pfs.backing) == {"a": "a"}


def test_an_armed_cut_fires_right_after_the_chosen_operation(pfs: PowerFS) -> None:
    m = pfs.mount()
    (m / "refs").mkdir()
    sync_dir(m)
    pfs.arm("fsync", "refs/*.lock")
    write(m / "refs" / "1.lock", "commit", sync=True)  # the cut point: right after this
    os.rename(m / "refs" / "1.lock", m / "refs" / "1")
    sync_dir(m / "refs")  # ignored
    assert pfs.status()["frozen"]
    log = pfs.log()
    assert (2, "fsync", "refs/1.lock") in log and (2, "rename", "refs/1") in log
    pfs.cut()
    assert tree(pfs.backing) == {"refs": "<dir>"}


def test_sqlite_with_synchronous_full_keeps_every_committed_row(pfs: PowerFS) -> None:
    m = pfs.mount()
    db = sqlite3.connect(m / "ledger.sqlite3", isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (n INTEGER)")
    for n in range(5):
        db.execute("INSERT INTO t VALUES (?)", (n,))
    pfs.freeze()
    db.execute("INSERT INTO t VALUES (99)")  # committed after the cut point: lost
    db.close()
    pfs.cut()
    db = sqlite3.connect(pfs.backing / "ledger.sqlite3")
    assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    assert [r[0] for r in db.execute("SELECT n FROM t ORDER BY n")] == [0, 1, 2, 3, 4]
    db.close()


def test_journal_model_commits_every_name_at_any_fsync_but_not_the_data(
        tmp_path: Path) -> None:
    reason = powerfs.unavailable()
    if reason:
        pytest.skip(reason)
    (tmp_path / "backing").mkdir()
    (tmp_path / "backing" / "refs").mkdir()
    fs = PowerFS(tmp_path / "backing", tmp_path / "mnt", journal=True)
    m = fs.mount()
    try:
        write(m / "HEAD", "ref: refs/heads/main")  # never fsynced
        (m / "objects").mkdir()
        write(m / "objects" / "tmp", "blob")
        os.rename(m / "objects" / "tmp", m / "objects" / "ab")
        (m / "moved").mkdir()
        write(m / "moved" / "x", "x", sync=True)  # commits the journal so far
        os.rename(m / "moved", m / "renamed")
        write(m / "renamed" / "y", "y", sync=True)  # commits the rename and y's name
        write(m / "refs" / "1.lock", "commit", sync=True)  # the lock's name is now durable
        write(m / "late", "never committed")
    finally:
        fs.cut()
    assert tree(fs.backing) == {"HEAD": "", "objects": "<dir>", "objects/ab": "",
                                "renamed": "<dir>", "renamed/x": "x", "renamed/y": "y",
                                "refs": "<dir>", "refs/1.lock": "commit"}


def test_the_mount_lists_directories_like_the_backing(pfs: PowerFS) -> None:
    m = pfs.mount()
    (m / "d" / "e").mkdir(parents=True)
    write(m / "d" / "e" / "f", "x")
    os.symlink("f", m / "d" / "e" / "l")
    assert sorted(os.walk(m)) == [(str(m), ["d"], []), (str(m / "d"), ["e"], []),
                                  (str(m / "d" / "e"), [], ["f", "l"])]
    assert os.readlink(m / "d" / "e" / "l") == "f"


def test_the_probe_says_why_when_fuse_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    powerfs.unavailable.cache_clear()
    monkeypatch.setattr(os.path, "exists", lambda p: False if p == "/dev/fuse" else True)
    try:
        assert powerfs.unavailable() == "/dev/fuse is missing (no FUSE in this kernel or container)"
    finally:
        monkeypatch.undo()
        powerfs.unavailable.cache_clear()
