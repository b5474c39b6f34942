"""``show --tool-call ID`` shows a tool call's whole change (a long Bash call whose writes are in
two tier-2 checkpoints; a failing one), ``show --seq``, ``log`` and ``find`` name the tool call
that owns each checkpoint (issue 43, "No tool call is invisible"); git reads the same files."""

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
    T3_COMMAND,
    cli,
    cli_json,
    run_session,
)

pytestmark = pytest.mark.one_ledger("the read model on both backends: "
                                    "tests/service/test_tool_call_model.py")


@pytest.fixture
def session(sd_env: Env, daemon: Daemon, tmp_path: Path) -> Env:
    run_session(sd_env, daemon, make_git_worktree(tmp_path / "proj"))
    return sd_env


def test_show_tool_call_is_its_whole_change(session: Env) -> None:
    out = cli_json(session, "show", RUN, "--tool-call", T2)
    assert (out["tool_call"]["id"], out["tool_call"]["label"], out["tool_call"]["how"]) == (
        T2, f"Bash {T2_COMMAND}", "in-flight")
    assert (out["seqs"], out["held_at"], out["no_change"]) == ([1, 2], 2, False)
    assert (out["from"]["seq"], out["to"]["seq"]) == (0, 2)
    assert sorted((f["status"], f["path"]) for f in out["files"]) == [("A", "b.txt"),
                                                                     ("A", "c.txt")]
    assert "+two" in out["patch"] and "+three" in out["patch"]
    assert [c["tool_call"]["id"] for c in out["checkpoints"]] == [T2, T2]
    text = cli(session, "show", RUN, "--tool-call", T2, "--name-status").stdout
    assert f"tool call  [{T2}] Bash {T2_COMMAND} (in flight)" in text
    assert "checkpoints 1, 2 of " in text and "A\tb.txt" in text and "A\tc.txt" in text


def test_show_tool_call_of_a_failing_shell_call(session: Env) -> None:
    out = cli_json(session, "show", RUN, "--node", "session", "--tool-call", T3)
    assert (out["tool_call"]["failed"], out["tool_call"]["exit_code"]) == (True, 3)
    assert out["seqs"] == [3] and [f["path"] for f in out["files"]] == ["z.txt"]
    text = cli(session, "show", RUN, "--tool-call", T3, "--stat").stdout
    assert f"[{T3}] Bash {T3_COMMAND} (in flight)  FAILED (exit 3): Exit code 3" in text
    # Its own capture: t1's id shows its own checkpoint.
    own = cli_json(session, "show", RUN, "--tool-call", T1)
    assert (own["seqs"], own["tool_call"]["how"], own["from"]["seq"]) == ([0], "own", None)


def test_show_tool_call_unknown_id_is_a_clear_error(session: Env) -> None:
    done = cli(session, "show", RUN, "--tool-call", "toolu_nope", check=False)
    assert done.returncode == 1
    assert "has no tool call 'toolu_nope'" in done.stderr and T2 in done.stderr
    # A run of one node needs no --node (issue 44): its newest checkpoint is shown.
    one = cli(session, "show", RUN, check=False)
    assert one.returncode == 0 and "z.txt" in one.stdout, one.stderr


def test_show_seq_log_and_find_name_the_owning_call(session: Env, tmp_path: Path) -> None:
    shown = cli_json(session, "show", RUN, "--node", "session", "--seq", "2")
    cp = shown["checkpoint"]
    assert cp["tool_call"]["id"] == T2 and [c["id"] for c in cp["tool_calls"]] == [T2]
    text = cli(session, "show", RUN, "--node", "session", "--seq", "1", "--stat").stdout
    assert f"Bash {T2_COMMAND} (in flight)  [{T2}]" in text
    entries = {e["seq"]: e for e in cli_json(session, "log", RUN)["entries"]}
    assert {s: (e["tool_call"] or {}).get("id") for s, e in entries.items()} == {
        0: T1, 1: T2, 2: T2, 3: T3}
    log_text = cli(session, "log", RUN).stdout
    assert f"seq 1  {RUN}/session/0/1  Bash {T2_COMMAND} (in flight)  [{T2}]" in log_text
    found = cli_json(session, "find", "c.txt", "--cwd", str(tmp_path / "proj"))
    assert [(c["seq"], c["tool_call"]["id"]) for c in found["checkpoints"]] == [(2, T2)]
    find_text = cli(session, "find", "b.txt", "--cwd", str(tmp_path / "proj")).stdout
    assert f"seq 1  Bash {T2_COMMAND} (in flight)  [{T2}]" in find_text
