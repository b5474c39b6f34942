"""``snapshotd show`` lists a checkpoint's secret findings: path, line and kind, never the value.

A real daemon captures a file holding a made-up token (the scan marks the checkpoint), then
``show`` is run as a user would, text and ``--json``, on that checkpoint and on one without
findings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import Daemon, Env

TOKEN = "sk-proj-Qm3xT8vR2kLp9Wz4Yb7Nc1Hd6Fg0Js5A"
RUN = "show-sec"


def show(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snapshotd", "show", RUN, "--node", "n", *args],
                          env=env.environ(), capture_output=True, text=True, timeout=60)


def test_show_lists_findings_without_their_values(sd_env: Env, daemon: Daemon,
                                                  tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "readme.txt").write_text("hello\n")
    with daemon.client() as c:
        c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="t0")
        (wt / "settings.py").write_text(f"DEBUG = True\nOPENAI_API_KEY = '{TOKEN}'\n")
        marked = c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="t1")
    finding = {"path": "settings.py", "line": 2, "kind": "openai"}
    assert marked["secrets"] == [finding]

    as_json = show(sd_env, "--seq", "1", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["secrets"] == [finding]
    text = show(sd_env, "--seq", "1", "--stat")
    assert text.returncode == 0, text.stderr
    assert any(line.startswith("SECRET     settings.py:2 openai")
               for line in text.stdout.splitlines()), text.stdout
    assert TOKEN not in text.stdout

    clean = show(sd_env, "--seq", "0", "--json")
    assert json.loads(clean.stdout)["secrets"] == []
    assert "SECRET" not in show(sd_env, "--seq", "0", "--stat").stdout
