"""The restore's filesystem writer when the worktree changes under it: it stops, writes nothing
through a link, and says so when a temporary file cannot be taken back."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from snapshotd.core.config import load_config
from snapshotd.core.errors import ServiceError
from snapshotd.features.restore.restore import restore_checkpoint
from snapshotd.service.service import Service
from tests.conftest import Env

pytestmark = pytest.mark.one_ledger("the restore's file-system writer")


def test_a_directory_swapped_for_a_link_mid_restore_stops_it_and_is_reported(
        sd_env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    wt = tmp_path / "wt"
    for d in ("a", "b"):
        (wt / d).mkdir(parents=True)
        (wt / d / "f").write_text("zero")
    service = Service(sd_env.home, load_config(environ={}))
    try:
        service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})
        for d in ("a", "b"):
            (wt / d / "f").write_text("one")
        moved = tmp_path / "moved"

        def swap(done: int, total: int) -> None:
            # After the last temp file is written (b/), before any rename: a becomes a link.
            if done == total and not moved.exists():
                os.rename(wt / "a", moved)
                os.symlink(moved, wt / "a")

        with caplog.at_level(logging.WARNING, logger="snapshotd.restore"), \
                pytest.raises(ServiceError) as err:
            restore_checkpoint(service, run_id="r", node_id="n", seq=0, force=True,
                               progress=swap)
    finally:
        service.close()
    assert err.value.code == "restore-failed" and "vanished" in err.value.message
    assert "`snapshotd restore r --node n --iteration 0 --attempt 1 --seq 1 --force`" \
        in err.value.message
    # Nothing was written through the link: the file keeps the content it had.
    assert (moved / "f").read_text() == "one"
    left = [p.name for p in moved.iterdir() if p.name.startswith(".snapshotd-restore-")]
    assert len(left) == 1
    # The temp file in b/, still reachable, was taken back.
    assert sorted(p.name for p in (wt / "b").iterdir()) == ["f"]
    assert any("temporary file a/" + left[0] in r.getMessage() for r in caplog.records)
