"""Automatic maintenance and the short-grace prune against the git CLI: every checkpoint keeps
its bytes, ``git fsck --strict`` stays clean, the store ends near ``git gc``'s size, and
captures are answered while git's pack work runs (a git on PATH that waits for the test)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Daemon, Env, MakeDaemon, make_git_worktree

WIDTH = 120  # files of the wide worktree: 20 directories of 6 (the big shapes: bench)


def _store(env: Env, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "--git-dir", str(env.home / "store.git"), *args],
                          capture_output=True, input=input)


def _packed_size(git_dir: Path) -> int:
    out = subprocess.run(["git", "--git-dir", str(git_dir), "count-objects", "-v"],
                         capture_output=True, text=True, check=True).stdout
    kv = dict(line.split(": ") for line in out.splitlines())
    return (int(kv["size"]) + int(kv["size-pack"]) + int(kv["size-garbage"])) * 1024


def _wide_worktree(path: Path) -> Path:
    wt = make_git_worktree(path)
    for i in range(WIDTH):
        d = wt / f"d{i % 20:02d}"
        d.mkdir(exist_ok=True)
        (d / f"f{i:04d}.txt").write_text(f"file {i}\n" * 20)
    return wt


def _objects(env: Env) -> bytes:
    """Every object the refs reach, with its type and size, sorted."""
    listed = _store(env, "rev-list", "--objects", "--all").stdout
    ids = b"\n".join(line.split(b" ")[0] for line in listed.splitlines()) + b"\n"
    checked = _store(env, "cat-file", "--batch-check", input=ids)
    assert checked.returncode == 0, checked.stderr
    return b"\n".join(sorted(checked.stdout.splitlines()))


def _archive_file(env: Env, commit: str, path: str) -> bytes:
    proc = _store(env, "archive", "--format=tar", commit, path)
    assert proc.returncode == 0, proc.stderr
    out = subprocess.run(["tar", "-xOf", "-", path], input=proc.stdout, capture_output=True)
    return out.stdout


@pytest.mark.one_ledger("what is checked is the store, with git as the oracle; 2,000 captures "
                        "are long enough on one backend")
def test_two_thousand_checkpoints_packed_keep_every_byte(sd_env: Env, service,
                                                         tmp_path: Path) -> None:
    from snapshotd.features import maintenance

    wt = _wide_worktree(tmp_path / "wide")
    service.attempt_begin({"run_id": "long", "node_id": "n", "cwd": str(wt)})
    written: dict[int, tuple[str, str]] = {}
    for n in range(2000):
        k = (n * 7) % WIDTH
        rel = f"d{k % 20:02d}/f{k:04d}.txt"
        text = f"edit {n}\n"
        (wt / rel).write_text(text)
        reply = service.snapshot({"cwd": str(wt), "run_id": "long", "node_id": "n",
                                  "label": f"edit {n}"})
        written[n] = (reply["commit"], rel)
        if n == 999:
            first = maintenance.maintain(service, pack_limit=20)
            assert first["consolidated"] is False
    objects_before = _objects(sd_env)
    loose_before = _packed_size(sd_env.home / "store.git")
    report = maintenance.maintain(service, pack_limit=1)
    assert report["consolidated"] is True
    assert report["bytes_after"] < report["bytes_before"] < loose_before + 1
    assert _objects(sd_env) == objects_before
    fsck = _store(sd_env, "fsck", "--strict", "--no-dangling")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    for n in range(0, 2000, 97):
        commit, rel = written[n]
        assert _archive_file(sd_env, commit, rel) == f"edit {n}\n".encode()
    copy = tmp_path / "copy.git"
    shutil.copytree(sd_env.home / "store.git", copy)
    subprocess.run(["git", "--git-dir", str(copy), "gc", "--quiet", "--prune=now"], check=True)
    ours = _packed_size(sd_env.home / "store.git")
    assert ours <= 2 * _packed_size(copy), (ours, _packed_size(copy), loose_before)


# A git that, for a ``repack``, signals the test and waits for its word: before running the real
# git (``before``: the pack is being written) or after it (``after``: between the reachable
# pack and the prune's last step), so captures meet a pack still running.
_SLOW_GIT = """#!/bin/sh
real="$REAL_GIT"
for a in "$@"; do
  if [ "$a" = repack ] && [ -e "$SLOW_DIR/armed" ]; then
    if [ "$SLOW_WHEN" = after ]; then "$real" "$@"; rc=$?; else rc=; fi
    touch "$SLOW_DIR/started"
    n=0
    while [ ! -e "$SLOW_DIR/release" ] && [ $n -lt 1200 ]; do sleep 0.05; n=$((n+1)); done
    rm -f "$SLOW_DIR/armed"
    [ -n "$rc" ] && exit $rc
    exec "$real" "$@"
  fi
done
exec "$real" "$@"
"""


def _slow_git(tmp_path: Path, when: str) -> tuple[dict[str, str], Path]:
    bindir = tmp_path / "slowbin"
    bindir.mkdir()
    (bindir / "git").write_text(_SLOW_GIT)
    (bindir / "git").chmod(0o755)
    slow = tmp_path / "slow"
    slow.mkdir()
    env = {"PATH": f"{bindir}:{os.environ['PATH']}", "REAL_GIT": shutil.which("git") or "git",
           "SLOW_DIR": str(slow), "SLOW_WHEN": when}
    return env, slow


def _wait_for(path: Path, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{what} never happened"
        time.sleep(0.05)


def test_captures_are_answered_while_maintenance_packs(sd_env: Env, make_daemon: MakeDaemon,
                                                       tmp_path: Path) -> None:
    extra, slow = _slow_git(tmp_path, "before")
    extra.update(SNAPSHOTD_MAINTENANCE_LOOSE_OBJECTS="1", SNAPSHOTD_MAINTENANCE_INTERVAL_S="0.2",
                 **QUIET_WATCHER)
    daemon = make_daemon(sd_env, extra)
    wt = _wide_worktree(tmp_path / "wt")
    (slow / "armed").touch()
    with daemon.client() as c:
        c.attempt_begin("r", "n", str(wt))
        c.snapshot(str(wt), run_id="r", node_id="n")
        _wait_for(slow / "started", "the maintenance pack")
        acked = []
        for i in range(10):
            (wt / "d00" / "f0000.txt").write_text(f"during {i}\n")
            acked.append(c.snapshot(str(wt), run_id="r", node_id="n", label=f"during {i}"))
            assert not (slow / "release").exists()
        assert c.status()["maintenance"]["running"] is True
        assert len({a["seq"] for a in acked}) == 10
        (slow / "release").touch()
        deadline = time.monotonic() + 60
        while (status := c.status()["maintenance"])["last"] is None:
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
    assert status["errors"] == 0 and status["last"]["bytes_after"] > 0
    fsck = _store(sd_env, "fsck", "--strict", "--no-dangling")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert _store(sd_env, "cat-file", "-e", acked[-1]["commit"]).returncode == 0


def test_zero_grace_prune_keeps_what_a_capture_reused_meanwhile(
        sd_env: Env, make_daemon: MakeDaemon, tmp_path: Path) -> None:
    """The delicate case: an object no ref names when git sorts reachable from cruft, taken up
    again by a capture while the prune runs, survives the cruft pack's deletion."""
    extra, slow = _slow_git(tmp_path, "after")
    extra.update(SNAPSHOTD_MAINTENANCE_INTERVAL_S="0", **QUIET_WATCHER)
    daemon: Daemon = make_daemon(sd_env, extra)
    old = make_git_worktree(tmp_path / "old")
    live = make_git_worktree(tmp_path / "live")
    reused = b"content pruned, then written again\n" * 50
    with daemon.client() as c:
        c.attempt_begin("old", "n", str(old))
        (old / "u.txt").write_bytes(reused)
        c.snapshot(str(old), run_id="old", node_id="n")
        (old / "u.txt").write_text("later\n")
        c.snapshot(str(old), run_id="old", node_id="n")
        c.attempt_end("old", "n", status="finished")
        c.attempt_begin("live", "n", str(live))
        (live / "a.txt").write_text("a\n")
        c.snapshot(str(live), run_id="live", node_id="n")
    cli = [sys.executable, "-m", "snapshotd", "gc", "--keep-last", "1"]
    subprocess.run(cli, env=sd_env.environ(**extra), check=True, capture_output=True)
    (slow / "armed").touch()
    gc = subprocess.Popen([*cli, "--prune-grace", "0s"], env=sd_env.environ(**extra),
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait_for(slow / "started", "the cruft repack")
        with daemon.client() as c:
            (live / "b.txt").write_bytes(reused)
            reply = c.snapshot(str(live), run_id="live", node_id="n")
            assert gc.poll() is None
        (slow / "release").touch()
        out, err = gc.communicate(timeout=120)
    finally:
        if gc.poll() is None:
            gc.kill()
    assert gc.returncode == 0, err.decode()
    assert _archive_file(sd_env, reply["commit"], "b.txt") == reused
    fsck = _store(sd_env, "fsck", "--strict", "--no-dangling")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    assert list((sd_env.home / "store.git" / "objects" / "pack").glob("*.mtimes")) == []
