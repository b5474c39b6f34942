"""An attempt whose first checkpoint reached the store but whose ledger rows (the attempt's and
the checkpoint's) did not: the state a power cut leaves when the ledger's last writes were not
yet durable. Built here exactly: a real daemon, ``kill -9``, the rows removed with the backend's
own driver (the writes the cut took), a restart.

Start-up reconciliation used to recreate such an attempt ``interrupted``, so every later capture
naming it was ``fenced`` while attempts on other worktrees carried on. It now recreates it as
``snapshotd repair`` does: ``active`` when it is its worktree's newest attempt (the next capture
is accepted and continues its chain), ``interrupted`` when a newer attempt works there."""

from __future__ import annotations

import sqlite3
import time

from tests.conftest import (
    QUIET_WATCHER,
    Env,
    MakeDaemon,
    claude_payload,
    make_git_worktree,
    run_hook,
)


def named_hook(env: Env, run_id: str, cwd, tool_use_id: str) -> None:
    (cwd / f"{tool_use_id}.txt").write_text(f"{tool_use_id}\n")
    proc = run_hook(env, claude_payload(cwd, tool_use_id, file_path=f"{tool_use_id}.txt"),
                    SNAPSHOTD_RUN_ID=run_id, SNAPSHOTD_NODE_ID="n1")
    assert (proc.returncode, proc.stderr) == (0, b"")


def lose_ledger_rows(env: Env, run_id: str) -> None:
    """The ledger writes the cut took: the attempt's row and its checkpoints' and tool calls'."""
    where = "attempt_pk IN (SELECT pk FROM attempts WHERE run_id = ?)"
    statements = [f"DELETE FROM checkpoints WHERE {where}", f"DELETE FROM tool_calls WHERE {where}",
                  "DELETE FROM attempts WHERE run_id = ?"]
    if env.ledger_url:
        import psycopg

        with psycopg.connect(env.ledger_url) as conn:
            for sql in statements:
                conn.execute(sql.replace("?", "%s"), (run_id,))
        return
    db = sqlite3.connect(env.home / "snapshotd.db")
    try:
        with db:
            for sql in statements:
                db.execute(sql, (run_id,))
    finally:
        db.close()


def state_and_seqs(env: Env, run_id: str) -> tuple[list[str], list[int]]:
    states = [r["state"] for r in env.ledger_query(
        "SELECT state FROM attempts WHERE run_id = ?", (run_id,))]
    seqs = [r["seq"] for r in env.ledger_query(
        "SELECT seq FROM checkpoints WHERE run_id = ? ORDER BY seq", (run_id,))]
    return states, seqs


def test_newest_attempt_recreated_active_after_its_rows_were_lost(
        sd_env: Env, make_daemon: MakeDaemon, tmp_path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    other = make_git_worktree(tmp_path / "other")
    first = make_daemon(sd_env, QUIET_WATCHER)
    named_hook(sd_env, "lost", wt, "toolu_1")
    named_hook(sd_env, "kept", other, "toolu_k1")
    first.kill9()
    lose_ledger_rows(sd_env, "lost")
    assert state_and_seqs(sd_env, "lost") == ([], [])
    make_daemon(sd_env, QUIET_WATCHER)
    assert state_and_seqs(sd_env, "lost") == (["active"], [0])
    named_hook(sd_env, "lost", wt, "toolu_2")
    named_hook(sd_env, "kept", other, "toolu_k2")
    assert state_and_seqs(sd_env, "lost") == (["active"], [0, 1])
    assert state_and_seqs(sd_env, "kept") == (["active"], [0, 1])
    assert [g["reason"] for g in sd_env.read_gaps()] == []


def test_an_older_attempt_recreated_interrupted_when_a_newer_one_works_there(
        sd_env: Env, make_daemon: MakeDaemon, tmp_path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    first = make_daemon(sd_env, QUIET_WATCHER)
    named_hook(sd_env, "older", wt, "toolu_1")
    # Commit times are whole seconds: the newer attempt begins in a later one than the older
    # one's checkpoint (in the same second the lost attempt counts as the newer).
    later = int(time.time()) + 1
    while time.time() < later:
        time.sleep(0.05)
    with first.client() as c:
        c.attempt_begin(run_id="newer", node_id="n1", cwd=str(wt))
    named_hook(sd_env, "newer", wt, "toolu_2")
    first.kill9()
    lose_ledger_rows(sd_env, "older")
    make_daemon(sd_env, QUIET_WATCHER)
    assert state_and_seqs(sd_env, "older") == (["interrupted"], [0])
    assert state_and_seqs(sd_env, "newer") == (["active"], [0])
