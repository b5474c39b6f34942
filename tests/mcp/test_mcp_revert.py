"""MCP ``revert_checkpoint``: an agent undoes its own tool call through MCP (a dry run by
default), and the revert writes only inside its worktree: a directory it made, swapped for a
link to a directory outside, is never followed."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, claude_payload, run_hook
from tests.support.mcp_session import call, with_mcp

pytestmark = pytest.mark.one_ledger("the MCP transport of revert (the revert: test_revert_*)")

RUN = "claude-sess-m"


def tool_call(env: Env, wt: Path, tool_use_id: str, path: str) -> None:
    proc = run_hook(env, claude_payload(wt, tool_use_id, file_path=path, session_id="sess-m"),
                    CLAUDE_PROJECT_DIR=str(wt))
    assert (proc.returncode, proc.stderr) == (0, b""), proc


def test_an_agent_reverts_its_own_tool_call_and_never_leaves_its_worktree(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = tmp_path / "proj"
    wt.mkdir()
    (wt / "f").write_text("one\n")
    tool_call(sd_env, wt, "toolu_m0", "f")
    (wt / "f").write_text("two\n")
    (wt / "d").mkdir()
    (wt / "d" / "x").write_text("made by the call\n")
    tool_call(sd_env, wt, "toolu_m1", "d/x")
    # The agent then swaps d for a link to a directory outside holding the same file.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_text("made by the call\n")
    os.rename(wt / "d", tmp_path / "d.moved")
    os.symlink(outside, wt / "d")

    async def body(client) -> None:  # noqa: ANN001 - the SDK's client
        dry = await call(client, "revert_checkpoint", run_id=RUN, node_id="session",
                         tool_call="toolu_m1")
        assert dry["dry_run"] and not dry["applied"]
        assert (wt / "f").read_text() == "two\n"
        done = await call(client, "revert_checkpoint", run_id=RUN, node_id="session",
                          tool_call="toolu_m1", dry_run=False, force=True)
        assert done["applied"] and done["undo_command"], done
        assert done["event"]["kind"] == "revert"

    with_mcp(sd_env, body)
    assert (wt / "f").read_text() == "one\n"
    # Nothing outside the worktree was touched: the link was not followed.
    assert (outside / "x").read_text() == "made by the call\n"
    assert os.path.islink(wt / "d")


def test_restore_checkpoint_of_one_path_through_mcp(sd_env: Env, daemon: Daemon,
                                                    tmp_path: Path) -> None:
    wt = tmp_path / "proj"
    wt.mkdir()
    (wt / "a").write_text("a0\n")
    (wt / "b").write_text("b0\n")
    tool_call(sd_env, wt, "toolu_p0", "a")
    (wt / "a").write_text("a1\n")
    (wt / "b").write_text("b1\n")

    async def body(client) -> None:  # noqa: ANN001 - the SDK's client
        done = await call(client, "restore_checkpoint", run_id=RUN, node_id="session", seq=0,
                          paths=["a"], dry_run=False, force=True)
        assert done["plan"] == [{"op": "M", "path": "a"}] and done["undo_command"], done

    with_mcp(sd_env, body)
    assert (wt / "a").read_text() == "a0\n" and (wt / "b").read_text() == "b1\n"
