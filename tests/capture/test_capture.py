"""Tier-1 capture end to end: real hook payloads, a real daemon process, the git CLI as oracle."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from tests.conftest import (
    QUIET_WATCHER,
    Daemon,
    Env,
    MakeDaemon,
    claude_payload,
    git,
    make_git_worktree,
    run_hook,
)
from tests.support.helpers import wait_windows_recovered


def store_git(env: Env, *args: str) -> str:
    return git(env.home, "--git-dir", str(env.home / "store.git"), *args)


def ls_tree(env: Env, commit: str) -> dict[str, tuple[str, str]]:
    """path -> (mode, object id) of every blob/link in a commit, read by the git CLI."""
    out = store_git(env, "ls-tree", "-r", "-z", commit)
    entries = {}
    for record in out.split("\0"):
        if not record:
            continue
        meta, path = record.split("\t", 1)
        mode, _type, oid = meta.split()
        entries[path] = (mode, oid)
    return entries


def listing(env: Env, run_id: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", run_id, "--json"],
                         env=env.environ(), capture_output=True, check=True)
    return json.loads(out.stdout)


def build_rich_worktree(root: Path) -> Path:
    wt = make_git_worktree(root)
    (wt / ".gitignore").write_text("build/\n*.log\n")
    (wt / "src" / "pkg").mkdir(parents=True)
    (wt / "src" / ".gitignore").write_text("generated/\n*.tmp\n")
    (wt / "src" / "main.py").write_text("print('hi')\n")
    (wt / "src" / "pkg" / "mod.py").write_text("X = 1\n")
    (wt / "src" / "generated").mkdir()
    (wt / "src" / "generated" / "out.py").write_text("ignored\n")
    (wt / "src" / "scratch.tmp").write_text("ignored\n")
    (wt / "build").mkdir()
    (wt / "build" / "a.o").write_bytes(b"\0\1\2")
    (wt / "debug.log").write_text("ignored\n")
    (wt / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(wt / "run.sh", 0o755)
    os.symlink("src/main.py", wt / "link-to-main")
    (wt / "a file with spaces.txt").write_text("spaces\n")
    (wt / "naïve-日本.txt").write_text("non-ascii\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "initial")
    (wt / "untracked.txt").write_text("untracked but not ignored\n")
    return wt


def scratch_tree_id(src: Path, scratch: Path) -> str:
    """What ``git add -A && git write-tree`` gives for the same files in a scratch repo."""
    shutil.copytree(src, scratch, symlinks=True, ignore=shutil.ignore_patterns(".git"))
    git(scratch, "init", "-q")
    git(scratch, "add", "-A")
    return git(scratch, "write-tree").strip()


def test_first_capture_is_exactly_the_non_ignored_tree(sd_env: Env, daemon: Daemon,
                                                       tmp_path: Path) -> None:
    wt = build_rich_worktree(tmp_path / "wt")
    result = run_hook(sd_env, claude_payload(wt, "toolu_first"))
    assert result.returncode == 0 and result.stdout == b"" and result.stderr == b""

    data = listing(sd_env, "claude-sess-1")
    [cp] = data["checkpoints"]
    assert cp["seq"] == 0 and cp["source"] == "hook" and cp["tier"] == 1
    assert cp["tool_use_id"] == "toolu_first"
    assert cp["label"] == "Write hello.txt"  # relative to the worktree
    entries = ls_tree(sd_env, cp["commit"])
    assert set(entries) == {
        ".gitignore", "src/.gitignore", "src/main.py", "src/pkg/mod.py", "run.sh",
        "link-to-main", "a file with spaces.txt", "naïve-日本.txt", "untracked.txt"}
    assert entries["run.sh"][0] == "100755"
    assert entries["src/main.py"][0] == "100644"
    assert entries["link-to-main"][0] == "120000"
    assert store_git(sd_env, "cat-file", "-p", entries["link-to-main"][1]) == "src/main.py"
    assert store_git(sd_env, "cat-file", "-p", entries["naïve-日本.txt"][1]) == "non-ascii\n"
    assert cp["tree"] == scratch_tree_id(wt, tmp_path / "scratch")
    # The commit carries its trailers and the ref names it.
    message = store_git(sd_env, "cat-file", "-p", cp["commit"])
    assert "Snapshotd-Seq: 0" in message and "Snapshotd-Tool-Use-Id: toolu_first" in message
    ref = store_git(sd_env, "rev-parse", "refs/snapshotd/runs/claude-sess-1/session/0/1").strip()
    assert ref == cp["commit"]
    store_git(sd_env, "fsck", "--strict")


def test_dedup_chain_deletion_and_rename(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = build_rich_worktree(tmp_path / "wt")
    with daemon.client() as c:
        first = c.snapshot(str(wt), run_id="r1", node_id="n1")
        again = c.snapshot(str(wt), run_id="r1", node_id="n1")
        assert first["seq"] == 0 and not first["deduped"]
        assert again["seq"] == 0 and again["deduped"] and again["commit"] == first["commit"]
        (wt / "src" / "main.py").write_text("print('changed')\n")
        second = c.snapshot(str(wt), run_id="r1", node_id="n1")
        assert second["seq"] == 1 and not second["deduped"]
        parent = store_git(sd_env, "rev-parse", second["commit"] + "^").strip()
        assert parent == first["commit"]
        assert second["changes"] == {"added": 0, "modified": 1, "deleted": 0}
        (wt / "untracked.txt").unlink()
        (wt / "src" / "pkg" / "mod.py").rename(wt / "src" / "pkg" / "renamed.py")
        third = c.snapshot(str(wt), run_id="r1", node_id="n1")
    assert third["seq"] == 2
    entries = ls_tree(sd_env, third["commit"])
    assert "untracked.txt" not in entries and "src/pkg/mod.py" not in entries
    assert "src/pkg/renamed.py" in entries
    assert third["changes"]["deleted"] == 2 and third["changes"]["added"] == 1


def test_sixteen_concurrent_hooks_two_worktrees(sd_env: Env, daemon: Daemon,
                                                tmp_path: Path) -> None:
    trees = {"a": make_git_worktree(tmp_path / "a"), "b": make_git_worktree(tmp_path / "b")}
    for name, wt in trees.items():
        (wt / "base.txt").write_text(name)

    def fire(i: int) -> subprocess.CompletedProcess:
        name = "a" if i % 2 == 0 else "b"
        wt = trees[name]
        (wt / f"f{i}.txt").write_text(str(i))
        return run_hook(sd_env, claude_payload(wt, f"toolu_{i}", session_id=f"s-{name}"))

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(fire, range(16)))
    assert all(r.returncode == 0 for r in results)
    assert sd_env.read_gaps() == []
    for name in trees:
        cps = listing(sd_env, f"claude-s-{name}")["checkpoints"]
        seqs = [cp["seq"] for cp in cps]
        assert seqs == list(range(len(seqs))) and len(seqs) >= 1
        # Every tool call maps to a checkpoint that holds its file.
        last = cps[-1]
        entries = ls_tree(sd_env, last["commit"])
        for i in range(16):
            if (i % 2 == 0) == (name == "a"):
                assert f"f{i}.txt" in entries


def test_same_tool_use_id_twice_is_one_checkpoint(sd_env: Env, daemon: Daemon,
                                                  tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "x").write_text("1")
    assert run_hook(sd_env, claude_payload(wt, "toolu_same")).returncode == 0
    (wt / "x").write_text("2")
    assert run_hook(sd_env, claude_payload(wt, "toolu_same")).returncode == 0
    cps = listing(sd_env, "claude-sess-1")["checkpoints"]
    assert [cp["seq"] for cp in cps] == [0]
    with daemon.client() as c:
        again = c.snapshot(str(wt), run_id="claude-sess-1", node_id="session",
                           tool_use_id="toolu_same", source="hook")
    assert again["seq"] == 0 and again.get("repeated")


def test_kill_9_then_restart_never_reuses_a_seq(sd_env: Env, tmp_path: Path,
                                                make_daemon: MakeDaemon) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    first = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    acked = []
    with first.client() as c:
        for i in range(3):
            (wt / "f").write_text(str(i))
            acked.append(c.snapshot(str(wt), run_id="r", node_id="n")["seq"])
    first.kill9()
    second = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    wait_windows_recovered(sd_env.home)  # the window the writes opened: captured, deduplicated
    (wt / "f").write_text("after restart")
    with second.client() as c:
        nxt = c.snapshot(str(wt), run_id="r", node_id="n")
    assert acked == [0, 1, 2] and nxt["seq"] == 3
    store_git(sd_env, "fsck", "--strict")


def test_no_daemon_hook_exits_fast_with_a_gap(sd_env: Env, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    # Fast: with a 120 s budget past run_hook's 30 s guard, waiting on it would fail the run.
    result = run_hook(sd_env, claude_payload(wt, "toolu_nodaemon"),
                      SNAPSHOTD_HOOK_TIMEOUT_MS="120000")
    assert result.returncode == 0 and result.stdout == b"" and result.stderr == b""
    [gap] = sd_env.read_gaps()
    assert gap["tool_use_id"] == "toolu_nodaemon"
    assert gap["reason"] == "daemon-unavailable"
    assert gap["run_id"] == "claude-sess-1" and gap["attempt"] == 1


def test_frozen_daemon_hook_times_out_with_a_gap(sd_env: Env, daemon: Daemon,
                                                 tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    assert daemon.proc is not None
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:  # it returns (run_hook's 30 s guard) and its gap says it timed out
        result = run_hook(sd_env, claude_payload(wt, "toolu_frozen"),
                          SNAPSHOTD_HOOK_TIMEOUT_MS="500")
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert result.returncode == 0 and result.stdout == b"" and result.stderr == b""
    gaps = [g for g in sd_env.read_gaps() if g["tool_use_id"] == "toolu_frozen"]
    assert [g["reason"] for g in gaps] == ["timeout"]


def test_user_repository_is_never_written(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = build_rich_worktree(tmp_path / "wt")
    (wt / "src" / "main.py").write_text("dirty\n")

    def fingerprint() -> dict:
        objects = sorted(str(p.relative_to(wt)) for p in (wt / ".git" / "objects").rglob("*"))
        return {
            "status": git(wt, "status", "--porcelain"),
            "head": (wt / ".git" / "HEAD").read_bytes(),
            "refs": git(wt, "show-ref"),
            "index": (wt / ".git" / "index").read_bytes(),
            "config": (wt / ".git" / "config").read_bytes(),
            "objects": objects,
        }

    before = fingerprint()
    with daemon.client() as c:
        c.snapshot(str(wt), run_id="r", node_id="n")
        (wt / "new.txt").write_text("new")
        c.snapshot(str(wt), run_id="r", node_id="n", tool_use_id="t2")
    (wt / "new.txt").unlink()
    assert fingerprint() == before


def test_snapshots_json_shape_and_unknown_run(sd_env: Env, daemon: Daemon,
                                              tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "x").write_text("x")
    assert run_hook(sd_env, claude_payload(wt, "toolu_a")).returncode == 0
    data = listing(sd_env, "claude-sess-1")
    assert set(data) >= {"run_id", "checkpoints", "gaps"}
    for key in ("seq", "node_id", "iteration", "attempt", "tier", "source", "label",
                "tool_use_id", "commit", "tree", "worktree", "created_at"):
        assert key in data["checkpoints"][0]
    bad = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", "nope"],
                         env=sd_env.environ(), capture_output=True)
    assert bad.returncode == 1 and b"claude-sess-1" in bad.stderr


def test_second_daemon_on_same_home_is_refused(sd_env: Env, daemon: Daemon) -> None:
    other_sock = sd_env.sockdir / "other.sock"
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "serve"],
                          env=sd_env.environ(SNAPSHOTD_SOCKET=str(other_sock)),
                          capture_output=True, timeout=30)
    assert proc.returncode != 0
    assert daemon.proc is not None and str(daemon.proc.pid).encode() in proc.stderr


def test_sigterm_exits_zero_and_removes_socket(sd_env: Env, tmp_path: Path,
                                               make_daemon: MakeDaemon) -> None:
    d = make_daemon(sd_env)
    assert oct(sd_env.socket.stat().st_mode & 0o777) == oct(0o600)
    assert oct(sd_env.sockdir.stat().st_mode & 0o777) == oct(0o700)
    assert d.stop() == 0
    assert not sd_env.socket.exists()
