"""``revert`` with one real Claude Code session (the CLI, driven by a scripted model on
127.0.0.1, with the repository's plugin hooks) and one payload-driven session in one folder
(issue 45): reverting the real session's first Edit undoes line 1 only; ``--all`` leaves only
the user's edit and the other session's file. The oracle is ``git revert``.

Skips, saying why, without the CLI (tests/support/claude_code.py says how to install it).
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, git, make_git_worktree
from tests.features.revert.test_revert_sessions import (
    LINES,
    B,
    Oracle,
    cli,
    edit,
    tool_call,
    tree,
)
from tests.support.claude_code import ScriptedModel, claude_binary, run_claude

CLAUDE = claude_binary()
pytestmark = [
    pytest.mark.skipif(CLAUDE is None, reason="no Claude Code CLI (set SNAPSHOTD_CLAUDE_CODE "
                       "to its binary: npm install --prefix DIR @anthropic-ai/claude-code)"),
    pytest.mark.one_ledger("the agent's hooks and revert; test_revert_sessions runs the same "
                           "revert on each backend"),
]


def test_revert_of_a_real_claude_code_session_beside_a_payload_session(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "f").write_text("".join(LINES))
    (wt / "h").write_text("h base\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    oracle = Oracle(tmp_path / "oracle")
    oracle.commit("base", tree(wt))
    f, g = str(wt / "f"), str(wt / "g")

    def session_b() -> None:
        oracle.commit("a2", tree(wt))
        edit(wt / "h", 1, "h by B")
        tool_call(sd_env, wt, "sess-b", "toolu_b1", "h")
        oracle.commit("b1", tree(wt))

    script = [("Read", {"file_path": f}),
              ("Edit", {"file_path": f, "old_string": "line 1\nline 2\n",
                        "new_string": "A one\nline 2\n"}),
              lambda: oracle.commit("a1", tree(wt)),
              ("Write", {"file_path": g, "content": "made by A\n"}),
              session_b,
              ("Edit", {"file_path": f, "old_string": "line 10\n", "new_string": "A ten\n"}),
              lambda: oracle.commit("a3", tree(wt))]
    env = sd_env.environ()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    with ScriptedModel(script) as model:
        proc = run_claude(CLAUDE, wt, tmp_path / "claude-home", model, env)
    assert proc.returncode == 0, (proc.stdout, proc.stderr, model.errors)
    edit(wt / "f", 20, "the user's edit")
    oracle.commit("user", tree(wt))
    [run] = [r["run_id"] for r in json.loads(cli(sd_env, "runs", "--json").stdout)["runs"]
             if r["run_id"].startswith("claude-") and r["run_id"] != B]
    rows = json.loads(cli(sd_env, "snapshots", run, "--json").stdout)["checkpoints"]
    first_edit = next(r["tool_use_id"] for r in rows if r.get("label") == "Edit f")

    out = json.loads(cli(sd_env, "revert", run, "--node", "session", "--tool-call", first_edit,
                         "--json").stdout)
    assert out["applied"], out
    assert tree(wt) == oracle.revert("a1")
    cli(sd_env, *shlex.split(out["undo_command"])[1:])  # back to before the first revert
    out = json.loads(cli(sd_env, "revert", run, "--node", "session", "--all", "--json").stdout)
    assert out["applied"], out
    git(oracle.path, "reset", "-q", "--hard")
    after = tree(wt)
    assert after == oracle.revert("a3", "a2", "a1")
    assert "g" not in after and after["h"] == b"h by B\n"
