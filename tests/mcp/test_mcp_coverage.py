"""Coverage through MCP (issue 43): ``list_checkpoints``, ``list_runs`` and ``status`` carry
the figures ``snapshots --json`` and ``status --json`` give, daemon or not."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import (
    QUIET_WATCHER,
    Env,
    MakeDaemon,
    claude_payload,
    make_git_worktree,
    run_hook,
)
from tests.support.mcp_session import call, with_mcp

pytestmark = pytest.mark.one_ledger(
    "the MCP transport (tests/service/test_coverage.py runs on each backend)")

RUN = "claude-sess-1"


def test_coverage_through_mcp(sd_env: Env, make_daemon: MakeDaemon, tmp_path: Path) -> None:
    from snapshotd.service.gaps import GapSpool

    daemon = make_daemon(sd_env, QUIET_WATCHER)
    wt = make_git_worktree(tmp_path / "wt")
    for i, tool_id in enumerate(("toolu_one", "toolu_two")):
        (wt / "hello.txt").write_text(f"v{i}\n")
        assert run_hook(sd_env, claude_payload(wt, tool_id)).returncode == 0
    GapSpool(sd_env.gaps).record(reason="timeout", detail="no answer in 2000 ms", run_id=RUN,
                                 node_id="session", attempt=1, tool_use_id="toolu_lost")
    out = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", RUN, "--json"],
                         env=sd_env.environ(), capture_output=True, check=True)
    [expected] = json.loads(out.stdout)["coverage"]
    assert (expected["tool_calls_seen"], expected["tool_calls_captured"], expected["gaps"]) \
        == (3, 2, 1)

    async def body(client: Client) -> None:
        listing = await call(client, "list_checkpoints", run_id=RUN)
        assert listing["source"] == "daemon" and listing["coverage"] == [expected]
        runs = await call(client, "list_runs")
        [row] = [r for r in runs["runs"] if r["run_id"] == RUN]
        assert (row["coverage"]["tool_calls_captured"], row["coverage"]["tool_calls_seen"]) \
            == (2, 3)
        status = await call(client, "status")
        [mine] = [c for c in status["coverage"]["attempts"] if c["run_id"] == RUN]
        assert mine["summary"] == expected["summary"]
        assert status["coverage"]["total"]["last_gap"]["tool_use_id"] == "toolu_lost"

    with_mcp(sd_env, body)
    daemon.stop()

    async def without_daemon(client: Client) -> None:
        listing = await call(client, "list_checkpoints", run_id=RUN)
        assert listing["source"] == "ledger" and listing["coverage"] == [expected]

    with_mcp(sd_env, without_daemon)
