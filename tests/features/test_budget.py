"""The disk budget: nothing goes while the store is within it; past it a warning in ``status``
and the oldest ended run is deleted (its objects reclaimed at once), the newer ended run and
the active attempt kept."""

from __future__ import annotations

import os
import time
from pathlib import Path

from tests.conftest import QUIET_WATCHER, Daemon, Env, MakeDaemon, make_git_worktree

FAST = {"SNAPSHOTD_MAINTENANCE_INTERVAL_S": "0.2", "SNAPSHOTD_MAINTENANCE_LOOSE_OBJECTS": "0",
        **QUIET_WATCHER}


def _store_bytes(env: Env) -> int:
    return sum(p.stat().st_size for p in (env.home / "store.git").rglob("*") if p.is_file())


def _run(daemon: Daemon, wt: Path, run: str, *, end: bool) -> None:
    with daemon.client() as c:
        c.attempt_begin(run, "n", str(wt))
        for i in range(3):
            (wt / "data.bin").write_bytes(os.urandom(200_000))
            (wt / "n.txt").write_text(f"{run} {i}\n")
            c.snapshot(str(wt), run_id=run, node_id="n")
        if end:
            c.attempt_end(run, "n", status="finished")


def test_the_budget_deletes_the_oldest_ended_run_only_when_needed(
        sd_env: Env, make_daemon: MakeDaemon, tmp_path: Path) -> None:
    daemon = make_daemon(sd_env, {**FAST, "SNAPSHOTD_STORE_BUDGET": "1G",
                                  "SNAPSHOTD_FREE_SPACE_FLOOR": ""})
    for run, end in (("old", True), ("mid", True), ("live", False)):
        _run(daemon, make_git_worktree(tmp_path / run), run, end=end)
        time.sleep(0.05)  # each run ends measurably later than the one before
    with daemon.client() as c:
        deadline = time.monotonic() + 30
        while (disk := c.status()["disk"]).get("checked_at") is None:
            assert time.monotonic() < deadline, disk
            time.sleep(0.1)
    assert disk["over_budget"] is False and disk["warning"] is None
    assert disk["last_prune"] is None and disk["budget_bytes"] == 1 << 30
    daemon.stop()
    budget = _store_bytes(sd_env) - 150_000
    daemon = make_daemon(sd_env, {**FAST, "SNAPSHOTD_STORE_BUDGET": str(budget),
                                  "SNAPSHOTD_FREE_SPACE_FLOOR": ""})
    with daemon.client() as c:
        deadline = time.monotonic() + 60
        while (disk := c.status()["disk"])["last_prune"] is None:
            assert time.monotonic() < deadline, disk
            time.sleep(0.1)
        assert [r["run_id"] for r in disk["last_prune"]["deleted_runs"]] == ["old"]
        assert disk["last_prune"]["store_bytes_after"] <= budget
        assert len(c.list("mid")["checkpoints"]) == 3
        assert len(c.list("live")["checkpoints"]) == 3
    assert "over its" in daemon.log.read_text()
