"""``restore --path``: only the named paths are written or deleted; every other file of the
worktree keeps its inode and mtime; a path outside the worktree is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from snapshotd.core.config import load_config
from snapshotd.core.errors import ServiceError
from snapshotd.features.restore.restore import restore_checkpoint
from snapshotd.service.service import Service
from tests.conftest import Env

pytestmark = pytest.mark.one_ledger("restore of single paths")

FILES = 10_000


def _stats(root: Path) -> dict[str, tuple[int, int]]:
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in filenames + dirnames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_ino, st.st_mtime_ns)
    return out


def test_restore_of_one_path_writes_only_that_file(sd_env: Env, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    for d in range(100):
        (wt / f"d{d:02}").mkdir(parents=True)
        for f in range(FILES // 100):
            (wt / f"d{d:02}" / f"f{f:02}").write_text(f"{d} {f}\n")
    service = Service(sd_env.home, load_config(environ={}))
    try:
        service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})
        for d in ("d00", "d01"):
            (wt / d / "f00").write_text("changed\n")
        (wt / "new").write_text("made since\n")
        (wt / "d02" / "f05").unlink()
        before = _stats(wt)
        dry = restore_checkpoint(service, run_id="r", node_id="n", seq=0, force=True,
                                 paths=["d00/f00", "new", "d02/f05"], dry_run=True)
        assert dry["plan"] == [{"op": "M", "path": "d00/f00"}, {"op": "A", "path": "d02/f05"},
                               {"op": "D", "path": "new"}]
        assert _stats(wt) == before
        result = restore_checkpoint(service, run_id="r", node_id="n", seq=0, force=True,
                                    paths=["d00/f00"])
        assert result["plan"] == [{"op": "M", "path": "d00/f00"}]
        assert (wt / "d00" / "f00").read_text() == "0 0\n"
        after = _stats(wt)
        changed = sorted(p for p in before if before[p] != after.get(p))
        # The file itself (renamed over) and its directory (the rename changed its mtime).
        assert changed == ["d00", "d00/f00"]
        assert (wt / "d01" / "f00").read_text() == "changed\n"
        # A path the checkpoint lacks: deleted (the checkpoint's state of it is "absent").
        restore_checkpoint(service, run_id="r", node_id="n", seq=0, force=True,
                           paths=[str(wt / "new")])
        assert not (wt / "new").exists() and (wt / "d01" / "f00").read_text() == "changed\n"
        # A directory means everything under it.
        restore_checkpoint(service, run_id="r", node_id="n", seq=0, force=True, paths=["d01/"])
        assert (wt / "d01" / "f00").read_text() == "1 0\n"
        # The undo command's safety checkpoint brings the changed file back.
        safety = result["safety"]["seq"]
        restore_checkpoint(service, run_id="r", node_id="n", seq=safety, force=True)
        assert (wt / "d00" / "f00").read_text() == "changed\n"
    finally:
        service.close()


@pytest.mark.parametrize("bad", ["../outside", "a/../../x", "/etc/passwd", ".git/config", ""])
def test_a_path_outside_the_worktree_is_refused(sd_env: Env, tmp_path: Path, bad: str) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "f").write_text("one\n")
    service = Service(sd_env.home, load_config(environ={}))
    try:
        service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})
        (wt / "f").write_text("two\n")
        with pytest.raises(ServiceError) as err:
            restore_checkpoint(service, run_id="r", node_id="n", seq=0, force=True, paths=[bad])
    finally:
        service.close()
    assert err.value.code == "bad-request"
    assert (wt / "f").read_text() == "two\n"
