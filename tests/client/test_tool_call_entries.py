"""One entry per tool call, with its id, for the payloads the real agent CLIs sent (issue 43,
"No tool call is invisible"): Claude Code, Codex, Gemini CLI and Qwen Code (tests/fixtures,
captured from each CLI's run against a scripted model) through the real ``snapshot-hook`` and
daemon. The failing shell call is listed too, also when the watcher had already taken its
write and its own capture deduplicated; ``snapshots --json`` names every call once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from snapshotd_client.hook import route, snapshot_fields
from tests.client.test_agents import localize
from tests.conftest import Daemon, Env, load_payloads, make_git_worktree, run_hook
from tests.support.tool_call_session import cli_json

pytestmark = pytest.mark.one_ledger("the hook's tool calls, end to end")

# agent: (fixture, the harness's project dir, how many payloads (one session), the failing
# shell call's index, whether its payload says it failed)
RUNS = {
    "claude": ("claude-code/post-tool-use-failure.ndjson", "<harness>/runs/failures/proj", 2,
               0, True),
    "codex": ("codex/post-tool-use.ndjson", "<harness>/runs/canonical/proj", 3, 2, False),
    "gemini": ("gemini/after-tool.ndjson", "<harness>/runs/final-basic/proj", 3, 2, False),
    "qwen": ("qwen/post-tool-use.ndjson", "<harness>/proj", 3, 2, True),
}


@pytest.mark.parametrize("agent", sorted(RUNS))
def test_snapshots_lists_each_tool_call_once_with_its_id(agent: str, sd_env: Env,
                                                         daemon: Daemon, tmp_path: Path) -> None:
    fixture, harness, count, failing, says_failed = RUNS[agent]
    wt = make_git_worktree(tmp_path / "proj")
    payloads = [localize(p, harness, wt) for p in load_payloads(fixture)[:count]]
    ids = []
    for i, payload in enumerate(payloads):
        ids.append(snapshot_fields(route(json.loads(json.dumps(payload)))[0], {})["tool_use_id"])
        (wt / f"effect{i}.txt").write_text(f"{i}\n")
        if i == failing and i > 0:  # the watcher takes its write first: its capture dedups
            with daemon.client() as c:
                c.flush(str(wt))
        result = run_hook(sd_env, payload, CLAUDE_PROJECT_DIR=str(wt),
                          GEMINI_PROJECT_DIR=str(wt))
        assert (result.returncode, result.stderr) == (0, b"")
    [run] = [r["run_id"] for r in cli_json(sd_env, "runs")["runs"]]
    listing = cli_json(sd_env, "snapshots", run)
    entries = listing["tool_calls"]
    assert [e["id"] for e in entries] == ids and len(set(ids)) == len(ids)
    assert entries[failing]["failed"] is says_failed
    if says_failed and agent == "claude":
        assert entries[failing]["exit_code"] == 3
    if failing > 0:  # listed at the seq whose state its capture found
        assert entries[failing]["held_at"] is not None
    # Every id is also on a checkpoint: its own, its owner's, or held at one.
    named = {c["tool_call"]["id"] for c in listing["checkpoints"] if c["tool_call"]} | {
        t["id"] for c in listing["checkpoints"] for t in c["tool_calls"]}
    assert named == set(ids)
