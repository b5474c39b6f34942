"""A full disk under the store or the ledger: the capture fails with a gap (``store-write-failed``
or ``ledger-failed``), is never acknowledged, and once space returns the next capture holds
every change (checked against ``git add -A && git write-tree`` in a scratch index).

The disks are real: a small tmpfs mounted for the test (skipped, saying why, when mounting is
not permitted). The gap spool is kept off the full disk (``SNAPSHOTD_GAPS``) so the gap can be
read back; a full gap spool is covered by tests/system/test_faults.py.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshotd_client import SnapshotdError
from tests.conftest import (
    QUIET_WATCHER,
    Daemon,
    Env,
    claude_payload,
    git,
    make_git_worktree,
    run_hook,
)
from tests.store.test_fastpath_store import full_tree

RUN = {"run_id": "disk", "node_id": "n"}


def mount_tmpfs(where: Path, size: str, options: str = "") -> None:
    """A real small tmpfs at ``where`` (``options`` added to its mount options, e.g.
    ``nr_inodes=600``); skips the test where this machine cannot mount one."""
    where.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o",
                           ",".join(filter(None, (f"size={size}", options, "mode=0700"))),
                           "tmpfs", str(where)], capture_output=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({proc.stderr.decode().strip() or 'not root'}): "
                    "the full-disk tests need a real small file system")


def env_with_home_on(disk: Path, tmp_path: Path) -> Env:
    """A test environment whose home (store, stat caches) is on ``disk``; the gap spool and
    the ledger stay on the test's own disk."""
    env = Env(tmp_path)
    env.home = disk / "home"
    env.gaps = tmp_path / "gaps.ndjson"
    env.vars.update(SNAPSHOTD_HOME=str(env.home), SNAPSHOTD_GAPS=str(env.gaps),
                    SNAPSHOTD_LEDGER_URL=f"sqlite:///{tmp_path / 'ledger.db'}")
    return env


def fill(where: Path) -> Path:
    """Fill the file system holding ``where`` to the last byte; returns the filler file."""
    filler = where / "filler"
    with open(filler, "wb", buffering=0) as f:  # unbuffered: nothing left to fail at close
        for chunk in (65536, 512, 1):
            try:
                while f.write(b"\0" * chunk):
                    pass
            except OSError:
                pass
    return filler


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "disk"
    mount_tmpfs(where, "8m")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def start(env: Env) -> Daemon:
    return Daemon(env, extra_env=dict(QUIET_WATCHER)).start()


def test_a_full_store_disk_fails_the_capture_and_the_next_one_has_the_change(
        tmp_path: Path, disk: Path) -> None:
    env = env_with_home_on(disk, tmp_path)
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("before\n")
    (wt / "keep.txt").write_text("unchanged\n")
    daemon = start(env)
    try:
        with daemon.client() as c:
            c.attempt_begin("disk", "n", str(wt))
            first = c.snapshot(str(wt), **RUN, tool_use_id="t0")
            filler = fill(disk)
            (wt / "a.txt").write_bytes(os.urandom(256 << 10))  # incompressible: needs space
            (wt / "new.txt").write_bytes(os.urandom(64 << 10))
            with pytest.raises(SnapshotdError) as err:
                c.snapshot(str(wt), **RUN, tool_use_id="t-full")
            assert err.value.code == "capture-failed", err.value
            assert "No space left on device" in err.value.message
            # Nothing was acknowledged: the attempt still ends at the first checkpoint.
            listing = c.list("disk")
            assert [cp["seq"] for cp in listing["checkpoints"]] == [first["seq"]]
            [gap] = [g for g in listing["gaps"] if g.get("tool_use_id") == "t-full"]
            assert gap["reason"] == "store-write-failed" and gap["resolved"] is False
            filler.unlink()
            after = c.snapshot(str(wt), **RUN, tool_use_id="t-after")
    finally:
        daemon.stop()
    assert after["deduped"] is False
    assert after["tree"] == full_tree(wt, tmp_path / "oracle-index")
    store = ["--git-dir", str(env.home / "store.git")]
    git(wt, *store, "cat-file", "-e", f"{after['commit']}:new.txt")
    git(wt, *store, "fsck", "--strict")


def test_a_full_store_disk_through_the_fast_path_keeps_the_paths_owed(
        tmp_path: Path, disk: Path) -> None:
    """The watcher's changed paths taken by a capture that failed are owed: the next capture
    scans, and holds the change."""
    env = env_with_home_on(disk, tmp_path)
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("before\n")
    daemon = start(env)
    try:
        with daemon.client() as c:
            c.attempt_begin("disk", "n", str(wt))
            c.snapshot(str(wt), **RUN, tool_use_id="t0")  # the baseline scan
            (wt / "b.txt").write_text("warm\n")
            assert c.snapshot(str(wt), **RUN, tool_use_id="t1")["scan"] == "fast"
            filler = fill(disk)
            (wt / "a.txt").write_bytes(os.urandom(256 << 10))
            with pytest.raises(SnapshotdError) as err:
                c.snapshot(str(wt), **RUN, tool_use_id="t-full")
            assert err.value.code == "capture-failed"
            filler.unlink()
            after = c.snapshot(str(wt), **RUN, tool_use_id="t-after")
    finally:
        daemon.stop()
    assert after["deduped"] is False
    assert after["tree"] == full_tree(wt, tmp_path / "oracle-index")
    assert [g["reason"] for g in env.read_gaps() if g.get("tool_use_id") == "t-full"] == \
        ["store-write-failed"]


def test_a_full_ledger_disk_is_a_ledger_gap_and_the_next_capture_has_the_change(
        tmp_path: Path, disk: Path) -> None:
    env = Env(tmp_path)
    env.vars["SNAPSHOTD_LEDGER_URL"] = f"sqlite:///{disk / 'ledger.db'}"
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("before\n")
    daemon = start(env)
    try:
        with daemon.client() as c:
            c.attempt_begin("disk", "n", str(wt))
            c.snapshot(str(wt), **RUN, tool_use_id="t0")
            filler = fill(disk)
            for i in range(40):  # enough rows to need a new ledger page
                (wt / "a.txt").write_text(f"during the fault {i}\n" * 50)
                try:
                    c.snapshot(str(wt), **RUN, tool_use_id=f"t-full{i}", label="x" * 900)
                except SnapshotdError as exc:
                    err = exc
                    break
            else:
                pytest.fail("the ledger never ran out of space")
            assert err.code == "capture-failed", err
            gaps = [g for g in env.read_gaps() if g.get("tool_use_id") == f"t-full{i}"]
            assert [g["reason"] for g in gaps] == ["ledger-failed"]
            assert c.ping()["pid"] == daemon.proc.pid
            # Nothing changed since: a capture that only records its tool call is refused too,
            # as a ledger gap, not an internal error.
            for j in range(5):
                with pytest.raises(SnapshotdError) as again:
                    c.snapshot(str(wt), **RUN, tool_use_id=f"t-same{j}")
                assert again.value.code == "capture-failed", again.value
            reasons = {g["reason"] for g in env.read_gaps()
                       if str(g.get("tool_use_id")).startswith("t-same")}
            assert reasons == {"ledger-failed"}
            # A hook of a new session needs a new attempt row first.
            other = make_git_worktree(tmp_path / "other")
            (other / "o.txt").write_text("o\n")
            assert run_hook(env, claude_payload(other, "toolu_new", session_id="fresh"),
                            SNAPSHOTD_HOOK_TIMEOUT_MS="20000").returncode == 0
            new_gaps = [g for g in env.read_gaps() if g.get("tool_use_id") == "toolu_new"]
            assert [g["reason"] for g in new_gaps] == ["ledger-failed"], new_gaps
            filler.unlink()
            (wt / "a.txt").write_text("after the fault\n")
            after = c.snapshot(str(wt), **RUN, tool_use_id="t-after")
            listing = c.list("disk")
    finally:
        daemon.stop()
    assert after["deduped"] is False
    assert after["tree"] == full_tree(wt, tmp_path / "oracle-index")
    seqs = [cp["seq"] for cp in listing["checkpoints"]]
    assert seqs == sorted(set(seqs)) and listing["checkpoints"][-1]["tool_use_id"] == "t-after"
