"""A guard's kept ignored files stay on this host: ``snapshotd push`` to a real bare remote
carries the guard checkpoint but none of their blobs, and ``show``, ``log -p`` and ``diff`` of
the guard checkpoint never print a kept secret file's contents."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, run_hook
from tests.features.guard.test_guard import COMMAND, SECRET, bash, project, store_git
from tests.support.review_replay import cli

pytestmark = pytest.mark.one_ledger("what the remote holds; the store is the oracle")

REF = "refs/snapshotd-local/guard/claude-sess-1/session/0/1"


def on_remote(remote: Path, oid: str) -> bool:
    return subprocess.run(["git", "--git-dir", str(remote), "cat-file", "-e", oid],
                          capture_output=True).returncode == 0


def test_push_carries_no_kept_file(sd_env: Env, tmp_path: Path,
                                   make_daemon: MakeDaemon) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    wt = project(tmp_path)
    make_daemon(sd_env, dict(QUIET_WATCHER, SNAPSHOTD_REMOTE=f"file://{remote}",
                             SNAPSHOTD_PUSH_INTERVAL_MS="20"))
    assert run_hook(sd_env, bash(wt, "toolu_rm", COMMAND)).returncode == 0
    proc = cli(sd_env, "push")
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(cli(sd_env, "snapshots", "claude-sess-1", "--json").stdout)
    guard = [c for c in listed["checkpoints"] if c["source"] == "guard"][0]
    assert on_remote(remote, guard["commit"])  # the checkpoint itself is replicated
    kept = store_git(sd_env, "ls-tree", "-r", REF).splitlines()
    blobs = {line.split()[3]: line.split()[2] for line in kept}
    assert set(blobs) == {".env.local", "dev.db", "huge.db", "src/cache.db"}
    for path, oid in blobs.items():
        assert not on_remote(remote, oid), path
    commit = store_git(sd_env, "rev-parse", REF).strip()
    assert not on_remote(remote, commit)
    refs = subprocess.run(["git", "--git-dir", str(remote), "for-each-ref"],
                          capture_output=True, text=True, check=True).stdout
    assert "snapshotd-local" not in refs


def test_review_commands_never_print_a_kept_secret(sd_env: Env, tmp_path: Path,
                                                   make_daemon: MakeDaemon) -> None:
    wt = project(tmp_path)
    make_daemon(sd_env, QUIET_WATCHER)
    assert run_hook(sd_env, bash(wt, "toolu_rm", COMMAND)).returncode == 0
    subprocess.run(["rm", "-rf", "build", ".env.local"], cwd=wt, check=True)
    assert run_hook(sd_env, bash(wt, "toolu_rm", COMMAND, "PostToolUse")).returncode == 0
    listed = json.loads(cli(sd_env, "snapshots", "claude-sess-1", "--json").stdout)
    seqs = [str(c["seq"]) for c in listed["checkpoints"]]
    secret = SECRET.decode().strip()
    outputs = [cli(sd_env, "log", "claude-sess-1", "--patch").stdout]
    for seq in seqs:
        outputs.append(cli(sd_env, "show", "claude-sess-1", "--node", "session",
                           "--seq", seq).stdout)
        outputs.append(cli(sd_env, "diff", "claude-sess-1", "--node", "session", "--seq", seq,
                           "--worktree").stdout)
    assert outputs[0]
    for text in outputs:
        assert secret not in text and "sk-live" not in text
