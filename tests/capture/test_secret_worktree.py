"""Per-worktree secret settings: ``[worktree."/abs/path"]`` tables in the user's config file.

A real daemon reads a config file whose table names worktree A through a symlink (paths are
compared after realpath): A's ``.env`` is captured, B's is skipped with reason ``secret``; a
table's ``secret_scan = false`` turns the scan off for its worktree only. ``snapshotd config``
shows each override with its source, and a bad table fails with exit 2 naming the key.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Daemon, Env, MakeDaemon, git

pytestmark = pytest.mark.one_ledger("per-worktree settings of the capture")

TOKEN_LINE = "OPENAI_API_KEY = 'sk-proj-Qm3xT8vR2kLp9Wz4Yb7Nc1Hd6Fg0Js5A'\n"


def write_config(env: Env, text: str) -> Path:
    path = env.root / "config" / "snapshotd" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def capture(daemon: Daemon, wt: Path, run_id: str) -> dict:
    with daemon.client() as c:
        return c.snapshot(str(wt), run_id=run_id, node_id="n", tool_use_id="t0")


def secret_skips(reply: dict) -> set[str]:
    return {s["path"] for s in reply["skipped"] if s["reason"] == "secret"}


def tree_paths(env: Env, commit: str) -> set[str]:
    return set(git(env.home / "store.git", "ls-tree", "-r", "--name-only", commit).split("\n"))


def snapshotd_cli(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=60)


def test_secret_files_capture_for_one_worktree_only(sd_env: Env, make_daemon: MakeDaemon,
                                                    tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    for wt in (a, b):
        wt.mkdir()
        (wt / ".env").write_text("A=1\n")
        (wt / "main.py").write_text("print('hi')\n")
    (tmp_path / "link").symlink_to(a)
    write_config(sd_env, f'[worktree."{tmp_path / "link"}"]\nsecret_files = "capture"\n')
    daemon = make_daemon(sd_env, QUIET_WATCHER)
    in_a = capture(daemon, a, "run-a")
    in_b = capture(daemon, b, "run-b")
    assert not secret_skips(in_a), in_a["skipped"]
    assert ".env" in tree_paths(sd_env, in_a["commit"])
    assert secret_skips(in_b) == {".env"}
    assert ".env" not in tree_paths(sd_env, in_b["commit"])


def test_secret_scan_off_for_a_worktree_and_its_subdirectories(
        sd_env: Env, make_daemon: MakeDaemon, tmp_path: Path) -> None:
    quiet, loud = tmp_path / "scratch" / "deep" / "wt", tmp_path / "b"
    for wt in (quiet, loud):
        wt.mkdir(parents=True)
        (wt / "settings.py").write_text(TOKEN_LINE)
    write_config(sd_env, f'[worktree."{tmp_path / "scratch"}"]\nsecret_scan = false\n')
    daemon = make_daemon(sd_env, QUIET_WATCHER)
    assert "secrets" not in capture(daemon, quiet, "run-a")
    assert capture(daemon, loud, "run-b")["secrets"] == [
        {"path": "settings.py", "line": 1, "kind": "openai"}]


def test_config_shows_each_override_with_its_source(sd_env: Env, tmp_path: Path) -> None:
    (tmp_path / "wt").mkdir()
    path = write_config(sd_env, f'[worktree."{tmp_path}/x/../wt"]\nsecret_files = "capture"\n'
                                'secret_scan = false\n')
    shown = snapshotd_cli(sd_env, "config")
    assert shown.returncode == 0, shown.stderr
    real = (tmp_path / "wt").resolve()
    lines = [line.split() for line in shown.stdout.splitlines()]
    assert [f'worktree."{real}".secret_files', "capture", "file", str(path)] in lines
    assert [f'worktree."{real}".secret_scan', "False", "file", str(path)] in lines
    as_json = json.loads(snapshotd_cli(sd_env, "config", "--json").stdout)
    assert as_json["settings"]["worktree"]["value"] == {
        str(real): {"secret_files": "capture", "secret_scan": False}}


def test_a_bad_worktree_table_names_the_key(sd_env: Env, tmp_path: Path) -> None:
    cases = {
        '[worktree."/srv/a"]\nsecret_file = "capture"\n': 'worktree."/srv/a".secret_file',
        '[worktree."/srv/a"]\nsecret_files = "keep"\n': 'secret_files (from file',
        '[worktree."srv/a"]\nsecret_files = "skip"\n': 'worktree."srv/a": expected an absolute',
        '[worktree."/srv/a"]\nsecret_scan = "maybe"\n': "secret_scan (from file",
        "worktree = 3\n": "worktree (from file",
    }
    for text, named in cases.items():
        write_config(sd_env, text)
        result = snapshotd_cli(sd_env, "config")
        assert result.returncode == 2, (text, result.stdout)
        assert named in result.stderr, (text, result.stderr)
