"""The MCP tool ``restore_checkpoint`` with ``include_ignored``: a guard checkpoint's kept
ignored files come back through it as through ``snapshotd restore --include-ignored``."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import Env, MakeDaemon
from tests.features.guard.test_guard import SECRET
from tests.features.guard.test_guard_restore import guarded_run
from tests.support.mcp_session import call, with_mcp

pytestmark = pytest.mark.one_ledger("the MCP transport of one restore option")


def test_mcp_restore_brings_the_ignored_files_back(sd_env: Env, tmp_path: Path,
                                                   make_daemon: MakeDaemon) -> None:
    wt, seq = guarded_run(sd_env, tmp_path, make_daemon)

    async def body(client: Client) -> None:
        plan = await call(client, "restore_checkpoint", run_id="claude-sess-1",
                          node_id="session", seq=seq, include_ignored=True)
        assert plan["dry_run"] is True
        assert sorted(plan["ignored"]["written"]) == [".env.local", "dev.db", "src/cache.db"]
        assert not (wt / ".env.local").exists()
        done = await call(client, "restore_checkpoint", run_id="claude-sess-1",
                          node_id="session", seq=seq, include_ignored=True, dry_run=False,
                          force=True)
        assert done["ignored"]["written_total"] == 3
        # The reply names the files, never their contents.
        assert SECRET.decode().strip() not in str(done)

    with_mcp(sd_env, body)
    assert (wt / ".env.local").read_bytes() == SECRET
