"""Revert of every kind of change: a rename, an exec bit, a symlink, a deletion, a range of
seqs; a binary file changed on both sides is a conflict that writes nothing; ``--conflicts``
and selectors are checked."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from snapshotd.core.config import load_config
from snapshotd.core.errors import ServiceError
from snapshotd.features.restore.revert import revert_checkpoints
from snapshotd.service.service import Service
from tests.conftest import Env

pytestmark = pytest.mark.one_ledger("revert's per-path decisions")


def snap(service: Service, wt: Path, call: str) -> dict:
    return service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n",
                             "tool_use_id": call, "label": call})


def test_rename_mode_link_and_deletion_are_undone(sd_env: Env, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("alpha\n")
    (wt / "run.sh").write_text("echo hi\n")
    (wt / "gone.txt").write_text("to be deleted\n")
    (wt / "keep.bin").write_bytes(b"\0one")
    service = Service(sd_env.home, load_config(environ={}))
    try:
        snap(service, wt, "t0")
        os.rename(wt / "a.txt", wt / "b.txt")
        os.chmod(wt / "run.sh", 0o755)
        os.symlink("b.txt", wt / "link")
        (wt / "gone.txt").unlink()
        snap(service, wt, "t1")
        (wt / "later.txt").write_text("a later call\n")
        snap(service, wt, "t2")
        dry = revert_checkpoints(service, run_id="r", node_id="n", tool_call="t1",
                                 dry_run=True, force=True)
        assert {p["path"]: p["status"] for p in dry["paths"]} == {
            "a.txt": "reverted", "b.txt": "reverted", "gone.txt": "reverted",
            "link": "reverted", "run.sh": "reverted"}
        assert not (wt / "a.txt").exists()
        out = revert_checkpoints(service, run_id="r", node_id="n", tool_call="t1", force=True)
        assert out["applied"]
        assert (wt / "a.txt").read_text() == "alpha\n" and not (wt / "b.txt").exists()
        assert not os.path.lexists(wt / "link")
        assert not os.stat(wt / "run.sh").st_mode & 0o100
        assert (wt / "gone.txt").read_text() == "to be deleted\n"
        assert (wt / "later.txt").read_text() == "a later call\n"
        # A range: seqs 1..2 (t1 already undone, t2's file goes).
        out = revert_checkpoints(service, run_id="r", node_id="n", seq=1, to_seq=2, force=True)
        assert out["applied"] and not (wt / "later.txt").exists()
    finally:
        service.close()


def test_a_binary_file_changed_on_both_sides_is_a_conflict(sd_env: Env, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "img.bin").write_bytes(b"\0base")
    service = Service(sd_env.home, load_config(environ={}))
    try:
        snap(service, wt, "t0")
        (wt / "img.bin").write_bytes(b"\0agent")
        snap(service, wt, "t1")
        (wt / "img.bin").write_bytes(b"\0user")
        before = os.stat(wt / "img.bin")
        for mode in ("refuse", "markers"):
            out = revert_checkpoints(service, run_id="r", node_id="n", tool_call="t1",
                                     force=True, conflicts=mode)
            assert not out["applied"] if mode == "refuse" else out["applied"]
            assert [c["path"] for c in out["conflicts"]] == ["img.bin"]
            assert "binary" in out["conflicts"][0]["reason"]
            after = os.stat(wt / "img.bin")
            assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
        with pytest.raises(ServiceError) as err:
            revert_checkpoints(service, run_id="r", node_id="n", seq=1, tool_call="t1")
        assert err.value.code == "bad-request"
        with pytest.raises(ServiceError) as err:
            revert_checkpoints(service, run_id="r", node_id="n", tool_call="nope")
        assert err.value.code == "not-found"
    finally:
        service.close()
