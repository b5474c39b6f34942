"""Write faults (injected through our own seam) and a corrupt stat cache: a gap where possible,
the daemon keeps serving, the ledger stays sound, the next capture after the fault succeeds."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapshotd_client import SnapshotdError
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

RUN_ENV = {"SNAPSHOTD_RUN_ID": "faulty", "SNAPSHOTD_NODE_ID": "n"}


def integrity_ok(env: Env) -> bool:
    return env.ledger_intact()


@pytest.fixture
def fault_file(tmp_path: Path) -> Path:
    return tmp_path / "faults"


@pytest.fixture
def faulty_daemon(sd_env: Env, fault_file: Path, make_daemon: MakeDaemon) -> Daemon:
    return make_daemon(sd_env, {**QUIET_WATCHER, "SNAPSHOTD_FAULT_FILE": str(fault_file)})


@pytest.mark.parametrize("seam, errno_name, reason", [
    ("objects", "ENOSPC", "store-write-failed"),
    ("objects", "EIO", "store-write-failed"),
    ("ledger", "ENOSPC", "ledger-failed"),
    ("ledger", "EIO", "ledger-failed"),
])
def test_write_fault_leaves_a_gap_and_the_next_capture_succeeds(
        sd_env: Env, faulty_daemon: Daemon, fault_file: Path, tmp_path: Path,
        seam: str, errno_name: str, reason: str) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("before\n")
    assert run_hook(sd_env, claude_payload(wt, "toolu_ok1"), **RUN_ENV).returncode == 0
    fault_file.write_text(f"{seam}={errno_name}\n")
    (wt / "a.txt").write_text("during the fault\n")
    with faulty_daemon.client() as c:
        with pytest.raises(SnapshotdError) as err:
            c.snapshot(str(wt), run_id="faulty", node_id="n", tool_use_id="toolu_fault")
        assert err.value.code == "capture-failed"
        import errno
        import os
        assert os.strerror(getattr(errno, errno_name)) in err.value.message
        assert c.ping()["pid"] == faulty_daemon.proc.pid
    gaps = [g for g in sd_env.read_gaps() if g["tool_use_id"] == "toolu_fault"]
    assert [g["reason"] for g in gaps] == [reason]
    assert gaps[0]["run_id"] == "faulty" and gaps[0]["attempt"] == 1
    assert integrity_ok(sd_env)

    fault_file.unlink()
    (wt / "a.txt").write_text("after the fault\n")
    assert run_hook(sd_env, claude_payload(wt, "toolu_ok2"), **RUN_ENV).returncode == 0
    with faulty_daemon.client() as c:
        listing = c.list("faulty")
    cps = listing["checkpoints"]
    seqs = [cp["seq"] for cp in cps]
    assert seqs == list(range(len(seqs)))
    assert cps[-1]["tool_use_id"] == "toolu_ok2"
    store = ["--git-dir", str(sd_env.home / "store.git")]
    assert git(wt, *store, "show", f"{cps[-1]['commit']}:a.txt") == "after the fault\n"
    git(wt, *store, "fsck", "--strict")
    assert integrity_ok(sd_env)
    if seam == "ledger":
        # The commit whose row could not be written was repaired into the ledger, not lost.
        assert "toolu_fault" in {cp["tool_use_id"] for cp in cps}
        [gap] = [g for g in listing["gaps"] if g["tool_use_id"] == "toolu_fault"]
        assert gap["resolved"] is True


def test_a_ledger_fault_on_a_deduplicated_tool_call_is_a_gap(
        sd_env: Env, faulty_daemon: Daemon, fault_file: Path, tmp_path: Path) -> None:
    # Nothing changed since the last checkpoint: the tool call only needs its row mapping it to
    # that checkpoint's seq. When that row cannot be written the call is a gap, not a reply.
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("one\n")
    with faulty_daemon.client() as c:
        first = c.snapshot(str(wt), run_id="faulty", node_id="n", tool_use_id="toolu_first")
        fault_file.write_text("ledger=ENOSPC\n")
        with pytest.raises(SnapshotdError) as err:
            c.snapshot(str(wt), run_id="faulty", node_id="n", tool_use_id="toolu_same")
        assert err.value.code == "capture-failed", err.value
        fault_file.unlink()
        again = c.snapshot(str(wt), run_id="faulty", node_id="n", tool_use_id="toolu_same")
        assert again["deduped"] and again["seq"] == first["seq"]
    gaps = [g for g in sd_env.read_gaps() if g["tool_use_id"] == "toolu_same"]
    assert [g["reason"] for g in gaps] == ["ledger-failed"]
    assert integrity_ok(sd_env)


def test_full_gap_spool_does_not_stop_the_daemon(sd_env: Env, faulty_daemon: Daemon,
                                                 fault_file: Path, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    fault_file.write_text("gaps=ENOSPC\nobjects=ENOSPC\n")
    with faulty_daemon.client() as c:
        with pytest.raises(SnapshotdError):
            c.snapshot(str(wt), run_id="faulty", node_id="n")
        assert c.ping()
    fault_file.unlink()
    with faulty_daemon.client() as c:
        assert c.snapshot(str(wt), run_id="faulty", node_id="n")["seq"] == 0
    assert "could not write gap" in faulty_daemon.log.read_text()


@pytest.mark.parametrize("damage", ["corrupt", "missing", "truncated"])
def test_damaged_stat_cache_is_rebuilt_not_trusted(sd_env: Env, tmp_path: Path,
                                                   damage: str, make_daemon: MakeDaemon) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    for i in range(20):
        (wt / f"f{i}.txt").write_text(f"{i}\n")
    d = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    with d.client() as c:
        c.snapshot(str(wt), run_id="r", node_id="n")
    d.stop()
    [index] = list((sd_env.home / "worktrees").glob("*/index"))
    if damage == "corrupt":
        index.write_bytes(b"DIRC" + b"\xff" * 200)
    elif damage == "missing":
        index.unlink()
    else:
        index.write_bytes(index.read_bytes()[:60])
    (wt / "f3.txt").write_text("changed while the daemon was down\n")
    (wt / "f4.txt").unlink()
    d = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    with d.client() as c:
        r = c.snapshot(str(wt), run_id="r", node_id="n")
    d.stop()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    for p in wt.iterdir():
        if p.name != ".git":
            (scratch / p.name).write_bytes(p.read_bytes())
    git(scratch, "init", "-q")
    git(scratch, "add", "-A")
    assert r["tree"] == git(scratch, "write-tree").strip()


@pytest.mark.parametrize("scan", ["fast", "full"])
def test_a_blob_the_store_cannot_take_fails_the_capture_never_skips_the_file(
        sd_env: Env, tmp_path: Path, scan: str, make_daemon: MakeDaemon) -> None:
    """A real store-side write failure: the object directory the new blob belongs in cannot be
    created (a file sits where it goes; a concurrent ``git gc`` removing it mid-write fails the
    same way). The file itself is fine, so leaving it out and acknowledging the checkpoint would
    lose the change silently: the capture must fail with a gap instead."""

    import pygit2

    wt = make_git_worktree(tmp_path / "wt")
    objects = sd_env.home / "store.git" / "objects"

    def poke_ignore_rules(i: int) -> None:
        if scan == "full":  # an ignore file among the changes: only a full scan can tell
            (wt / ".gitignore").write_text(f"*.tmp{i}\n")

    d = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    with d.client() as c:
        c.attempt_begin("blocked", "n", str(wt))
        c.snapshot(str(wt), run_id="blocked", node_id="n")
        (wt / "warm.txt").write_text("the capture path in use\n")
        poke_ignore_rules(1)
        assert c.snapshot(str(wt), run_id="blocked", node_id="n")["scan"] == scan
        n = 0
        while (objects / str(pygit2.hash(f"new content {n}\n".encode()))[:2]).exists():
            n += 1
        body = f"new content {n}\n"
        blocker = objects / str(pygit2.hash(body.encode()))[:2]
        blocker.write_text("not a directory\n")
        (wt / "a.txt").write_text(body)
        poke_ignore_rules(2)
        with pytest.raises(SnapshotdError) as err:
            c.snapshot(str(wt), run_id="blocked", node_id="n", tool_use_id="toolu_blocked")
        assert err.value.code == "capture-failed"
        assert "a.txt" in err.value.message
        [gap] = [g for g in sd_env.read_gaps() if g["tool_use_id"] == "toolu_blocked"]
        assert gap["reason"] == "store-write-failed"
        blocker.unlink()
        r = c.snapshot(str(wt), run_id="blocked", node_id="n")
        assert r["scan"] == "full"  # what the failed capture took is owed: a full scan
    store = ["--git-dir", str(sd_env.home / "store.git")]
    assert git(wt, *store, "show", f"{r['commit']}:a.txt") == body
    git(wt, *store, "fsck", "--strict")


def test_a_gap_the_spool_cannot_take_is_counted_in_status(sd_env: Env, faulty_daemon: Daemon,
                                                          fault_file: Path, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    with faulty_daemon.client() as c:
        assert c.status()["gaps_unwritten"] == 0
        fault_file.write_text("gaps=ENOSPC\nobjects=ENOSPC\n")
        with pytest.raises(SnapshotdError):
            c.snapshot(str(wt), run_id="faulty", node_id="n")
        fault_file.unlink()
        status = c.status()
    # The gap is in no spool: the count (and the log) are all that is left of it.
    assert status["gaps_unwritten"] == 1
    assert status["gaps_by_reason"] == {"store-write-failed": 1}
    assert not sd_env.gaps.exists() or "faulty" not in sd_env.gaps.read_text()
