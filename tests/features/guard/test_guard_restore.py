"""Getting a guard's kept files back: ``restore --include-ignored`` writes a guard checkpoint's
ignored files where none is, byte for byte at 0600; without the flag no ignored file is written;
a whole worktree deleted comes back with ``restore`` in place."""

from __future__ import annotations

import json
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, run_hook
from tests.features.guard.test_guard import COMMAND, SECRET, bash, project
from tests.support.review_replay import cli

pytestmark = pytest.mark.one_ledger("files written back; the store is the oracle")


def guarded_run(env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> tuple[Path, int]:
    """The agent's destructive call, hooks around it: the worktree after, the guard's seq."""
    wt = project(tmp_path)
    make_daemon(env, dict(QUIET_WATCHER, SNAPSHOTD_GUARD_MAX_FILE_BYTES="1000"))
    assert run_hook(env, bash(wt, "toolu_rm", COMMAND)).returncode == 0
    subprocess.run(["bash", "-c", COMMAND], cwd=wt, check=True, capture_output=True)
    assert run_hook(env, bash(wt, "toolu_rm", COMMAND, "PostToolUse")).returncode == 0
    listed = json.loads(cli(env, "snapshots", "claude-sess-1", "--json").stdout)
    return wt, [c["seq"] for c in listed["checkpoints"] if c["source"] == "guard"][0]


def restore(env: Env, *args: str) -> subprocess.CompletedProcess:
    return cli(env, "restore", "claude-sess-1", "--node", "session", "--force", *args)


def test_include_ignored_brings_the_ignored_files_back(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt, seq = guarded_run(sd_env, tmp_path, make_daemon)
    assert not (wt / ".env.local").exists() and not (wt / "dev.db").exists()
    proc = restore(sd_env, "--seq", str(seq), "--include-ignored")
    assert proc.returncode == 0, proc.stderr
    assert (wt / ".env.local").read_bytes() == SECRET
    assert stat.S_IMODE((wt / ".env.local").stat().st_mode) == 0o600
    assert (wt / "dev.db").read_bytes() == b"\x00db" * 100
    assert (wt / "src" / "cache.db").read_bytes() == b"nested"
    assert not (wt / "huge.db").exists()  # over guard_max_file_bytes: listed, not kept
    assert (wt / "src" / "app.py").read_text() == "print('app')\n"
    assert "ignored files: wrote 3, left 0" in proc.stderr


def test_without_the_flag_no_ignored_file_is_written(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt, seq = guarded_run(sd_env, tmp_path, make_daemon)
    proc = restore(sd_env, "--seq", str(seq))
    assert proc.returncode == 0, proc.stderr
    assert (wt / "src" / "app.py").is_file()
    assert not (wt / ".env.local").exists() and not (wt / "dev.db").exists()


def test_a_file_there_now_is_left(sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt, seq = guarded_run(sd_env, tmp_path, make_daemon)
    (wt / ".env.local").write_bytes(b"NEWER=1\n")
    proc = restore(sd_env, "--seq", str(seq), "--include-ignored", "--json")
    assert proc.returncode == 0, proc.stderr
    ignored = json.loads(proc.stdout)["ignored"]
    assert ignored["left"] == [{"path": ".env.local",
                                "reason": "a file is there: left as it is"}]
    assert sorted(ignored["written"]) == ["dev.db", "src/cache.db"]
    assert (wt / ".env.local").read_bytes() == b"NEWER=1\n"


def test_include_ignored_of_a_checkpoint_without_kept_files_is_refused(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt, seq = guarded_run(sd_env, tmp_path, make_daemon)
    (wt / "src" / "new.py").write_text("new\n")
    assert run_hook(sd_env, bash(wt, "toolu_2", "touch src/new.py", "PostToolUse")
                    ).returncode == 0
    (wt / "src" / "app.py").unlink()
    listed = json.loads(cli(sd_env, "snapshots", "claude-sess-1", "--json").stdout)
    other = [c["seq"] for c in listed["checkpoints"] if c["source"] != "guard"][-1]
    proc = restore(sd_env, "--seq", str(other), "--include-ignored")
    assert proc.returncode != 0
    assert "has no kept ignored files" in proc.stderr and f"seq {seq}" in proc.stderr
    assert not (wt / "src" / "app.py").exists()  # nothing was restored


def test_a_deleted_worktree_comes_back_in_place(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = project(tmp_path)
    make_daemon(sd_env, QUIET_WATCHER)
    outer = bash(tmp_path, "toolu_rmwt", f"rm -rf {wt}")
    outer["cwd"] = str(wt)  # the agent's session is in the worktree it deletes
    assert run_hook(sd_env, outer).returncode == 0
    shutil.rmtree(wt)
    listed = json.loads(cli(sd_env, "snapshots", "claude-sess-1", "--json").stdout)
    seq = [c["seq"] for c in listed["checkpoints"] if c["source"] == "guard"][0]
    proc = restore(sd_env, "--seq", str(seq), "--include-ignored")
    assert proc.returncode == 0, proc.stderr
    assert (wt / "src" / "app.py").read_text() == "print('app')\n"
    assert (wt / ".gitignore").is_file()
    assert (wt / ".env.local").read_bytes() == SECRET
