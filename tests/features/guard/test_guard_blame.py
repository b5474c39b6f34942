"""A guard checkpoint is a before-tool capture: a line written by hand before the destructive
call is blamed to it as outside the agent's tool calls, as a bracketing capture's would be."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, claude_payload, run_hook
from tests.features.guard.test_guard import bash
from tests.support.review_replay import cli

pytestmark = pytest.mark.one_ledger("which capture a line is blamed to")


def test_a_hand_edit_before_a_destructive_call_is_outside(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    make_daemon(sd_env, QUIET_WATCHER)
    (wt / "a.txt").write_text("agent one\n")
    assert run_hook(sd_env, claude_payload(wt, "toolu_1", file_path="a.txt")).returncode == 0
    with (wt / "a.txt").open("a") as f:
        f.write("by hand\n")
    assert run_hook(sd_env, bash(wt, "toolu_2", "git clean -fdx")).returncode == 0
    proc = cli(sd_env, "blame", "claude-sess-1", "a.txt", "--node", "session", "--json")
    assert proc.returncode == 0, proc.stderr
    lines = {x["text"]: x for x in json.loads(proc.stdout)["lines"]}
    hand = lines["by hand"]
    assert hand["source"] == "guard" and hand["tool_use_id"] is None
    text = cli(sd_env, "blame", "claude-sess-1", "a.txt", "--node", "session").stdout
    assert [line for line in text.splitlines() if "by hand" in line][0].split()[0] \
        == f"{hand['seq']}*"
