"""A hook that names its attempt (``SNAPSHOTD_RUN_ID``/``NODE_ID``, as ``snapshotd exec`` and
engines set them) from a directory outside that attempt's worktree: a real daemon, the real hook.

The attempt's recorded worktree used to be captured instead (the tool call's change in the other
tree was in no checkpoint, the hook said ok, no gap). Now it is an ``outside-worktree`` gap that
names both directories, no checkpoint claims the tool call, and the hook still exits 0 silently;
a subdirectory of the worktree, or a symlink to it, is the worktree and captures normally."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import Daemon, Env, claude_payload, make_git_worktree, run_hook

IDS = {"SNAPSHOTD_RUN_ID": "r1", "SNAPSHOTD_NODE_ID": "n1"}


def named_hook(env: Env, cwd: Path, tool_use_id: str, name: str) -> None:
    (cwd / name).write_text(f"{tool_use_id}\n")
    proc = run_hook(env, claude_payload(cwd, tool_use_id, file_path=name), **IDS)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")


def listing(env: Env) -> dict:
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", "r1", "--json"],
                          env=env.environ(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_named_attempt_from_another_worktree_is_a_gap_not_a_capture(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    wt3 = make_git_worktree(tmp_path / "wt3")
    named_hook(sd_env, wt, "toolu_1", "a.txt")
    named_hook(sd_env, wt3, "toolu_2", "b.txt")
    gaps = [g for g in sd_env.read_gaps() if g["reason"] == "outside-worktree"]
    assert [(g["tool_use_id"], g["run_id"]) for g in gaps] == [("toolu_2", "r1")]
    assert str(wt3) in gaps[0]["detail"] and str(wt) in gaps[0]["detail"]
    shown = listing(sd_env)
    assert [c["tool_use_id"] for c in shown["checkpoints"]] == ["toolu_1"]
    assert [(g["tool_use_id"], g["resolved"]) for g in shown["gaps"]] == [("toolu_2", False)]
    # Only the hook's own tree: the attempt's worktree never got wt3's file.
    assert not (wt / "b.txt").exists()


def test_named_attempt_from_a_subdirectory_or_a_symlink_captures(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    named_hook(sd_env, wt, "toolu_1", "a.txt")
    sub = wt / "pkg"
    sub.mkdir()
    named_hook(sd_env, sub, "toolu_2", "c.txt")
    link = tmp_path / "link"
    link.symlink_to(wt)
    named_hook(sd_env, link, "toolu_3", "d.txt")
    assert sd_env.read_gaps() == []
    assert [c["tool_use_id"] for c in listing(sd_env)["checkpoints"]] == [
        "toolu_1", "toolu_2", "toolu_3"]
