"""Every id of a tool call (issue 43): Qwen Code sends its own ``tool_use_id`` and the model's
``tool_call_id``; both are kept, and either finds the call, through the real ``snapshot-hook``
and daemon: a retried hook naming only the model's id is a repeat, and a gap naming it is
resolved by the checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.client.test_agents import listing, localize, replay, write
from tests.conftest import Daemon, Env, load_payloads, make_git_worktree, run_hook

pytestmark = pytest.mark.one_ledger("the hook's tool call ids, end to end")


def qwen_session(env: Env, wt: Path) -> tuple[list[dict], str]:
    raw = load_payloads("qwen/post-tool-use.ndjson")
    payloads = [localize(p, "<harness>/proj", wt) for p in raw]
    replay(env, payloads, [write("hello.txt", "hello\n"), write("shell_out.txt", "x\n"),
                           write("failed.txt", "partial\n")], wt)
    return payloads, f"qwen-{raw[0]['session_id']}"


def test_a_retry_naming_the_model_id_is_a_repeat(sd_env: Env, daemon: Daemon,
                                                 tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    payloads, run = qwen_session(sd_env, wt)
    assert payloads[1]["tool_call_id"] == "call_1_shell"
    assert len(listing(sd_env, run)["checkpoints"]) == 3
    # The same call again, named by the model's id only: the daemon finds it, captures nothing.
    (wt / "later.txt").write_text("later\n")
    retry = {k: v for k, v in payloads[1].items() if k != "tool_use_id"}
    result = run_hook(sd_env, retry)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    cps = listing(sd_env, run)["checkpoints"]
    assert [c["tool_use_id"] for c in cps] == [p["tool_use_id"] for p in payloads]


def test_a_gap_naming_the_model_id_is_resolved(sd_env: Env, daemon: Daemon,
                                               tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    payloads, run = qwen_session(sd_env, wt)
    # A gap written by something that knows the call by the transcript's (the model's) id.
    code = ("import sys; from snapshotd_client.gaps import append_gap, make_gap; "
            "append_gap(make_gap(run_id=sys.argv[1], node_id='session', iteration=0, "
            "attempt=1, worktree=sys.argv[2], tier=1, source='hook', tool_use_id=sys.argv[3], "
            "reason='timeout', detail='late'))")
    for tool_id in ("call_0_write", "call_never_made"):
        subprocess.run([sys.executable, "-c", code, run, str(wt), tool_id],
                       env=sd_env.environ(), check=True)
    out = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", run, "--json"],
                         env=sd_env.environ(), capture_output=True, check=True)
    gaps = {g["tool_use_id"]: g["resolved"] for g in json.loads(out.stdout)["gaps"]}
    assert gaps == {"call_0_write": True, "call_never_made": False}
