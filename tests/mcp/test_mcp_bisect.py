"""The MCP twin of bisect: an agent asks, through ``snapshotd mcp`` (a real subprocess, the
SDK's own client), which of its tool calls broke the tests, and gets tool call 23 of the
40-call session (tests/support/bisect_session.py) with the step outputs; the bounds hold
(``max_steps`` ends the search ``incomplete``) and a bad command is a tool error.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mcp import Client

from tests.conftest import Daemon, Env
from tests.support.bisect_session import BREAKS, NODE, RUN, build_session
from tests.support.mcp_session import call, call_error, with_mcp

# The ledger reads are the CLI bisect's, which tests/features/bisect runs on both backends.
pytestmark = pytest.mark.one_ledger("the MCP transport of a bisect tested on both ledgers")

CHECK = ["sh", "-c", "echo tried; grep -q BROKEN app.py && exit 1; exit 0"]


def test_an_agent_finds_the_tool_call_that_broke_its_tests(sd_env: Env, daemon: Daemon,
                                                           tmp_path: Path) -> None:
    build_session(daemon, tmp_path / "wt")
    scratch = tmp_path / "scratch-parent"
    scratch.mkdir()
    sd_env.vars["TMPDIR"] = str(scratch)

    async def body(client: Client) -> None:
        found = await call(client, "bisect_checkpoints", run_id=RUN, node_id=NODE,
                           command=CHECK, timeout_s=30)
        assert found["status"] == "found"
        assert found["first_bad"]["tool_use_id"] == f"call-{BREAKS}"
        assert found["runs"] <= 6
        assert all(step["output_tail"] == "tried\n" for step in found["steps"])
        bounded = await call(client, "bisect_checkpoints", run_id=RUN, node_id=NODE,
                             command=CHECK, max_steps=2)
        assert bounded["status"] == "incomplete" and bounded["runs"] == 2
        assert f"call-{BREAKS}" not in [s["tool_use_id"] for s in bounded["steps"]]
        assert BREAKS - 1 in bounded["could_be"] + [bounded["first_bad"]["seq"]]
        text = await call_error(client, "bisect_checkpoints", run_id=RUN, node_id=NODE,
                                command=["/no/such/command"])
        assert "cannot run" in text
        text = await call_error(client, "bisect_checkpoints", run_id="nope", node_id=NODE,
                                command=CHECK)
        assert "unknown run" in text

    with_mcp(sd_env, body)
    assert list(scratch.iterdir()) == []
