"""``snapshotd.store.loose_refs``: an attempt ref moved through a spare file of its own, read back by
the git CLI (``git rev-parse``, ``git for-each-ref``, ``git fsck``) as the independent oracle;
no inode made or freed once warm, a spare linked to a ref never written, a ref that is not
loose left to libgit2, and what an interrupted move leaves removed at start."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pygit2
import pytest

from snapshotd.capture.stat_caches import StatCaches
from snapshotd.core.checkpoint import Checkpoint
from snapshotd.core.keys import OLD_SUFFIX, SPARE_SUFFIX, AttemptKey
from snapshotd.store.loose_refs import LooseRefMover
from snapshotd.store.recovery import remove_stale_locks
from snapshotd.store.store import Store
from tests.support.helpers import git

REF = "refs/snapshotd/runs/r/n/0/1"


def _store(tmp_path: Path, commits: int) -> tuple[pygit2.Repository, Path, list[str]]:
    repo = pygit2.init_repository(str(tmp_path / "store.git"), bare=True)
    sig = pygit2.Signature("t", "t@t", 1_700_000_000, 0)
    ids: list[str] = []
    for i in range(commits):
        blob = repo.create_blob(f"{i}\n".encode())
        builder = repo.TreeBuilder()
        builder.insert("a.txt", blob, pygit2.GIT_FILEMODE_BLOB)
        parents = [pygit2.Oid(hex=ids[-1])] if ids else []
        ids.append(str(repo.create_commit(None, sig, sig, f"c{i}", builder.write(), parents)))
    return repo, Path(repo.path), ids


def _rev(store: Path, ref: str) -> str:
    return git(store, "rev-parse", ref).strip()


@pytest.mark.parametrize("fsync", [False, True])
def test_moves_are_what_git_reads_and_make_or_free_no_file_once_warm(tmp_path: Path,
                                                                     fsync: bool) -> None:
    repo, store, ids = _store(tmp_path, 5)
    repo.references.create(REF, pygit2.Oid(hex=ids[0]))
    mover = LooseRefMover(store, fsync=fsync)
    ref_file = store / REF
    inodes: set[int] = set()
    for i in range(1, 40):
        want = ids[i % len(ids)]
        assert mover.move(REF, want) is True
        assert _rev(store, REF) == want
        assert str(repo.references.get(REF).target) == want  # libgit2 reads it too
        assert ref_file.read_bytes() == f"{want}\n".encode()
        # Beside the ref: its spare (the ref's old inode, linked once), nothing else.
        assert sorted(os.listdir(ref_file.parent)) == ["1", "1" + SPARE_SUFFIX]
        spare = ref_file.with_name("1" + SPARE_SUFFIX)
        assert spare.stat().st_nlink == 1 and ref_file.stat().st_nlink == 1
        inodes |= {ref_file.stat().st_ino, spare.stat().st_ino}
    assert len(inodes) == 2, inodes  # nothing made or freed after the first move
    assert git(store, "for-each-ref", "--format=%(refname)").split() == [REF]
    git(store, "fsck", "--strict", "--no-dangling")


def test_a_ref_that_is_not_loose_is_left_to_the_caller(tmp_path: Path) -> None:
    repo, store, ids = _store(tmp_path, 1)
    assert LooseRefMover(store, fsync=False).move(REF, ids[0]) is False
    assert repo.references.get(REF) is None
    assert not (store / REF).parent.exists()  # nothing written on the way


def test_a_spare_linked_to_its_ref_is_never_written(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Were the spare a second name of the ref's own file (never made by a move; a hand or a
    damaged disk could), writing it in place would change the ref before the atomic rename."""
    repo, store, ids = _store(tmp_path, 3)
    repo.references.create(REF, pygit2.Oid(hex=ids[0]))
    mover = LooseRefMover(store, fsync=False)
    assert mover.move(REF, ids[1])
    spare = (store / REF).with_name("1" + SPARE_SUFFIX)
    spare.unlink()
    os.link(store / REF, spare)
    seen: list[str] = []
    real_rename = os.rename

    def watching_rename(src, dst, *args, **kwargs):  # the ref's id just before it moves
        seen.append((store / REF).read_text().strip())
        return real_rename(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "rename", watching_rename)
    assert mover.move(REF, ids[2])
    monkeypatch.undo()
    assert seen[0] == ids[1]  # untouched until the rename
    assert _rev(store, REF) == ids[2]
    assert spare.stat().st_nlink == 1
    git(store, "fsck", "--strict", "--no-dangling")


def test_start_up_removes_what_an_interrupted_move_left_and_spares_of_refs_gone(
        tmp_path: Path) -> None:
    """The daemon's start-up lock clean-up (``recovery.remove_stale_locks``, the home being
    ``tmp_path``) keeps a live ref's spare and removes the rest, like any stale lock."""
    repo, store, ids = _store(tmp_path, 2)
    other = "refs/snapshotd/runs/r/n/0/2"
    for ref in (REF, other):
        repo.references.create(ref, pygit2.Oid(hex=ids[0]))
    mover = LooseRefMover(store, fsync=False)
    assert mover.move(REF, ids[1]) and mover.move(other, ids[1])
    # A crash between the link and the rename: the ref's file under a second name.
    os.link(store / REF, (store / REF).with_name("1" + OLD_SUFFIX))
    (store / other).unlink()  # gone by other means than the store: its spare is left over
    removed = remove_stale_locks(tmp_path)
    assert sorted(removed) == [f"store.git/refs/snapshotd/runs/r/n/0/1{OLD_SUFFIX}",
                               f"store.git/refs/snapshotd/runs/r/n/0/2{SPARE_SUFFIX}"]
    assert sorted(os.listdir((store / REF).parent)) == ["1", "1" + SPARE_SUFFIX]
    assert (store / REF).stat().st_nlink == 1 and _rev(store, REF) == ids[1]


def test_concurrent_moves_of_many_refs_each_end_where_they_were_sent(tmp_path: Path) -> None:
    repo, store, ids = _store(tmp_path, 4)
    refs = [f"refs/snapshotd/runs/r{i}/n/0/1" for i in range(8)]
    for ref in refs:
        repo.references.create(ref, pygit2.Oid(hex=ids[0]))
    mover = LooseRefMover(store, fsync=False)
    errors: list[BaseException] = []

    def churn(ref: str, last: str) -> None:
        try:
            for i in range(60):
                assert mover.move(ref, ids[i % len(ids)])
            assert mover.move(ref, last)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=churn, args=(ref, ids[i % len(ids)]))
               for i, ref in enumerate(refs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == []
    assert [_rev(store, ref) for ref in refs] == [ids[i % len(ids)] for i in range(len(refs))]
    git(store, "fsck", "--strict", "--no-dangling")


def test_the_daemons_store_moves_attempt_refs_this_way_and_deletes_their_spares(
        tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    store = Store(tmp_path / "home", recover=True)  # as the daemon opens it
    caches = StatCaches(store)
    key = AttemptKey("r", "n", 0, 1)
    ref_file = store.path / key.ref
    commits: list[str] = []
    for seq in range(3):
        (wt / "a.txt").write_text(f"{seq}\n")
        meta = Checkpoint(key=key, seq=seq, tier=1, source="cli", worktree=str(wt))
        commits.append(store.commit(meta, caches.worktree(wt).capture().tree,
                                    commits[-1] if commits else None))
        assert _rev(store.path, key.ref) == commits[-1]
    # Created by libgit2, then moved twice through its spare.
    assert sorted(os.listdir(ref_file.parent)) == ["1", "1" + SPARE_SUFFIX]
    assert git(store.path, "rev-list", "--count", key.ref).strip() == "3"
    assert store.rewind(key, commits[-1], None)
    # The spare went with its ref: nothing of the attempt is left in its directory.
    assert not ref_file.parent.exists() or os.listdir(ref_file.parent) == []
    git(store.path, "fsck", "--strict", "--no-dangling")
