"""The gap rule: every reply that is not a checkpoint is a gap, written exactly once: by the
daemon when it can attribute the failure, by the hook (or wrap) for every code the daemon records
no gap for (``protocol.NO_DAEMON_GAP_CODES``), for timeouts and for client-side failures.

Exact reply codes come from a tiny listener on a real Unix socket; ``busy``, ``shutting-down``
and ``internal`` are also made by a real daemon."""

from __future__ import annotations

import os
import signal
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from snapshotd_client import Client, wrap
from snapshotd_client.gaps import read_gaps
from snapshotd_client.protocol import (
    BUSY,
    CAPTURE_FAILED,
    FENCED,
    INTERNAL,
    NO_DAEMON_GAP_CODES,
    SHUTTING_DOWN,
    WORKTREE_REFUSED,
)
from tests.conftest import Env, MakeDaemon, make_git_worktree, run_hook
from tests.support.fake_daemon import (
    SESSION,
    FakeDaemon,
    assert_silent_success,
    fail,
    hook_stdin,
    run_hook_timed,
)
from tests.support.helpers import wait_for


@pytest.mark.parametrize("code", sorted(NO_DAEMON_GAP_CODES | {"some-future-code"}))
def test_hook_writes_the_gap_for_every_code_the_daemon_records_none_for(hook_env, short_dir,
                                                                       code):
    with FakeDaemon(short_dir / "d.sock", fail(code)):
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert (gap["reason"], gap["detail"]) == (code, f"refused: {code}")
    assert (gap["run_id"], gap["worktree"]) == (f"claude-{SESSION}", "/srv/proj")


def test_the_unattributed_set_names_the_daemons_gapless_replies():
    assert {BUSY, SHUTTING_DOWN, INTERNAL} <= NO_DAEMON_GAP_CODES
    assert not {FENCED, WORKTREE_REFUSED, CAPTURE_FAILED} & NO_DAEMON_GAP_CODES


@pytest.mark.parametrize("code", [FENCED, WORKTREE_REFUSED, CAPTURE_FAILED])
def test_hook_leaves_attributed_failures_to_the_daemon(hook_env, short_dir, code):
    with FakeDaemon(short_dir / "d.sock", fail(code)):
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)
    assert read_gaps(short_dir / "gaps.ndjson") == []


def test_busy_reply_without_an_id_is_a_gap(hook_env, short_dir):
    # The real daemon answers "busy" before reading the request, so with id None.
    reply = {"id": None, "ok": False, "error": {"code": "busy", "message": "too many"}}
    with FakeDaemon(short_dir / "d.sock", lambda req: reply):
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert gap["reason"] == "busy"


def test_explicit_run_gap_records_the_payloads_cwd_not_the_hooks(hook_env, short_dir):
    hook_env.update(SNAPSHOTD_RUN_ID="run-9", SNAPSHOTD_NODE_ID="impl", SNAPSHOTD_ITERATION="3")
    proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj/sub"))  # no daemon
    assert_silent_success(proc)
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert (gap["run_id"], gap["node_id"], gap["iteration"]) == ("run-9", "impl", 3)
    assert gap["worktree"] == "/srv/proj/sub"
    assert gap["worktree"] != os.getcwd()


# -- a real daemon ------------------------------------------------------------------------------


def _payload(worktree: Path, tool_use_id: str) -> dict:
    return {"session_id": SESSION, "cwd": str(worktree), "hook_event_name": "PostToolUse",
            "tool_name": "Write", "tool_input": {"file_path": f"{worktree}/a.txt"},
            "tool_response": {}, "tool_use_id": tool_use_id}


def test_real_daemon_busy_reply_becomes_one_hook_gap(sd_env: Env, tmp_path,
                                                     make_daemon: MakeDaemon):
    d = make_daemon(sd_env, {"SNAPSHOTD_MAX_CONNECTIONS": "2"})
    held = []
    for _ in range(2):  # fill the connection table with connections that stay open
        c = Client(sd_env.socket, timeout=5)
        c.ping()
        held.append(c)
    wt = make_git_worktree(tmp_path / "wt")
    proc = run_hook(sd_env, _payload(wt, "toolu_busy"))
    assert proc.returncode == 0
    for c in held:
        c.close()
    d.stop()  # whatever the daemon itself would record is on disk before the gaps are read
    gaps = [g for g in sd_env.read_gaps() if g["tool_use_id"] == "toolu_busy"]
    assert [g["reason"] for g in gaps] == ["busy"]
    assert gaps[0]["worktree"] == str(wt)


def test_real_daemon_shutting_down_reply_becomes_one_gap(sd_env: Env, tmp_path, monkeypatch,
                                                         make_daemon: MakeDaemon):
    monkeypatch.setenv("SNAPSHOTD_GAPS", str(sd_env.gaps))  # where this process's wrap writes
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    mark = tmp_path / "in-flight"
    d = make_daemon(sd_env, {"SNAPSHOTD_DELAY_AT": "before-row:1500",
                             "SNAPSHOTD_DELAY_MARK": str(mark)})
    held = Client(sd_env.socket, timeout=10)
    held.ping()  # its connection is open before the daemon starts stopping
    slow = threading.Thread(target=lambda: Client(sd_env.socket, timeout=10).snapshot(
        wt, run_id="r", node_id="n", source="cli"))
    slow.start()
    wait_for(mark.exists, what="the capture to be in flight, held at before-row")
    assert d.proc is not None
    d.proc.send_signal(signal.SIGTERM)
    time.sleep(0.2)  # let the daemon begin its stop
    w = wrap(wt, "r", "n", client=held, tool_use_id="toolu_stop")
    with w:
        pass
    slow.join(10)
    held.close()
    d.stop()
    assert w.error is not None and getattr(w.error, "code", None) == "shutting-down"
    gaps = [g for g in sd_env.read_gaps() if g["tool_use_id"] == "toolu_stop"]
    assert [(g["reason"], g["source"], g["worktree"]) for g in gaps] == [
        ("shutting-down", "wrap", str(wt))]


def _break_ledger(env: Env) -> None:
    # A real way to make the daemon's attribution fail with an unexpected error: the table the
    # new attempt goes into is gone.
    sql = "ALTER TABLE attempts RENAME TO attempts_gone"
    if env.ledger_url:
        import psycopg

        with psycopg.connect(env.ledger_url, autocommit=True) as conn:
            conn.execute(sql)
        return
    db = sqlite3.connect(env.home / "snapshotd.db")
    try:
        db.execute(sql)
        db.commit()
    finally:
        db.close()


def test_real_daemon_ledger_failure_is_one_gap_the_daemon_writes(sd_env: Env, tmp_path,
                                                                  make_daemon: MakeDaemon):
    """A ledger the daemon cannot use (its attempts table gone) is a ``ledger-failed`` gap the
    daemon records and a ``capture-failed`` reply, never an ``internal`` error with no gap; the
    hook, seeing a code the daemon records a gap for, adds no second one. (``internal`` itself
    is the fake listener's, above: the daemon has no real trigger for it left.)"""
    d = make_daemon(sd_env)
    wt = make_git_worktree(tmp_path / "wt")
    _break_ledger(sd_env)
    with Client(sd_env.socket, timeout=10) as c, pytest.raises(Exception) as info:
        c.snapshot(wt, source="cli", fallback={"run_id": "probe", "node_id": "n",
                                               "iteration": 0, "attempt": 1,
                                               "worktree": str(wt)})
    assert getattr(info.value, "code", None) == "capture-failed"
    assert [g["reason"] for g in sd_env.read_gaps()] == ["ledger-failed"]
    proc = run_hook(sd_env, _payload(wt, "toolu_ledger"))
    assert proc.returncode == 0
    d.stop()
    gaps = [g for g in sd_env.read_gaps() if g["tool_use_id"] == "toolu_ledger"]
    assert [g["reason"] for g in gaps] == ["ledger-failed"]
    assert gaps[0]["run_id"] == f"claude-{SESSION}"
