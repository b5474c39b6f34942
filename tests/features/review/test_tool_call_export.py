"""``export`` names the tool call that owns a tier-2 checkpoint (issue 43): the commit's subject
is the owner's label and its tool call trailer the owner's id, one commit and a squash alike;
git reads the branch back."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, make_git_worktree
from tests.support.helpers import git
from tests.support.tool_call_session import (
    RUN,
    T1,
    T2,
    T2_COMMAND,
    T3,
    T3_COMMAND,
    cli,
    run_session,
)

pytestmark = pytest.mark.one_ledger("the read model on both backends: "
                                    "tests/service/test_tool_call_model.py")


def test_export_names_the_owning_tool_call(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    run_session(sd_env, daemon, wt)
    cli(sd_env, "export", RUN, "--node", "session", "--branch", "agent")
    log = git(wt, "log", "--reverse", "--format=%s%x00%(trailers:key=Snapshotd-Tool-Use-Id,"
              "valueonly)%x00%(trailers:key=Snapshotd-Seq,valueonly)%x01", "agent")
    commits = [tuple(part.strip() for part in c.split("\x00")) for c in log.split("\x01")
               if c.strip() and c.strip().split("\x00")[2].strip()]
    assert commits == [("Write a.txt", T1, "0"), (f"Bash {T2_COMMAND}", T2, "1"),
                       (f"Bash {T2_COMMAND}", T2, "2"), (f"Bash {T3_COMMAND}", T3, "3")]
    cli(sd_env, "export", RUN, "--node", "session", "--branch", "squashed", "--squash")
    body = git(wt, "log", "-1", "--format=%B", "squashed")
    assert f"- seq 1: Bash {T2_COMMAND} [{T2}]" in body
    assert f"- seq 3: Bash {T3_COMMAND} [{T3}]" in body
