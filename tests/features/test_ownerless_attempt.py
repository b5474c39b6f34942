"""An agent session's attempt with no owner process: the real hook, run by a parent (a script)
that exits before the hook reports, so the daemon can name no agent process behind it.

Such an attempt used to stay ``active`` for good (only a ``SessionEnd`` that never comes would
end it). Now, once it has had no capture for ``ownerless_idle_s``, the daemon's liveness takes
a last capture and ends it ``abandoned``; an attempt registered with ``attempt begin`` (its end
is its runner's) is left alone however long it is quiet."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import (
    QUIET_WATCHER,
    Env,
    MakeDaemon,
    claude_payload,
    load_payloads,
    make_git_worktree,
    run_hook,
)

HOOK = [sys.executable, "-c", "from snapshotd_client.hook import main; main()"]
# The parent: starts the hook on the pipe it is given and exits at once, without waiting.
SCRIPT = ("import subprocess, sys; fd = int(sys.argv[1]); "
          "subprocess.Popen(sys.argv[2:], stdin=fd, pass_fds=[fd], "
          "stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)")


def orphaned_session_start(env: Env, wt: Path, session: str) -> None:
    """A SessionStart hook whose parent has exited (and been reaped) before the hook reads its
    payload: the hook's parent is then pid 1, which names no agent."""
    [base] = [p for p in load_payloads("claude-code/session-lifecycle.ndjson")
              if p["hook_event_name"] == "SessionStart"]
    payload = {**base, "session_id": session, "cwd": str(wt)}
    r, w = os.pipe()
    try:
        parent = subprocess.run([sys.executable, "-c", SCRIPT, str(r), *HOOK], pass_fds=[r],
                                env=env.environ(), timeout=60)
        assert parent.returncode == 0
    finally:
        os.close(r)
    os.write(w, json.dumps(payload).encode())
    os.close(w)


def attempt_row(env: Env, run_id: str) -> dict | None:
    rows = env.ledger_query("SELECT * FROM attempts WHERE run_id = ? ORDER BY attempt", (run_id,))
    return rows[-1] if rows else None


def wait_for(env: Env, run_id: str, state: str, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = attempt_row(env, run_id)
        if row is not None and row["state"] == state:
            return row
        time.sleep(0.2)
    raise AssertionError(f"{run_id} is not {state}: {attempt_row(env, run_id)}")


def test_an_ownerless_session_attempt_ends_after_the_idle_period(
        sd_env: Env, make_daemon: MakeDaemon, tmp_path: Path) -> None:
    registered_wt = make_git_worktree(tmp_path / "registered")
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "a.txt").write_text("a\n")
    daemon = make_daemon(sd_env, {**QUIET_WATCHER, "SNAPSHOTD_OWNERLESS_IDLE_S": "1"})
    with daemon.client() as c:
        c.attempt_begin(run_id="runner", node_id="n1", cwd=str(registered_wt))
    orphaned_session_start(sd_env, wt, "orphan")
    started = wait_for(sd_env, "claude-orphan", "active")
    assert started["owner_pid"] is None
    ended = wait_for(sd_env, "claude-orphan", "abandoned")
    assert ended["ended_at"] is not None and ended["final_commit"] is not None
    # Begun by a runner, whose `attempt end` ends it: never ended for being quiet.
    assert attempt_row(sd_env, "runner")["state"] == "active"
    # The session goes on (a later tool call) in a new attempt, never fenced.
    proc = run_hook(sd_env, claude_payload(wt, "toolu_1", session_id="orphan"),
                    CLAUDE_PROJECT_DIR=str(wt))
    assert (proc.returncode, proc.stderr) == (0, b"")
    row = attempt_row(sd_env, "claude-orphan")
    assert (row["attempt"], row["state"]) == (2, "active")
    assert [g["reason"] for g in sd_env.read_gaps()] == []
