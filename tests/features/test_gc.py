"""Retention: gc keeps what matters, drops the rest consistently, and reclaims space."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, git, make_git_worktree


def store_git(env: Env, *args: str) -> str:
    return git(env.home, "--git-dir", str(env.home / "store.git"), *args)


def gc_cli(env: Env, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "gc", "--json", *args],
                          env=env.environ(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def store_size(env: Env) -> int:
    return sum(p.stat().st_size for p in (env.home / "store.git").rglob("*") if p.is_file())


def age_all_objects(env: Env, seconds: float = 7200) -> None:
    """Make every object look older than the prune grace, as if hours had passed."""
    past = time.time() - seconds
    for p in (env.home / "store.git" / "objects").rglob("*"):
        if p.is_file():
            os.utime(p, (past, past))


def make_run(daemon: Daemon, wt: Path, run_id: str, count: int, *, end: bool = True,
             size: int = 20_000) -> dict[int, bytes]:
    """``count`` checkpoints, each with a fresh incompressible file body; returns seq → body."""
    bodies = {}
    with daemon.client() as c:
        c.attempt_begin(run_id, "n", str(wt))
        for _ in range(count):
            body = os.urandom(size)
            (wt / "data.bin").write_bytes(body)
            r = c.snapshot(str(wt), run_id=run_id, node_id="n")
            bodies[r["seq"]] = body
        if end:
            c.attempt_end(run_id, "n", status="finished")
    return bodies


def blob_at(env: Env, commit: str, path: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(env.home / "store.git"), "show",
                           f"{commit}:{path}"], capture_output=True, check=True).stdout


def test_keep_last_keeps_newest_and_protected_and_shrinks_the_store(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    bodies = make_run(daemon, wt, "r200", 200)
    with daemon.client() as c:
        before = c.list("r200")["checkpoints"]
    assert len(before) == 200
    age_all_objects(sd_env)
    size_before = store_size(sd_env)
    report = gc_cli(sd_env, "--keep-last", "10")
    assert report["checkpoints_pruned"] == 190
    with daemon.client() as c:
        after = c.list("r200")["checkpoints"]
    kept = [cp for cp in after if cp["pruned_at"] is None]
    pruned = [cp for cp in after if cp["pruned_at"] is not None]
    assert [cp["seq"] for cp in kept] == list(range(190, 200))
    assert len(pruned) == 190 and all("keep-last 10" in cp["pruned_reason"] for cp in pruned)
    for cp in kept:
        assert blob_at(sd_env, cp["commit"], "data.bin") == bodies[cp["seq"]]
    # The attempt ref is the kept chain: git log shows exactly the kept seqs.
    log = store_git(sd_env, "log", "--format=%(trailers:key=Snapshotd-Seq,valueonly)",
                    "refs/snapshotd/runs/r200/n/0/1")
    assert [int(x) for x in log.split()] == list(range(199, 189, -1))
    store_git(sd_env, "fsck", "--strict")
    assert store_size(sd_env) < size_before / 4
    # Pruned rows are shown as pruned, with when and why; restoring one names the nearest kept.
    table = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", "r200", "--all"],
                           env=sd_env.environ(), capture_output=True, text=True, check=True)
    line_5 = next(x for x in table.stdout.splitlines() if x.startswith("5 "))
    assert "pruned" in line_5 and "keep-last 10" in line_5
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "restore", "r200", "--node", "n",
                           "--seq", "5", "--to", str(tmp_path / "out")], env=sd_env.environ(),
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "seq 5 was pruned" in proc.stderr and "nearest kept seqs are 190" in proc.stderr
    # Each kept checkpoint restores byte-exactly.
    for cp in kept[::3]:
        out = tmp_path / f"restored-{cp['seq']}"
        subprocess.run([sys.executable, "-m", "snapshotd", "restore", "r200", "--node", "n",
                        "--seq", str(cp["seq"]), "--to", str(out)], env=sd_env.environ(),
                       capture_output=True, check=True)
        assert (out / "data.bin").read_bytes() == bodies[cp["seq"]]


def test_active_attempt_survives_any_policy(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    make_run(daemon, wt, "live", 12, end=False)
    age_all_objects(sd_env)
    report = gc_cli(sd_env, "--keep-last", "0", "--older-than", "0s", "--prune-grace", "0s")
    assert report["checkpoints_pruned"] == 0
    with daemon.client() as c:
        cps = c.list("live")["checkpoints"]
    assert len(cps) == 12 and all(cp["pruned_at"] is None for cp in cps)
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "gc", "--run", "live", "--all"],
                          env=sd_env.environ(), capture_output=True, text=True)
    assert proc.returncode == 1 and "active attempt" in proc.stderr
    store_git(sd_env, "fsck", "--strict")


def test_dry_run_changes_nothing(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    make_run(daemon, wt, "dry", 30)
    age_all_objects(sd_env)
    refs_before = store_git(sd_env, "for-each-ref")
    size_before = store_size(sd_env)
    with daemon.client() as c:
        rows_before = c.list("dry")["checkpoints"]
    report = gc_cli(sd_env, "--keep-last", "3", "--dry-run")
    assert report["dry_run"] and report["checkpoints_pruned"] == 27
    with daemon.client() as c:
        assert c.list("dry")["checkpoints"] == rows_before
    assert store_git(sd_env, "for-each-ref") == refs_before
    assert store_size(sd_env) == size_before


def test_max_store_size_deletes_oldest_finished_runs_first(sd_env: Env, daemon: Daemon,
                                                           tmp_path: Path) -> None:
    for name in ("old", "mid", "new"):
        wt = make_git_worktree(tmp_path / name)
        make_run(daemon, wt, name, 5, size=200_000)
        time.sleep(0.05)  # let time pass: each run ends measurably later than the one before
    live_wt = make_git_worktree(tmp_path / "live")
    make_run(daemon, live_wt, "live", 2, end=False, size=1000)
    age_all_objects(sd_env)
    # Each run is ~1 MB of incompressible blobs; deleting one frees 4 of its 5 (its worktree's
    # stat cache keeps the blob of the file still on disk). A cap at 55 % of the store is met
    # after the two oldest finished runs go, not after one.
    total = store_size(sd_env)
    cap = int(total * 0.55)
    report = gc_cli(sd_env, "--max-store-size", str(cap), "--prune-grace", "0s")
    assert [r["run_id"] for r in report["deleted_runs"]] == ["old", "mid"]
    assert store_size(sd_env) <= cap
    with daemon.client() as c:
        assert len(c.list("new")["checkpoints"]) == 5
        assert len(c.list("live")["checkpoints"]) == 2
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", "old"],
                          env=sd_env.environ(), capture_output=True, text=True)
    assert proc.returncode == 1
    store_git(sd_env, "fsck", "--strict")


def test_whole_run_deletion_drops_its_gaps(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    make_run(daemon, wt, "gone", 3)
    other = make_git_worktree(tmp_path / "other")
    make_run(daemon, other, "stays", 2)
    lines = [json.dumps({"run_id": r, "reason": "timeout", "tool_use_id": "t"}) for r in
             ("gone", "stays", "gone")]
    with open(sd_env.gaps, "a") as f:
        f.write("\n".join(lines) + "\n")
    gc_cli(sd_env, "--run", "gone", "--all")
    remaining = [json.loads(x)["run_id"] for x in sd_env.gaps.read_text().splitlines()]
    assert remaining == ["stays"]
    refs = store_git(sd_env, "for-each-ref", "--format=%(refname)", "refs/snapshotd/runs/")
    assert "gone" not in refs and "stays" in refs


def test_stat_cache_blobs_survive_deleting_the_run_that_made_them(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    for i in range(30):
        (wt / f"f{i}.txt").write_text(f"content {i}\n")
    make_run(daemon, wt, "first", 2)
    age_all_objects(sd_env)
    gc_cli(sd_env, "--run", "first", "--all", "--prune-grace", "0s")
    # A new attempt on the unchanged worktree: the stat cache vouches for every file, so its
    # capture reuses the old blobs; they must still exist.
    with daemon.client() as c:
        c.attempt_begin("second", "n", str(wt))
        r = c.snapshot(str(wt), run_id="second", node_id="n")
    store_git(sd_env, "fsck", "--strict")
    assert blob_at(sd_env, r["commit"], "f7.txt") == b"content 7\n"


def test_captures_during_gc_are_never_lost(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    old_wt = make_git_worktree(tmp_path / "old")
    make_run(daemon, old_wt, "old", 60, size=2000)
    age_all_objects(sd_env)
    live = make_git_worktree(tmp_path / "live")
    acked: dict[int, tuple[str, str]] = {}
    stop = threading.Event()
    errors: list[BaseException] = []

    def capture_loop() -> None:
        try:
            with daemon.client() as c:
                c.attempt_begin("live", "n", str(live))
                i = 0
                while not stop.is_set():
                    body = f"live {i} {time.time()}\n"
                    (live / "f.txt").write_text(body)
                    r = c.snapshot(str(live), run_id="live", node_id="n")
                    acked[r["seq"]] = (r["commit"], body)
                    i += 1
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    t = threading.Thread(target=capture_loop)
    t.start()
    try:
        for keep in ("40", "20", "5"):
            gc_cli(sd_env, "--keep-last", keep)
    finally:
        stop.set()
        t.join(60)
    assert not errors, errors
    assert len(acked) > 3
    with daemon.client() as c:
        cps = {cp["seq"]: cp for cp in c.list("live")["checkpoints"]}
    for seq, (commit, body) in acked.items():
        assert cps[seq]["commit"] == commit
        assert blob_at(sd_env, commit, "f.txt").decode() == body
    store_git(sd_env, "fsck", "--strict")


def test_object_writes_retry_when_gc_removes_their_directory_mid_write() -> None:
    """``git gc`` (prune-packed, prune) removes empty object fan-out directories. When that
    lands between libgit2 creating one and renaming a new object into it, libgit2 fails with
    ENOENT naming the object path; seen under load in ``test_captures_during_gc_are_never_lost``
    (the blob's failure was then taken for an unreadable file and the change was skipped).
    libgit2 creates the directory again on the next try, so such a failure is retried; any
    other failure is not."""
    import pygit2

    from snapshotd.store.errors import ODB_TRIES, odb_retry

    vanished = pygit2.GitError("failed to rename lockfile to '/h/store.git/objects/39/cbbd1e': "
                               "No such file or directory")
    calls: list[int] = []

    def flaky(fails: int, value: str) -> str:
        calls.append(1)
        if len(calls) <= fails:
            raise vanished
        return value

    assert odb_retry(flaky, 2, "tree") == "tree" and len(calls) == 3
    calls.clear()
    with pytest.raises(pygit2.GitError):
        odb_retry(flaky, ODB_TRIES, "never")
    assert len(calls) == ODB_TRIES
    calls.clear()

    def full_disk() -> None:
        calls.append(1)
        raise pygit2.GitError("failed to write '/h/store.git/objects/tmp_object': No space left")

    with pytest.raises(pygit2.GitError):
        odb_retry(full_disk)
    assert len(calls) == 1
    calls.clear()
    # pygit2 raises libgit2's OS-class errors as ``OSError``: the rename above, as the daemon
    # met it under a concurrent gc (a capture-failed gap, 1 run in 4 of the test above).
    vanished = OSError("failed to rename lockfile to '/h/store.git/objects/01/f4d208': No such "
                       "file or directory")
    assert odb_retry(flaky, 1, "commit") == "commit" and len(calls) == 2


def test_an_unreadable_gc_journal_is_dropped_with_a_warning(
        sd_env: Env, caplog: pytest.LogCaptureFixture) -> None:
    import logging

    from snapshotd.core.config import load_config
    from snapshotd.features.gc import recover_journal
    from snapshotd.service.service import Service

    service = Service(sd_env.home, load_config(environ={}))
    try:
        journal = sd_env.home / "gc-journal.json"
        journal.write_text('{"ref": "refs/snapshotd/runs/r/n/0/1", "key"')
        with caplog.at_level(logging.WARNING, logger="snapshotd.gc"):
            assert recover_journal(service) is False
        assert not journal.exists()
        assert any("unreadable gc journal" in r.getMessage() for r in caplog.records)
    finally:
        service.close()


def test_an_unmeasurable_reclaim_estimate_is_logged(sd_env: Env, tmp_path: Path) -> None:
    # status's ``reclaimable_bytes`` asks ``git rev-list --disk-usage`` about the commits the
    # automatic policy would prune; when git cannot answer (here: one of them is gone from the
    # store) the figure is 0 and the log says why, rather than a silent 0.
    d = Daemon(sd_env, extra_env={"SNAPSHOTD_GC_KEEP_LAST": "2"}).start()
    try:
        wt = make_git_worktree(tmp_path / "wt")
        make_run(d, wt, "est", 5)
        with d.client() as c:
            doomed = c.list("est")["checkpoints"][0]["commit"]
        loose = sd_env.home / "store.git" / "objects" / doomed[:2] / doomed[2:]
        loose.unlink()
        with d.client() as c:
            assert c.status()["retention"]["reclaimable_bytes"] == 0
        assert "could not measure the bytes a gc would reclaim" in d.log.read_text()
    finally:
        d.stop()
