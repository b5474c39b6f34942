"""``snapshotd diff``: patches between checkpoints and against the worktree, with the git CLI
diffing the same commits of the store as the oracle."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env

pytestmark = pytest.mark.one_ledger("patches against git diff over the store's commits")


def cli(env: Env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120)


def store_git(env: Env, *args: str) -> str:
    out = subprocess.run(["git", "--git-dir", str(env.home / "store.git"), "-c",
                          "core.quotePath=false", *args], capture_output=True, check=True)
    return out.stdout.decode()


def two_checkpoints(daemon: Daemon, wt: Path) -> tuple[dict, dict]:
    wt.mkdir()
    (wt / "keep.txt").write_text("same\n")
    (wt / "edit.py").write_text("a = 1\nb = 2\nc = 3\n")
    (wt / "gone.txt").write_text("bye\n")
    (wt / "moved.txt").write_text("".join(f"line {i}\n" for i in range(40)))
    (wt / "blob.bin").write_bytes(b"\0\1\2" * 50)
    with daemon.client() as c:
        first = c.snapshot(str(wt), run_id="r", node_id="n")
        (wt / "edit.py").write_text("a = 1\nb = 20\nc = 3\nd = 4\n")
        (wt / "gone.txt").unlink()
        (wt / "added.txt").write_text("hello\n")
        (wt / "moved.txt").rename(wt / "renamed.txt")
        os.chmod(wt / "keep.txt", 0o755)
        (wt / "blob.bin").write_bytes(b"\0\3\4" * 60)
        second = c.snapshot(str(wt), run_id="r", node_id="n")
        c.attempt_end("r", "n")
    return first, second


def test_patch_between_checkpoints_matches_git(sd_env: Env, daemon: Daemon,
                                               tmp_path: Path) -> None:
    first, second = two_checkpoints(daemon, tmp_path / "wt")
    proc = cli(sd_env, "diff", "r", "--node", "n", "--seq", "0", "--to-seq", "1")
    assert proc.returncode == 0, proc.stderr
    oracle = store_git(sd_env, "diff", "-M", "--no-color", first["commit"], second["commit"])
    assert proc.stdout == oracle
    assert "rename from moved.txt" in proc.stdout and "Binary files" in proc.stdout
    # --name-status and --stat agree with git's own.
    names = cli(sd_env, "diff", "r", "--node", "n", "--seq", "0", "--to-seq", "1",
                "--name-status").stdout
    want = store_git(sd_env, "diff", "-M", "--name-status", first["commit"], second["commit"])
    strip = [line.split("\t") for line in want.splitlines()]
    assert [line.split("\t") for line in names.splitlines()] == [
        [s[0][0], *s[1:]] for s in strip]
    stat = cli(sd_env, "diff", "r", "--node", "n", "--seq", "0", "--to-seq", "1", "--stat").stdout
    shortstat = store_git(sd_env, "diff", "-M", "--shortstat", first["commit"],
                          second["commit"]).strip()
    assert shortstat in [line.strip() for line in stat.splitlines()]
    assert "mode change 100644 => 100755 keep.txt" in stat
    # With no --to-seq: what seq 1 changed against seq 0 (the same patch, like git show).
    assert cli(sd_env, "diff", "r", "--node", "n", "--seq", "1").stdout == oracle
    data = json.loads(cli(sd_env, "diff", "r", "--node", "n", "--seq", "0", "--to-seq", "1",
                          "--json").stdout)
    assert data["from"]["seq"] == 0 and data["to"]["seq"] == 1
    by_path = {f["path"]: f for f in data["files"]}
    assert by_path["edit.py"]["additions"] == 2 and by_path["edit.py"]["deletions"] == 1
    assert by_path["renamed.txt"]["status"] == "R"
    assert by_path["renamed.txt"]["old_path"] == "moved.txt"
    assert by_path["blob.bin"]["binary"] is True


def test_diff_against_the_worktree_records_nothing(sd_env: Env, daemon: Daemon,
                                                   tmp_path: Path) -> None:
    first, second = two_checkpoints(daemon, tmp_path / "wt")
    wt = tmp_path / "wt"
    (wt / "added.txt").write_text("hello\nworld\n")
    proc = cli(sd_env, "diff", "r", "--node", "n", "--seq", "1", "--worktree")
    assert proc.returncode == 0, proc.stderr
    assert "diff --git a/added.txt b/added.txt" in proc.stdout and "+world" in proc.stdout
    assert proc.stdout.count("diff --git") == 1
    listing = json.loads(cli(sd_env, "snapshots", "r", "--json").stdout)
    assert len(listing["checkpoints"]) == 2
    # Without a daemon, the CLI works on the home itself.
    daemon.stop()
    again = cli(sd_env, "diff", "r", "--node", "n", "--seq", "1", "--worktree")
    assert again.returncode == 0 and again.stdout == proc.stdout


def test_a_patch_larger_than_a_frame_is_rendered_locally(sd_env: Env, daemon: Daemon,
                                                         tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "big.txt").write_text("".join(f"old line {i}\n" for i in range(60_000)))
    with daemon.client() as c:
        a = c.snapshot(str(wt), run_id="r", node_id="n")
        (wt / "big.txt").write_text("".join(f"new line {i}\n" for i in range(60_000)))
        b = c.snapshot(str(wt), run_id="r", node_id="n")
        reply = c.diff(run_id="r", node_id="n", seq=0, to_seq=1)
    assert reply["patch"] is None and "too large" in reply["patch_omitted"]
    proc = cli(sd_env, "diff", "r", "--node", "n", "--seq", "0", "--to-seq", "1")
    assert proc.returncode == 0
    assert proc.stdout == store_git(sd_env, "diff", "--no-color", a["commit"], b["commit"])


def test_diff_errors(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    two_checkpoints(daemon, tmp_path / "wt")
    proc = cli(sd_env, "diff", "r", "--node", "n", "--seq", "0", "--to-seq", "5")
    assert proc.returncode == 1 and "no checkpoint seq 5" in proc.stderr and "0-1" in proc.stderr
    proc = cli(sd_env, "diff", "r", "--node", "n", "--seq", "0", "--to-seq", "1", "--worktree")
    assert proc.returncode == 2 and "not both" in proc.stderr
    proc = cli(sd_env, "diff", "zz", "--node", "n", "--seq", "0")
    assert proc.returncode == 1 and "known runs: r" in proc.stderr
