"""Power loss: the daemon's home on powerfs (a FUSE layer that keeps only what fsync made
durable, tests/support/powerfs.py), power cut at chosen points and at random ones.

With ``durability = "full"`` every acknowledged checkpoint survives any cut, the store passes
``git fsck --strict``, the ledger its integrity check, and every worktree can be captured again.
In every mode a seq handed out is never handed out again for another commit. Each edge case
(a new home, a plain worktree's first capture, a stale ref lock, a seeded pack, process-mode
seqs) has a test of its own here; the ones that need no FUSE (a
damaged file left on disk) run everywhere, the rest skip, saying why, without ``/dev/fuse``.
The heavy random-cut run is ``python -m bench.powerloss``."""

from __future__ import annotations

import random
import shutil
import sqlite3
import subprocess
import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Daemon, Env
from tests.support import powerfs
from tests.support.powercut import Rig, git_tree, plain_tree


@pytest.fixture
def fuse() -> None:
    reason = powerfs.unavailable()
    if reason:
        pytest.skip(reason)


@pytest.fixture
def rigs(tmp_path: Path) -> Iterator[list[Rig]]:
    made: list[Rig] = []
    yield made
    for rig in made:
        rig.close()


def new_rig(rigs: list[Rig], root: Path, **kwargs) -> Rig:
    rig = Rig(root, **kwargs)
    rigs.append(rig)
    return rig


def capture_rounds(rig: Rig, attempts: list[str], rounds: int) -> None:
    for _ in range(rounds):
        for attempt in attempts:
            rig.change(attempt)
            rig.capture(attempt)


def assert_whole(rig: Rig, attempts: list[str]) -> None:
    """After a cut and a restart: nothing acknowledged lost (full mode), store and ledger
    sound, every worktree capturable again, no seq reused."""
    problems = rig.problems()
    assert problems == [], "\n".join(problems) + "\n" + rig.log_tail()
    for attempt in attempts:
        rig.capture_again(attempt)
    problems = rig.problems()
    assert problems == [], "\n".join(problems) + "\n" + rig.log_tail()


# -- a new home --------------------------------------------------------------------------------


@pytest.mark.parametrize("journal", [False, True], ids=["strict", "journal"])
def test_a_new_home_survives_a_cut_after_its_first_captures(fuse: None, rigs: list[Rig],
                                                            tmp_path: Path,
                                                            journal: bool) -> None:
    rig = new_rig(rigs, tmp_path / "rig", journal=journal)
    rig.start()
    a = rig.begin("r1", "plain", plain_tree(tmp_path / "plain"))
    capture_rounds(rig, [a], 2)
    rig.power_cut()
    assert_whole(rig, [a])


# -- the first capture of a plain worktree (git add -A), and capturing it again ---------------


@pytest.mark.parametrize("journal", [False, True], ids=["strict", "journal"])
def test_the_first_capture_of_a_plain_worktree_survives_a_cut(fuse: None, rigs: list[Rig],
                                                              tmp_path: Path,
                                                              journal: bool) -> None:
    rig = new_rig(rigs, tmp_path / "rig", journal=journal, home_exists=True)
    rig.start()
    rig.settle()  # an established home: only the new worktree is new
    a = rig.begin("r1", "plain", plain_tree(tmp_path / "plain", files=20))
    capture_rounds(rig, [a], 1)
    rig.power_cut()
    assert_whole(rig, [a])


# -- a ref lock left by a cut -----------------------------------------------------------------


def test_a_cut_right_after_the_ref_lock_is_fsynced_does_not_wedge_the_attempt(
        fuse: None, rigs: list[Rig], tmp_path: Path) -> None:
    # The journal model: the lock's name is committed with its fsync, the rename is not.
    rig = new_rig(rigs, tmp_path / "rig", journal=True, home_exists=True)
    rig.start()
    a = rig.begin("r1", "n", plain_tree(tmp_path / "wt"))
    capture_rounds(rig, [a], 1)
    rig.settle()
    rig.fs.arm("fsync", "home/store.git/refs/snapshotd/runs/*.lock")
    capture_rounds(rig, [a], 1)
    assert rig.fs.status()["limit"] is not None
    rig.power_cut()
    assert_whole(rig, [a])


# -- seeding copies a pack --------------------------------------------------------------------


def test_a_seeded_pack_survives_a_cut(fuse: None, rigs: list[Rig], tmp_path: Path) -> None:
    rig = new_rig(rigs, tmp_path / "rig", home_exists=True)
    rig.start()
    rig.settle()
    a = rig.begin("r1", "git", git_tree(tmp_path / "git", files=20))
    capture_rounds(rig, [a], 1)
    rig.power_cut()
    assert_whole(rig, [a])


# -- a wide root written stored (loose.write_stored) ------------------------------------------


def test_a_wide_root_written_stored_survives_a_cut(fuse: None, rigs: list[Rig],
                                                   tmp_path: Path) -> None:
    rig = new_rig(rigs, tmp_path / "rig", home_exists=True)
    rig.start()
    rig.settle()
    a = rig.begin("r1", "wide", plain_tree(tmp_path / "wide", files=700))
    capture_rounds(rig, [a], 4)
    objects = rig.root / "mnt" / "home" / "store.git" / "objects"
    stored = [p for p in objects.glob("??/*")
              if len(raw := p.read_bytes()) > len(zlib.decompress(raw))]
    assert stored, "no capture wrote its wide root stored: this test would test nothing"
    rig.power_cut()
    assert_whole(rig, [a])


# -- process mode never reuses a seq ----------------------------------------------------------


def test_process_mode_never_hands_out_a_seq_again_after_a_cut(fuse: None, rigs: list[Rig],
                                                              tmp_path: Path) -> None:
    rig = new_rig(rigs, tmp_path / "rig", durability="process", home_exists=True)
    rig.start()
    a = rig.begin("r1", "n", plain_tree(tmp_path / "wt"))
    capture_rounds(rig, [a], 1)
    rig.settle()
    capture_rounds(rig, [a], 4)  # process mode: none of these need survive
    rig.power_cut()
    for _ in range(3):
        rig.capture_again(a)
    assert rig.reuse == []
    assert rig.problems(require_acked=False) == []


# -- random cut points ----------------------------------------------------------------------


@pytest.mark.parametrize("journal", [False, True], ids=["strict", "journal"])
def test_full_mode_loses_nothing_acknowledged_at_random_cut_points(
        fuse: None, rigs: list[Rig], tmp_path: Path, journal: bool) -> None:
    rng = random.Random(22 + journal)
    for cut in range(3):
        rig = new_rig(rigs, tmp_path / f"rig{cut}", journal=journal)
        rig.start(sync_limit=rng.randrange(0, 120))
        a = rig.begin("r1", "plain", plain_tree(tmp_path / f"plain{cut}"))
        b = rig.begin("r1", "git", git_tree(tmp_path / f"git{cut}"))
        capture_rounds(rig, [a, b], 3)
        rig.power_cut()
        assert_whole(rig, [a, b])
        rig.close()


def test_git_fsck_of_the_store_is_what_the_checks_use(tmp_path: Path) -> None:
    # The checks above trust `git fsck --strict` to notice an empty loose object.
    store = tmp_path / "s.git"
    subprocess.run(["git", "init", "-q", "--bare", str(store)], check=True)
    blob = subprocess.run(["git", "--git-dir", str(store), "hash-object", "-w", "--stdin"],
                          input=b"x\n", capture_output=True, check=True).stdout.decode().strip()
    tree = subprocess.run(["git", "--git-dir", str(store), "mktree"],
                          input=f"100644 blob {blob}\tx\n".encode(), capture_output=True,
                          check=True).stdout.decode().strip()
    subprocess.run(["git", "--git-dir", str(store), "update-ref", "refs/t", tree], check=True)
    obj = store / "objects" / blob[:2] / blob[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"")
    fsck = subprocess.run(["git", "--git-dir", str(store), "fsck", "--strict"],
                          capture_output=True)
    assert fsck.returncode != 0


# -- the same cases without FUSE: the damage a cut leaves, made by hand -----------------------


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    env = Env(tmp_path)
    yield env
    shutil.rmtree(env.sockdir, ignore_errors=True)


def start(env: Env, **extra: str) -> Daemon:
    return Daemon(env, extra_env={**QUIET_WATCHER, **extra}).start()


def snap(d: Daemon, wt: Path, run: str = "r") -> dict:
    with d.client() as c:
        return c.snapshot(str(wt), run_id=run, node_id="n")


def fsck_ok(env: Env) -> None:
    fsck = subprocess.run(["git", "--git-dir", str(env.home / "store.git"), "fsck", "--strict",
                           "--no-dangling"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def test_an_empty_store_head_and_config_are_rebuilt(env: Env, tmp_path: Path) -> None:
    wt = plain_tree(tmp_path / "wt")
    d = start(env)
    with d.client() as c:
        c.attempt_begin("r", "n", str(wt))
    first = snap(d, wt)
    d.kill9()
    store = env.home / "store.git"
    (store / "HEAD").write_bytes(b"")  # what a cut leaves when only the names were durable
    (store / "config").write_bytes(b"")
    d = start(env)
    try:
        (wt / "more.txt").write_text("more\n")
        assert snap(d, wt)["seq"] > first["seq"]
        rows = env.ledger_query("SELECT commit_id FROM checkpoints ORDER BY seq")
        assert rows[0]["commit_id"] == first["commit"]
        fsck_ok(env)
        with d.client() as c:
            assert c.status()["recovery"]["repaired_files"] == ["HEAD", "config"]
    finally:
        d.stop()


def test_damaged_objects_and_stat_cache_files_are_rebuilt_not_trusted(env: Env,
                                                                     tmp_path: Path) -> None:
    wt = plain_tree(tmp_path / "wt")
    d = start(env, SNAPSHOTD_BOOT_ID="boot-1")
    with d.client() as c:
        c.attempt_begin("r", "n", str(wt))
    snap(d, wt)
    d.kill9()
    store = env.home / "store.git"
    blob = subprocess.run(["git", "hash-object", str(wt / "file0.txt")], capture_output=True,
                          text=True, check=True).stdout.strip()
    obj = store / "objects" / blob[:2] / blob[2:]
    obj.chmod(0o644)
    obj.write_bytes(b"")  # "failed to parse loose object: invalid header"
    (cache,) = (env.home / "worktrees").iterdir()
    for name in ("HEAD", "commondir", "gitdir"):
        (cache / name).write_bytes(b"")  # "Repository not found"
    d = start(env, SNAPSHOTD_BOOT_ID="boot-2")  # the power cut that did this was a reboot
    try:
        (wt / "file1.txt").write_text("changed\n")
        reply = snap(d, wt)  # file0.txt's blob is needed again: written again
        fsck_ok(env)
        tree = subprocess.run(["git", "--git-dir", str(store), "cat-file", "-p",
                               f"{reply['commit']}:file0.txt"], capture_output=True, text=True)
        assert tree.stdout == "content 0\n"
        assert (cache / "commondir").read_text() == f"{store}\n"
        with d.client() as c:
            assert c.status()["recovery"]["bad_objects"] == 1
    finally:
        d.stop()


def test_a_stale_ref_lock_is_removed_at_start_and_reported(env: Env, tmp_path: Path) -> None:
    wt = plain_tree(tmp_path / "wt")
    d = start(env)
    with d.client() as c:
        c.attempt_begin("r", "n", str(wt))
    snap(d, wt)
    d.kill9()
    lock = env.home / "store.git" / "refs" / "snapshotd" / "runs" / "r" / "n" / "0" / "1.lock"
    lock.write_text("0" * 40 + "\n")  # SIGKILL between libgit2's lock and its rename
    d = start(env)
    try:
        (wt / "more.txt").write_text("more\n")
        assert snap(d, wt)["seq"] == 1  # before: "failed to lock file ... for writing"
        with d.client() as c:
            assert c.status()["recovery"]["stale_locks"] == [
                "store.git/refs/snapshotd/runs/r/n/0/1.lock"]
    finally:
        d.stop()


def lose_tail(env: Env, keep: int, rows_kept: int) -> None:
    """What a power cut in process mode can do: the ref falls back to seq ``keep``, the ledger
    keeps rows up to ``rows_kept``, and the newer commits are gone from the store."""
    store = env.home / "store.git"
    db = sqlite3.connect(env.home / "snapshotd.db")
    rows = db.execute("SELECT seq, commit_id FROM checkpoints ORDER BY seq").fetchall()
    db.execute("DELETE FROM checkpoints WHERE seq > ?", (rows_kept,))
    db.commit()
    db.close()
    ref = "refs/snapshotd/runs/r/n/0/1"
    subprocess.run(["git", "--git-dir", str(store), "update-ref", ref, rows[keep][1]],
                   check=True)
    for _seq, commit in rows[keep + 1:]:
        (store / "objects" / commit[:2] / commit[2:]).unlink()


def test_process_mode_never_reuses_a_seq_after_losing_the_tail(env: Env, tmp_path: Path) -> None:
    wt = plain_tree(tmp_path / "wt")
    d = start(env, SNAPSHOTD_DURABILITY="process", SNAPSHOTD_BOOT_ID="boot-1")
    with d.client() as c:
        c.attempt_begin("r", "n", str(wt))
    handed = []
    for i in range(3):
        (wt / f"n{i}.txt").write_text(f"{i}\n")
        handed.append(snap(d, wt)["seq"])
    d.kill9()
    lose_tail(env, keep=0, rows_kept=0)
    d = start(env, SNAPSHOTD_DURABILITY="process", SNAPSHOTD_BOOT_ID="boot-2")  # rebooted
    try:
        (wt / "after.txt").write_text("after\n")
        assert snap(d, wt)["seq"] not in handed  # before: seq 1 again, for another state
    finally:
        d.stop()


def test_rows_whose_commits_are_gone_are_dropped_with_a_gap(env: Env, tmp_path: Path) -> None:
    wt = plain_tree(tmp_path / "wt")
    d = start(env, SNAPSHOTD_DURABILITY="process", SNAPSHOTD_BOOT_ID="boot-1")
    with d.client() as c:
        c.attempt_begin("r", "n", str(wt))
    for i in range(3):
        (wt / f"n{i}.txt").write_text(f"{i}\n")
        snap(d, wt)
    d.kill9()
    lose_tail(env, keep=0, rows_kept=2)  # rows 1 and 2 name commits that are gone
    d = start(env, SNAPSHOTD_DURABILITY="process", SNAPSHOTD_BOOT_ID="boot-2")
    try:
        assert [r["seq"] for r in env.ledger_query("SELECT seq FROM checkpoints WHERE seq < 3")
                ] == [0]
        with d.client() as c:
            assert c.status()["reconciliation"]["dropped_rows"] == 2
        (gap,) = [g for g in env.read_gaps() if g["reason"] == "checkpoint-lost"]
        assert "seqs 1, 2" in gap["detail"]
        (wt / "after.txt").write_text("after\n")
        assert snap(d, wt)["seq"] >= 3
        fsck_ok(env)
    finally:
        d.stop()


@pytest.mark.parametrize("stop", ["clean", "kill9"])
def test_a_restart_without_a_reboot_numbers_on_without_a_skip(env: Env, tmp_path: Path,
                                                              stop: str) -> None:
    wt = plain_tree(tmp_path / "wt")
    d = start(env, SNAPSHOTD_DURABILITY="process", SNAPSHOTD_BOOT_ID="boot-1")
    with d.client() as c:
        c.attempt_begin("r", "n", str(wt))
    snap(d, wt)
    d.stop() if stop == "clean" else d.kill9()
    # A clean stop writes the exact mark; after a crash in the same boot the ledger is whole.
    d = start(env, SNAPSHOTD_DURABILITY="process",
              SNAPSHOTD_BOOT_ID="boot-1" if stop == "kill9" else "boot-2")
    try:
        (wt / "after.txt").write_text("after\n")
        assert snap(d, wt)["seq"] == 1
    finally:
        d.stop()
