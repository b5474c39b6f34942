"""``blame`` credits each line to the tool call that owned the change, with the checkpoint it
landed in (issue 43): a long Bash call's lines from its tier-2 checkpoints carry its id, a
failing call's too, ``--json`` keys ``tool_call`` and ``seq``; a blame too large for one reply
frame, completed from the store by the client, keeps them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, make_git_worktree
from tests.support.tool_call_session import (
    RUN,
    T1,
    T2,
    T2_COMMAND,
    T3,
    cli,
    cli_json,
    run_session,
)

pytestmark = pytest.mark.one_ledger("the read model on both backends: "
                                    "tests/service/test_tool_call_model.py")


def blamed(env: Env, path: str) -> list[dict]:
    return cli_json(env, "blame", RUN, path, "--node", "session")["lines"]


def test_blame_gives_the_owning_call_for_every_line(sd_env: Env, daemon: Daemon,
                                                    tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    run_session(sd_env, daemon, wt)
    for path, seq, call in (("a.txt", 0, T1), ("b.txt", 1, T2), ("c.txt", 2, T2),
                            ("z.txt", 3, T3)):
        lines = blamed(sd_env, path)
        assert lines and all(ln["seq"] == seq and ln["tool_call"]["id"] == call
                             for ln in lines), (path, lines)
    [z] = blamed(sd_env, "z.txt")
    assert (z["tool_call"]["how"], z["tool_call"]["failed"], z["tool_call"]["exit_code"]) == (
        "in-flight", True, 3)
    [b] = blamed(sd_env, "b.txt")
    assert b["tool_call"]["label"] == f"Bash {T2_COMMAND}" and b["tier"] == 2
    out = cli(sd_env, "blame", RUN, "c.txt", "--node", "session").stdout
    assert out.startswith(f"   2  [{T2} Bash echo")  # no '*': a tool call owned it
    assert out.rstrip().endswith("1) three")


def test_a_blame_completed_from_the_store_keeps_the_tool_calls(sd_env: Env, daemon: Daemon,
                                                               tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    big = "".join(f"line {i:06d} {'x' * 48}\n" for i in range(10_000))  # over a reply frame
    run_session(sd_env, daemon, wt, b_text=big)
    lines = blamed(sd_env, "b.txt")
    assert len(lines) == 10_000
    assert {(ln["seq"], ln["tool_call"]["id"]) for ln in lines} == {(1, T2)}
