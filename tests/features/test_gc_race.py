"""gc racing captures: nothing an acknowledged checkpoint or an active attempt needs is removed,
whatever the prune grace (the grace only protects objects no ref names yet)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.conftest import Daemon, Env, make_git_worktree


def _store(env: Env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "--git-dir", str(env.home / "store.git"), *args],
                          capture_output=True, text=True)


def _capture_loop(daemon: Daemon, wt: Path, stop: threading.Event, acked: list[dict],
                  errors: list[str]) -> None:
    n = 0
    with daemon.client() as c:
        while not stop.is_set():
            n += 1
            (wt / f"f{n % 7}.txt").write_text(f"{n} {os.urandom(8).hex()}\n")
            try:
                acked.append(c.snapshot(str(wt), run_id="live", node_id="n",
                                        label=f"edit {n}"))
            except Exception as exc:  # noqa: BLE001 - collected and asserted on below
                errors.append(f"{type(exc).__name__}: {exc}")


def test_gc_with_zero_grace_never_removes_acknowledged_checkpoints(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    ended = make_git_worktree(tmp_path / "ended")
    with daemon.client() as c:
        c.attempt_begin("old", "n", str(ended))
        for i in range(6):
            (ended / "a.txt").write_text(f"old {i}\n")
            c.snapshot(str(ended), run_id="old", node_id="n")
        c.attempt_end("old", "n", status="finished")
    live = make_git_worktree(tmp_path / "live")
    with daemon.client() as c:
        c.attempt_begin("live", "n", str(live))
    stop = threading.Event()
    acked: list[dict] = []
    errors: list[str] = []
    thread = threading.Thread(target=_capture_loop, args=(daemon, live, stop, acked, errors))
    thread.start()
    try:
        deadline = time.monotonic() + 40
        for _ in range(4):
            if time.monotonic() > deadline:
                break
            proc = subprocess.run([sys.executable, "-m", "snapshotd", "gc", "--keep-last", "1",
                                   "--prune-grace", "0s"], env=sd_env.environ(),
                                  capture_output=True, text=True, timeout=120)
            assert proc.returncode == 0, proc.stderr
    finally:
        stop.set()
        thread.join(timeout=60)
    assert not errors, errors[:5]
    assert len(acked) > 5
    rows = sd_env.ledger_query("SELECT run_id, seq, commit_id FROM checkpoints "
                               "WHERE pruned_at IS NULL")
    missing = [r for r in rows if _store(sd_env, "cat-file", "-e", r["commit_id"]).returncode]
    assert missing == []
    for reply in acked:
        assert _store(sd_env, "cat-file", "-e", reply["commit"]).returncode == 0 or any(
            r["seq"] == reply["seq"] and r["run_id"] == "live" for r in rows)
    fsck = _store(sd_env, "fsck", "--strict", "--no-dangling")
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
    (live / "after.txt").write_text("after gc\n")
    with daemon.client() as c:
        last = c.snapshot(str(live), run_id="live", node_id="n")
    assert last["deduped"] is False
    assert _store(sd_env, "cat-file", "-e", last["commit"]).returncode == 0
