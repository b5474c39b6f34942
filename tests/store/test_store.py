"""The store's own writes and reads of refs: a ref that cannot be read is an error, never "no
checkpoint yet"; chain rewrites, ref moves and deletions, and the stat-cache keep refs."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import pygit2
import pytest

from snapshotd.capture.stat_caches import StatCaches
from snapshotd.core.checkpoint import Checkpoint
from snapshotd.core.keys import AttemptKey, worktree_id
from snapshotd.store.store import CACHE_REF_PREFIX, Store, StoreError
from tests.conftest import Daemon, Env, git

pytestmark = pytest.mark.one_ledger("the store's refs")

KEY = AttemptKey("r", "n", 0, 1)


def _store_with_one_checkpoint(tmp_path: Path) -> tuple[Store, Path, str]:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("a\n")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    tree = caches.worktree(wt).capture().tree
    meta = Checkpoint(key=KEY, seq=0, tier=1, source="cli", worktree=str(wt))
    return store, wt, store.commit(meta, tree, None)


def test_head_of_a_garbage_ref_raises(tmp_path: Path) -> None:
    store, _wt, commit = _store_with_one_checkpoint(tmp_path)
    assert store.head(KEY) is not None and str(store.head(KEY).id) == commit
    (store.path / KEY.ref).write_text("garbage\n")
    with pytest.raises(StoreError) as err:
        store.head(KEY)
    assert err.value.reason == "commit-failed"
    assert KEY.ref in err.value.message


def test_head_naming_a_missing_commit_raises(tmp_path: Path) -> None:
    store, _wt, _commit = _store_with_one_checkpoint(tmp_path)
    (store.path / KEY.ref).write_text("1" * 40 + "\n")
    with pytest.raises(StoreError) as err:
        store.head(KEY)
    assert err.value.reason == "commit-failed"


def test_head_of_an_attempt_without_checkpoints_is_none(tmp_path: Path) -> None:
    store = Store(tmp_path / "home")
    assert store.head(KEY) is None


@pytest.mark.parametrize("bad_ref", ["garbage\n", "1" * 40 + "\n"], ids=["garbage", "missing"])
def test_capture_over_an_unreadable_ref_continues_from_the_last_readable_checkpoint(
        sd_env: Env, daemon: Daemon, tmp_path: Path, bad_ref: str) -> None:
    """A failed ref read must not become "no head": the next commit would have no parent and
    force-move the ref over the attempt's chain. A ref broken for certain is repaired onto the
    newest checkpoint the store holds (docs/durability.md, "Damaged attempts"), with a gap."""
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("one\n")
    with daemon.client() as c:
        first = c.snapshot(str(wt), run_id="r", node_id="n")
        ref_file = sd_env.home / "store.git" / "refs/snapshotd/runs/r/n/0" / str(first["attempt"])
        assert ref_file.read_text().strip() == first["commit"]
        ref_file.write_text(bad_ref)
        (wt / "a.txt").write_text("two\n")
        second = c.snapshot(str(wt), run_id="r", node_id="n")
    assert second["seq"] == first["seq"] + 1
    assert ref_file.read_text().strip() == second["commit"]
    parent = git(tmp_path, "--git-dir", str(sd_env.home / "store.git"), "rev-parse",
                 second["commit"] + "^").strip()
    assert parent == first["commit"]
    gaps = [g for g in sd_env.read_gaps() if g.get("run_id") == "r"]
    assert [g["reason"] for g in gaps] == ["attempt-damaged"]


def test_rewrite_chain_keeps_trees_and_messages_with_new_parents(tmp_path: Path) -> None:
    store, wt, first = _store_with_one_checkpoint(tmp_path)
    caches = StatCaches(store)
    commits = [first]
    for seq in (1, 2):
        (wt / "a.txt").write_text(f"{seq}\n")
        tree = caches.worktree(wt).capture().tree
        meta = Checkpoint(key=KEY, seq=seq, tier=1, source="cli", worktree=str(wt))
        commits.append(store.commit(meta, tree, commits[-1]))
    # Drop seq 1: seq 2 is rewritten onto seq 0.
    (new,) = store.rewrite_chain([commits[2]], commits[0])
    old_c, new_c = store.read_commit(commits[2]), store.read_commit(new)
    assert new != commits[2]
    assert new_c.tree_id == old_c.tree_id and new_c.message == old_c.message
    assert [str(p) for p in new_c.parent_ids] == [commits[0]]
    assert str(store.head(KEY).id) == commits[2]  # no ref moved
    store.set_attempt_ref(KEY, new)
    assert str(store.head(KEY).id) == new


def test_delete_attempt_refs_tolerates_a_ref_already_gone(tmp_path: Path) -> None:
    store, _wt, _commit = _store_with_one_checkpoint(tmp_path)
    store.delete_attempt_refs([KEY, AttemptKey("r", "n", 0, 2)])
    assert store.head(KEY) is None


def test_cache_keep_refs_name_every_cache_and_drop_a_broken_one(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Loaded caches and caches only on disk both get a keep ref naming their tree; a cache on
    disk that cannot name its tree is deleted (with a warning), and keep refs of caches that
    are gone are dropped."""
    home = tmp_path / "home"
    worktrees = []
    for name in ("one", "two", "three"):
        wt = tmp_path / name
        wt.mkdir()
        (wt / f"{name}.txt").write_text(f"{name}\n")
        worktrees.append(wt)
    first = Store(home)
    first_caches = StatCaches(first)
    trees = [first_caches.worktree(wt).capture().tree for wt in worktrees]
    first_caches.persist_all()
    store = Store(home)  # a restarted daemon: only worktree "one" is loaded again
    caches = StatCaches(store)
    assert caches.worktree(worktrees[0]).capture().tree == trees[0]
    broken = home / "worktrees" / worktree_id(worktrees[2]) / "index"
    broken.write_bytes(b"DIRC garbage")
    ghost = store.path / CACHE_REF_PREFIX / "gone-0000"
    ghost.parent.mkdir(parents=True, exist_ok=True)
    ghost.write_text(trees[0] + "\n")
    locks: dict[Path, threading.Lock] = {}
    with caplog.at_level(logging.WARNING, logger="snapshotd.store"):
        caches.refresh_keep_refs(lambda root: locks.setdefault(root, threading.Lock()))
    assert _cache_refs(store) == {worktree_id(worktrees[0]): trees[0],
                                  worktree_id(worktrees[1]): trees[1]}
    assert not broken.exists()
    assert any("dropping the stat cache" in r.getMessage() for r in caplog.records)
    assert list(locks) == [worktrees[0]]  # the loaded cache was read under its worktree's lock


def _cache_refs(store: Store) -> dict[str, str]:
    """Keep refs as git itself lists them: worktree id -> tree."""
    out = git(store.home, "--git-dir", str(store.path), "for-each-ref",
              "--format=%(refname) %(objectname)", CACHE_REF_PREFIX)
    refs = dict(line.split() for line in out.splitlines())
    return {name[len(CACHE_REF_PREFIX):]: target for name, target in refs.items()}


def test_a_ref_locked_by_another_writer_fails_the_commit_and_moves_nothing(
        tmp_path: Path) -> None:
    """The attempt's ref held by another writer's ``<ref>.lock`` (a ``git`` command, a crashed
    writer before recovery): the commit fails as ``commit-failed``, the ref stays where it was,
    the lock is not taken from its owner; once it is gone the next commit moves the ref."""
    store, wt, first = _store_with_one_checkpoint(tmp_path)
    tree = store.repo[first].peel(pygit2.Commit).tree_id
    lock = store.path / (KEY.ref + ".lock")
    lock.write_text("held\n")
    meta = Checkpoint(key=KEY, seq=1, tier=1, source="cli", worktree=str(wt))
    with pytest.raises(StoreError) as caught:
        store.commit(meta, str(tree), first)
    assert caught.value.reason == "commit-failed"
    assert str(store.repo.references[KEY.ref].target) == first
    assert lock.read_text() == "held\n"
    lock.unlink()
    second = store.commit(meta, str(tree), first)
    assert str(store.repo.references[KEY.ref].target) == second
    assert git(store.path, "rev-parse", KEY.ref).strip() == second
