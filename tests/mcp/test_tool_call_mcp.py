"""The MCP tools carry the tool call read model (issue 43): ``list_checkpoints`` the same
``tool_call``/``tool_calls`` keys as ``snapshots --json``, ``show_checkpoint`` a tool call's
whole change by its id (an unknown one a tool error), ``blame_file`` each line's owning call."""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import Daemon, Env, make_git_worktree
from tests.support.mcp_session import call, call_error, with_mcp
from tests.support.tool_call_session import RUN, T1, T2, T3, cli_json, run_session

pytestmark = pytest.mark.one_ledger("the read model on both backends: "
                                    "tests/service/test_tool_call_model.py")


def test_mcp_lists_and_shows_tool_calls(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    run_session(sd_env, daemon, wt)
    expected = cli_json(sd_env, "snapshots", RUN)

    async def body(client: Client) -> None:
        listing = await call(client, "list_checkpoints", run_id=RUN)
        assert listing["checkpoints"] == expected["checkpoints"]
        assert listing["tool_calls"] == expected["tool_calls"]
        assert [t["id"] for t in listing["tool_calls"]] == [T1, T2, T3]
        cps = {c["seq"]: c for c in listing["checkpoints"]}
        assert (cps[1]["tool_call"]["id"], cps[1]["tool_call"]["how"]) == (T2, "in-flight")
        assert [c["id"] for c in cps[2]["tool_calls"]] == [T2]
        assert cps[3]["tool_call"]["failed"] is True
        runs = await call(client, "list_runs")
        [row] = [r for r in runs["runs"] if r["run_id"] == RUN]
        assert (row["tool_calls"], row["tool_calls_deduped"]) == (3, 2)
        whole = await call(client, "show_checkpoint", run_id=RUN, tool_call=T2)
        assert whole["seqs"] == [1, 2] and {f["path"] for f in whole["files"]} == {"b.txt",
                                                                                    "c.txt"}
        failing = await call(client, "show_checkpoint", run_id=RUN, tool_call=T3, patch=False)
        assert failing["tool_call"]["exit_code"] == 3 and failing["patch"] is None
        one = await call(client, "show_checkpoint", run_id=RUN, node_id="session", seq=1)
        assert one["checkpoint"]["tool_call"]["id"] == T2
        text = await call_error(client, "show_checkpoint", run_id=RUN, tool_call="toolu_nope")
        assert "not-found" in text and "toolu_nope" in text
        blamed = await call(client, "blame_file", run_id=RUN, node_id="session", path="c.txt")
        assert [(ln["seq"], ln["tool_call"]["id"]) for ln in blamed["lines"]] == [(2, T2)]

    with_mcp(sd_env, body)
