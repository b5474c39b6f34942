"""The MCP twins of turns: through ``snapshotd mcp`` (a real subprocess, the SDK's client) an
agent lists a session's two turns and restores to before the second (a dry run first, then in
place with its undo), getting the command that resumes the real session."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, make_git_worktree
from tests.features.test_turns import RUN, SESSION, tree_of, two_turns
from tests.support.mcp_session import call, call_error, with_mcp

pytestmark = pytest.mark.one_ledger("the MCP transport of turns; tests/features/test_turns.py "
                                    "runs the same reads on both ledgers")


def test_list_turns_and_restore_turn_through_mcp(sd_env: Env, make_daemon: MakeDaemon,
                                                 tmp_path: Path) -> None:
    make_daemon(sd_env, QUIET_WATCHER)
    wt = make_git_worktree(tmp_path / "proj")
    end_of_turn_1 = two_turns(sd_env, wt, "now make it say hello, world")

    async def body(client: Client) -> None:
        listed = await call(client, "list_turns", run_id=RUN)
        assert [t["first_line"] for t in listed["turns"]] == [
            "add a greeting file", "now make it say hello, world"]
        plan = await call(client, "restore_turn", run_id=RUN, before_turn=2)
        assert plan["dry_run"] and {p["path"] for p in plan["plan"]} == {"greeting.txt",
                                                                          "extra.txt"}
        done = await call(client, "restore_turn", run_id=RUN, before_turn=2, dry_run=False)
        assert done["undo_command"] and done["turn"]["turn"] == 2
        assert done["resume_command"] == f"claude --resume {SESSION}"
        text = await call_error(client, "restore_turn", run_id=RUN, before_turn=9)
        assert "turn 9" in text

    with_mcp(sd_env, body)
    assert tree_of(wt) == end_of_turn_1
