"""Damage is contained to what is damaged: an attempt whose ref is broken or whose newest commit
is gone is recorded damaged (status, runs, an ``attempt-damaged`` gap), every other run keeps
capturing, and the damaged attempt's next capture continues from its last readable checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Daemon, Env, MakeDaemon, make_git_worktree

MISSING = "0123456789abcdef0123456789abcdef01234567"


def _store(env: Env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "--git-dir", str(env.home / "store.git"), *args],
                          capture_output=True, text=True)


def _cli_json(env: Env, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "snapshotd", *args, "--json"],
                          env=env.environ(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def _capture(daemon: Daemon, wt: Path, run_id: str, text: str) -> dict:
    (wt / "a.txt").write_text(text)
    with daemon.client() as c:
        return c.snapshot(str(wt), run_id=run_id, node_id="n", label=text.strip())


def _damage(env: Env, kind: str, rows: list[dict]) -> None:
    ref = env.home / "store.git" / "refs/snapshotd/runs/hurt/n/0/1"
    if kind == "ref-to-missing-commit":
        ref.write_text(MISSING + "\n")
    elif kind == "ref-unparseable":
        ref.write_text("this is not a ref\n")
    else:  # the tip commit itself is gone (what a racing prune left behind)
        tip = rows[-1]["commit_id"]
        (env.home / "store.git" / "objects" / tip[:2] / tip[2:]).unlink()


@pytest.mark.parametrize("kind", ["ref-to-missing-commit", "ref-unparseable", "tip-missing"])
def test_one_damaged_attempt_does_not_stop_the_others(sd_env: Env, tmp_path: Path, kind: str,
                                                      make_daemon: MakeDaemon) -> None:
    hurt = make_git_worktree(tmp_path / "hurt")
    fine = make_git_worktree(tmp_path / "fine")
    daemon = make_daemon(sd_env, QUIET_WATCHER)
    with daemon.client() as c:
        c.attempt_begin("hurt", "n", str(hurt))
        c.attempt_begin("fine", "n", str(fine))
    for i in range(3):
        _capture(daemon, hurt, "hurt", f"hurt {i}\n")
        _capture(daemon, fine, "fine", f"fine {i}\n")
    daemon.stop()
    rows = sd_env.ledger_query("SELECT seq, commit_id FROM checkpoints WHERE run_id='hurt' "
                               "ORDER BY seq")
    _damage(sd_env, kind, rows)

    daemon = make_daemon(sd_env, QUIET_WATCHER)
    assert _capture(daemon, fine, "fine", "fine 3\n")["seq"] == 3
    repaired = _capture(daemon, hurt, "hurt", "hurt 3\n")
    assert repaired["seq"] == 3 and repaired["deduped"] is False
    base = rows[-1] if kind != "tip-missing" else rows[-2]
    parent = _store(sd_env, "rev-parse", repaired["commit"] + "^").stdout.strip()
    assert parent == base["commit_id"]

    status = _cli_json(sd_env, "status")
    damaged = [d for d in status["damaged_attempts"] if d["run_id"] == "hurt"]
    assert len(damaged) == 1 and damaged[0]["attempt"] == 1
    assert "refs/snapshotd/runs/hurt/n/0/1" in damaged[0]["detail"]
    assert not [d for d in status["damaged_attempts"] if d["run_id"] == "fine"]
    runs = {r["run_id"]: r for r in _cli_json(sd_env, "runs")["runs"]}
    assert runs["hurt"]["damaged_attempts"][0]["attempt"] == 1
    assert runs["fine"]["damaged_attempts"] == []
    gaps = [g for g in sd_env.read_gaps() if g["reason"] == "attempt-damaged"]
    assert [g["run_id"] for g in gaps] == ["hurt"]
    if kind == "ref-to-missing-commit":
        assert MISSING in gaps[0]["detail"]
    if kind == "tip-missing":
        assert "seq 2 have no commit" in gaps[0]["detail"]
    listing = _cli_json(sd_env, "snapshots", "hurt")
    assert "attempt-damaged" in {g["reason"] for g in listing["gaps"]}
    daemon.stop()
    # Repaired: a restart finds nothing new, records no second gap, and the store is whole.
    daemon = make_daemon(sd_env, QUIET_WATCHER)
    assert _capture(daemon, hurt, "hurt", "hurt 4\n")["seq"] == 4
    daemon.stop()
    assert len([g for g in sd_env.read_gaps() if g["reason"] == "attempt-damaged"]) == 1
    fsck = _store(sd_env, "fsck", "--no-dangling")
    if kind != "tip-missing":  # a row's commit is gone for good there; fsck says so
        assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def test_an_attempt_that_cannot_be_reconciled_is_damaged_not_fatal(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    hurt = make_git_worktree(tmp_path / "hurt")
    fine = make_git_worktree(tmp_path / "fine")
    daemon = make_daemon(sd_env, QUIET_WATCHER)
    with daemon.client() as c:
        c.attempt_begin("hurt", "n", str(hurt))
        c.attempt_begin("fine", "n", str(fine))
    tip = _capture(daemon, hurt, "hurt", "hurt 0\n")
    _capture(daemon, fine, "fine", "fine 0\n")
    daemon.stop()
    # A commit ahead of the ledger whose trailers cannot be read back into a row.
    tree = _store(sd_env, "rev-parse", tip["commit"] + "^{tree}").stdout.strip()
    bad = subprocess.run(["git", "--git-dir", str(sd_env.home / "store.git"), "commit-tree",
                          tree, "-p", tip["commit"], "-m", "x\n\nSnapshotd-Seq: one\n"],
                         capture_output=True, text=True, check=True,
                         env={**sd_env.environ(), "GIT_AUTHOR_NAME": "t",
                              "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                              "GIT_COMMITTER_EMAIL": "t@t"}).stdout.strip()
    _store(sd_env, "update-ref", "refs/snapshotd/runs/hurt/n/0/1", bad)
    daemon = make_daemon(sd_env, QUIET_WATCHER)
    assert _capture(daemon, fine, "fine", "fine 1\n")["seq"] == 1
    status = _cli_json(sd_env, "status")
    assert [d["run_id"] for d in status["damaged_attempts"]] == ["hurt"]
    assert "could not be reconciled" in status["damaged_attempts"][0]["detail"]
    daemon.stop()
    assert [g["run_id"] for g in sd_env.read_gaps() if g["reason"] == "attempt-damaged"] \
        == ["hurt"]
