"""Labels name a path inside the worktree relative to it (issue 43): real ``snapshot-hook`` runs
with Claude Code's recorded payload (tests/fixtures/claude-code) through the real daemon, the
labels read back with ``snapshotd log --json`` and ``snapshotd blame``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, claude_payload, run_hook
from tests.support.review_replay import cli

pytestmark = pytest.mark.one_ledger("the label a checkpoint records, not the ledger's SQL")

RUN = "claude-sess-1"


def labels(env: Env) -> dict[str, str]:
    proc = cli(env, "log", RUN, "--json")
    assert proc.returncode == 0, proc.stderr
    return {e["tool_use_id"]: e["label"] for e in json.loads(proc.stdout)["entries"]}


def hook(env: Env, wt: Path, tool_use_id: str, file_path: str, tool: str = "Edit",
         cwd: Path | None = None) -> None:
    payload = claude_payload(wt, tool_use_id, file_path=file_path)
    payload["tool_name"] = tool
    if cwd is not None:
        payload["cwd"] = str(cwd)
    proc = run_hook(env, payload)
    assert proc.returncode == 0, proc.stderr


def test_labels_name_worktree_paths_relative(sd_env: Env, daemon: Daemon,
                                             tmp_path: Path) -> None:
    wt = tmp_path / "src" / "app"
    (wt / "click").mkdir(parents=True)
    (wt / "click" / "__init__.py").write_text("x = 1\n")
    hook(sd_env, wt, "toolu_1", "click/__init__.py")
    (wt / "other.txt").write_text("o\n")  # each call changes something: a new checkpoint
    outside = tmp_path / "elsewhere" / "notes.txt"
    hook(sd_env, wt, "toolu_2", str(outside), tool="Write")
    (wt / "top.txt").write_text("t\n")
    # Run from a subdirectory of the worktree: the path is still named from the worktree's root.
    hook(sd_env, wt, "toolu_3", "top.txt", cwd=wt / "click")
    got = labels(sd_env)
    assert got["toolu_1"] == "Edit click/__init__.py"
    assert got["toolu_2"] == f"Write {outside}"  # outside the worktree: kept absolute
    assert got["toolu_3"] == "Edit top.txt"
    text = cli(sd_env, "blame", RUN, "click/__init__.py", "--node", "session")
    assert text.returncode == 0, text.stderr
    assert "Edit click/__init__.py" in text.stdout


def test_a_path_through_a_symlink_to_the_worktree_is_relative(sd_env: Env, daemon: Daemon,
                                                             tmp_path: Path) -> None:
    real = tmp_path / "real"
    (real / "pkg").mkdir(parents=True)
    (real / "pkg" / "mod.py").write_text("m\n")
    link = tmp_path / "link"
    link.symlink_to(real)
    hook(sd_env, link, "toolu_1", "pkg/mod.py")
    assert labels(sd_env)["toolu_1"] == "Edit pkg/mod.py"
