"""A gap spool whose lock another process holds (or that is not a file at all) must neither
block the hook past its budget nor cost the gap record."""

from __future__ import annotations

import fcntl
import os
import time

import pytest

from snapshotd_client.gaps import append_gap, make_gap, read_gaps
from tests.support.fake_daemon import assert_silent_success, hook_stdin, run_hook_timed


def _gap(reason: str) -> dict:
    return make_gap(run_id="r", node_id="n", iteration=0, attempt=1, worktree="/w", tier=1,
                    source="hook", tool_use_id=None, reason=reason, detail="d")


def test_hook_with_the_spool_lock_held_exits_within_budget_and_records_the_gap(hook_env,
                                                                               short_dir):
    spool = short_dir / "gaps.ndjson"
    hook_env["SNAPSHOTD_HOOK_TIMEOUT_MS"] = "700"
    fd = os.open(spool, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # held by this process for the hook's whole life
        # A hook blocked on the lock would stay blocked: the 20 s guard, not a stopwatch.
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"), timeout=20)
    finally:
        os.close(fd)
    assert_silent_success(proc)
    (gap,) = read_gaps(spool)
    assert gap["reason"] == "daemon-unavailable" and gap["tool_use_id"] == "toolu_test_1"


def test_append_gap_gives_up_the_lock_at_its_deadline_and_still_writes(short_dir):
    spool = short_dir / "gaps.ndjson"
    assert append_gap(_gap("first"), spool) is True
    fd = os.open(spool, os.O_WRONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        # Returning at all, with the lock still held here, is giving it up at the deadline
        # (that it waits for a lock freed in time: the next test).
        assert append_gap(_gap("second"), spool, deadline=time.monotonic() + 0.2) is False
        assert append_gap(_gap("third"), spool, deadline=time.monotonic() - 1) is False  # late
    finally:
        os.close(fd)
    assert [g["reason"] for g in read_gaps(spool)] == ["first", "second", "third"]
    assert append_gap(_gap("fourth"), spool) is True  # the lock is free again


def test_append_gap_waits_for_a_lock_released_in_time(short_dir):
    import threading

    spool = short_dir / "gaps.ndjson"
    fd = os.open(spool, os.O_WRONLY | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)
    threading.Timer(0.1, os.close, args=(fd,)).start()
    assert append_gap(_gap("late"), spool, deadline=time.monotonic() + 5) is True


def test_a_fifo_at_the_spool_path_fails_at_once_instead_of_blocking(short_dir):
    spool = short_dir / "gaps.ndjson"
    os.mkfifo(spool)
    # A blocking open of a FIFO with no reader would never return: refused at once instead.
    with pytest.raises(OSError):
        append_gap(_gap("x"), spool)


def test_hook_with_a_fifo_spool_still_exits_within_budget(hook_env, short_dir):
    os.mkfifo(short_dir / "gaps.ndjson")
    hook_env["SNAPSHOTD_HOOK_TIMEOUT_MS"] = "700"
    proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"), timeout=20)  # a hang: 20 s
    assert_silent_success(proc)
