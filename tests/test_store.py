"""The store's attempt refs: a ref that cannot be read is an error, never "no checkpoint yet"."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import Daemon, Env
from snapshotd.keys import AttemptKey
from snapshotd.store import CheckpointMeta, Store, StoreError
from snapshotd_client import SnapshotdError

KEY = AttemptKey("r", "n", 0, 1)


def _store_with_one_checkpoint(tmp_path: Path) -> tuple[Store, Path, str]:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("a\n")
    store = Store(tmp_path / "home")
    tree = store.worktree(wt).capture().tree
    meta = CheckpointMeta(key=KEY, seq=0, tier=1, source="cli", worktree=str(wt))
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
def test_capture_over_an_unreadable_ref_is_a_gap_and_keeps_the_ref(
        sd_env: Env, daemon: Daemon, tmp_path: Path, bad_ref: str) -> None:
    """A failed ref read must not become "no head": the next commit would have no parent and
    force-move the ref over the attempt's chain."""
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("one\n")
    with daemon.client() as c:
        first = c.snapshot(str(wt), run_id="r", node_id="n")
        ref_file = sd_env.home / "store.git" / "refs/snapshotd/runs/r/n/0" / str(first["attempt"])
        assert ref_file.read_text().strip() == first["commit"]
        ref_file.write_text(bad_ref)
        (wt / "a.txt").write_text("two\n")
        with pytest.raises(SnapshotdError) as err:
            c.snapshot(str(wt), run_id="r", node_id="n")
        assert err.value.code == "capture-failed"
    assert ref_file.read_text() == bad_ref
    gaps = [g for g in sd_env.read_gaps() if g.get("run_id") == "r" and g["tier"] == 1]
    assert [g["reason"] for g in gaps] == ["commit-failed"]
