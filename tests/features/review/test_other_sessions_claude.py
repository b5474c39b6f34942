"""One real Claude Code session (the CLI, driven by a scripted model on 127.0.0.1, with the
repository's plugin hooks) and one payload-driven session in one folder (issue 43): the real
session's next Edit captures the other session's new file and edit, and ``show``, ``blame``
and ``find`` of both runs credit them to the other session's tool call.

Skips, saying why, without the CLI (tests/support/claude_code.py says how to install it).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env
from tests.features.review.test_other_sessions import (
    SHARED,
    B,
    blame,
    cli_json,
    credited,
    setup_folder,
    tool_call,
)
from tests.support.claude_code import ScriptedModel, claude_binary, run_claude

CLAUDE = claude_binary()
pytestmark = [
    pytest.mark.skipif(CLAUDE is None, reason="no Claude Code CLI (set SNAPSHOTD_CLAUDE_CODE "
                       "to its binary: npm install --prefix DIR @anthropic-ai/claude-code)"),
    pytest.mark.one_ledger("the agent's hooks and the review's attribution; test_other_sessions "
                           "runs the same attribution on each backend"),
]


def test_a_real_claude_code_session_beside_a_payload_session(sd_env: Env, daemon: Daemon,
                                                             tmp_path: Path) -> None:
    wt = setup_folder(tmp_path)
    test_file = str(wt / "test_a.py")

    def session_b() -> None:  # between the real session's two Edits
        (wt / "new.txt").write_text("from session b\n")
        (wt / "shared.py").write_text(SHARED.replace("return 2", "return 22"))
        tool_call(sd_env, wt, "sess-b", "toolu_b1", "new.txt")

    script = [("Read", {"file_path": test_file}),
              ("Edit", {"file_path": test_file, "old_string": "assert True",
                        "new_string": "assert 1 == 1"}),
              session_b,
              ("Edit", {"file_path": test_file, "old_string": "assert 1 == 1",
                        "new_string": "assert 2 == 2"})]
    env = sd_env.environ()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    with ScriptedModel(script) as model:
        proc = run_claude(CLAUDE, wt, tmp_path / "claude-home", model, env)
    assert proc.returncode == 0, (proc.stdout, proc.stderr, model.errors)
    assert (wt / "test_a.py").read_text() == "def test_a():\n    assert 2 == 2\n"
    [run] = [r["run_id"] for r in cli_json(sd_env, "runs")["runs"]
             if r["run_id"].startswith("claude-") and r["run_id"] != B]
    rows = cli_json(sd_env, "snapshots", run)["checkpoints"]
    edits = [r for r in rows if (r.get("tool_use_id") or "").startswith("toolu_scripted_")]
    assert [r["label"] for r in edits] == ["Edit test_a.py", "Edit test_a.py"], rows
    first, second = edits

    shown = cli_json(sd_env, "show", run, "--node", "session", "--seq", str(second["seq"]))
    assert sorted(f["path"] for f in shown["files"]) == ["new.txt", "shared.py", "test_a.py"]
    assert [(f["path"], f["run_id"], f["tool_call"]["id"]) for f in shown["foreign"]] == [
        ("new.txt", B, "toolu_b1"), ("shared.py", B, "toolu_b1")]
    shown_b = cli_json(sd_env, "show", B, "--node", "session", "--seq", "0")
    assert [(f["path"], f["run_id"], f["tool_call"]["id"]) for f in shown_b["foreign"]] == [
        ("test_a.py", run, first["tool_use_id"])]
    for who in (run, B):
        assert blame(sd_env, who, "shared.py")[6] == (B, "toolu_b1")
    assert blame(sd_env, run, "test_a.py")[2] == (run, second["tool_use_id"])
    assert blame(sd_env, B, "test_a.py")[2] == (run, first["tool_use_id"])
    for path in ("new.txt", "shared.py"):
        found = cli_json(sd_env, "find", path, "--cwd", str(wt))
        assert {c["run_id"] for c in found["checkpoints"]} == {run, B}
        assert {credited(c) for c in found["checkpoints"]} == {(B, "toolu_b1")}
    json.dumps(model.requests)  # the model saw plain JSON bodies only
