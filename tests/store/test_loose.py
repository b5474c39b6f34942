"""``loose``: a stored (uncompressed) loose object is one git reads and ``fsck --strict``
accepts, with the id libgit2 gives the same bytes; ``commit_bytes`` are byte for byte what
libgit2's ``create_commit`` writes; a fast-path capture of a wide root writes its root that
way and the store stays clean."""

from __future__ import annotations

import os
import subprocess
import zlib
from pathlib import Path

import pygit2
import pytest

from snapshotd.capture.stat_caches import StatCaches
from snapshotd.store.loose import StoredObjects, commit_bytes, stored_zlib, write_stored
from snapshotd.store.store import Store
from snapshotd.store.trees import known_file_count, rewrite_tree


def _wide_tree(repo: pygit2.Repository, entries: int) -> bytes:
    blob = repo.create_blob(b"x\n")
    builder = repo.TreeBuilder()
    for i in range(entries):
        builder.insert(f"f{i:05d}", blob, pygit2.GIT_FILEMODE_BLOB)
    return repo.odb.read(builder.write())[1]


def _git(store: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(store), *args], check=True, capture_output=True,
                          text=True).stdout


def test_stored_tree_is_a_valid_object_with_libgit2s_id(tmp_path: Path) -> None:
    store = tmp_path / "store.git"
    repo = pygit2.init_repository(str(store), bare=True)
    repo.create_blob(b"x\n")
    # Built (and given its id by libgit2) in another repository: the store has only the blob.
    other = pygit2.init_repository(str(tmp_path / "other.git"), bare=True)
    data = _wide_tree(other, 2000)
    expected = other.odb.write(pygit2.GIT_OBJECT_TREE, data)
    assert not repo.odb.exists(expected)
    oid = write_stored(store / "objects", "tree", data, fsync=True)
    assert oid == expected
    path = store / "objects" / str(oid)[:2] / str(oid)[2:]
    raw = path.read_bytes()
    # Stored blocks: about the size of the data, and a zlib stream git can inflate.
    assert len(raw) > len(data)
    assert zlib.decompress(raw) == b"tree %d\0" % len(data) + data
    assert oct(path.stat().st_mode & 0o777) == "0o444"
    assert _git(store, "cat-file", "-t", str(oid)).strip() == "tree"
    assert len(_git(store, "ls-tree", str(oid)).splitlines()) == 2000
    subprocess.run(["git", "-C", str(store), "fsck", "--strict", "--no-dangling"], check=True,
                   capture_output=True)
    reader = pygit2.Repository(str(store))
    assert len(reader[oid].peel(pygit2.Tree)) == 2000
    # Written once: an object already loose is left as it is.
    before = path.stat().st_mtime_ns
    os.utime(path, ns=(before - 10**9, before - 10**9))
    assert write_stored(store / "objects", "tree", data, fsync=False) == oid
    assert path.stat().st_mtime_ns == before - 10**9
    assert not [p for p in (store / "objects").rglob("tmp_obj_*")]


def test_commit_bytes_match_libgit2(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "store.git"), bare=True)
    tree = repo.TreeBuilder().write()
    for offset in (0, 60, -330, 845):
        sig = pygit2.Signature("snapshotd", "snapshotd@localhost", 1764590000, offset)
        message = f"snapshotd: tool seq 3\n\nSnapshotd-Run: r1\nSnapshotd-Offset: {offset}\n"
        first = repo.create_commit(None, sig, sig, message, tree, [])
        assert repo.odb.read(first)[1] == commit_bytes(str(tree), [], sig, sig, message)
        second = repo.create_commit(None, sig, sig, message, tree, [first])
        raw = commit_bytes(str(tree), [str(first)], sig, sig, message)
        assert repo.odb.read(second)[1] == raw
        assert repo.odb.write(pygit2.GIT_OBJECT_COMMIT, raw) == second


def test_fast_path_capture_of_a_wide_root_stays_clean(tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    for i in range(700):  # a root of 700 directories: wide, rewritten as raw bytes
        (wt / f"d{i:03d}").mkdir(parents=True)
        (wt / f"d{i:03d}" / "f.txt").write_text(f"{i}\n")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    index = caches.worktree(wt)
    first = index.capture().tree
    (wt / "d005" / "f.txt").write_text("changed\n")
    second = index.capture_changed(["d005/f.txt"])
    assert second is not None and second.tree != first
    # The root was written stored (not deflated by libgit2 after a failed rewrite).
    raw = (store.path / "objects" / second.tree[:2] / second.tree[2:]).read_bytes()
    inflated = zlib.decompress(raw)
    assert inflated.startswith(b"tree ") and len(raw) > len(inflated)
    assert _git(store.path, "cat-file", "-p", f"{second.tree}:d005/f.txt") == "changed\n"
    index_file = tmp_path / "scratch-index"
    env = dict(os.environ, GIT_INDEX_FILE=str(index_file), GIT_DIR=str(tmp_path / "o.git"),
               GIT_WORK_TREE=str(wt))
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "o.git")], check=True)
    subprocess.run(["git", "add", "-A"], cwd=wt, env=env, check=True)
    oracle = subprocess.run(["git", "write-tree"], cwd=wt, env=env, check=True,
                            capture_output=True, text=True).stdout.strip()
    assert second.tree == oracle
    subprocess.run(["git", "-C", str(store.path), "fsck", "--strict", "--no-dangling"],
                   check=True, capture_output=True)


def test_a_full_scans_file_count_is_remembered_and_right(tmp_path: Path) -> None:
    # The first checkpoint counts every file as added; a full scan's tree holds its index's
    # entries, so that count is remembered rather than found by a diff of the whole tree.
    wt = tmp_path / "wt"
    for i in range(40):
        (wt / f"d{i % 4}" / f"s{i % 3}").mkdir(parents=True, exist_ok=True)
        (wt / f"d{i % 4}" / f"s{i % 3}" / f"f{i}.txt").write_text(f"{i}\n")
    (wt / "link").symlink_to("d0")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    tree = caches.worktree(wt).capture().tree
    listed = _git(store.path, "ls-tree", "-r", tree).splitlines()
    assert known_file_count(tree) == len(listed) == 41
    assert store.tree_changes(None, tree) == (41, 0, 0)


def test_a_stored_write_that_fails_falls_back_to_libgit2_and_says_so(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    repo = pygit2.init_repository(str(tmp_path / "store.git"), bare=True)
    blob = repo.create_blob(b"x\n")
    index = pygit2.Index()
    for i in range(700):
        index.add(pygit2.IndexEntry(f"f{i:04d}", blob, pygit2.GIT_FILEMODE_BLOB))
    base = str(index.write_tree(repo))
    index.add(pygit2.IndexEntry("f0005", repo.create_blob(b"y\n"), pygit2.GIT_FILEMODE_BLOB))
    # An object directory that does not exist: the stored write fails with an OSError.
    broken = StoredObjects(tmp_path / "nowhere" / "objects", fsync=False)
    with caplog.at_level("WARNING", logger="snapshotd.store"):
        tree, counts = rewrite_tree(repo, index, base, {"f0005"}, broken)
    assert tree == str(index.write_tree(repo)) and counts == (0, 1, 0)
    assert "could not write a" in caplog.text and "writing it deflated" in caplog.text
    assert repo.odb.exists(pygit2.Oid(hex=tree))


@pytest.mark.parametrize("size", [0, 1, 65535 - 12, 65535 - 11, 65535, 65536, 3 * 65535 + 7,
                                  327_680])
def test_stored_stream_inflates_to_header_and_data_at_every_block_boundary(size: int) -> None:
    """``stored_zlib`` frames its blocks itself: what zlib inflates (checksum included) is the
    header and the data, whatever the data's length against the 65,535-byte block."""
    data = os.urandom(size)
    header = b"tree %d\0" % size
    body = stored_zlib(header, data)
    assert zlib.decompress(body) == header + data
    blocks = -(-(len(header) + size) // 65535)
    assert len(body) == 2 + 5 * blocks + len(header) + size + 4  # stored: nothing compressed
