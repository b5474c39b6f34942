"""Two daemons (two homes, as two hosts) on one PostgreSQL ledger, the real hook on each.

An attempt belongs to the daemon that created it: its worktree path names a directory on that
host, and its checkpoints are in that host's store. A hook on the other host naming it
(``SNAPSHOTD_RUN_ID``) from a directory at the same path used to be captured there and
acknowledged, into the first host's attempt: the first host's own tool calls then found their
work "already recorded" by the other host's files. Now the other host refuses with an
``outside-worktree`` gap naming the owning host, and never attributes its own hooks (zero-setup)
to the first host's attempts; the first host carries on with its own chain."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import (
    QUIET_WATCHER,
    Env,
    MakeDaemon,
    claude_payload,
    make_git_worktree,
    run_hook,
)

IDS = {"SNAPSHOTD_RUN_ID": "r1", "SNAPSHOTD_NODE_ID": "n1"}


def hook(env: Env, wt: Path, tool_use_id: str, **extra: str) -> None:
    (wt / f"{tool_use_id}.txt").write_text(f"{tool_use_id}\n")
    proc = run_hook(env, claude_payload(wt, tool_use_id, file_path=f"{tool_use_id}.txt",
                                        session_id="sess"), **extra)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")


def test_a_hook_on_another_host_never_captures_into_this_hosts_attempt(
        pg_url: str, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    host_a, host_b = Env(tmp_path / "a", pg_url), Env(tmp_path / "b", pg_url)
    make_daemon(host_a, QUIET_WATCHER)
    make_daemon(host_b, QUIET_WATCHER)
    wt = make_git_worktree(tmp_path / "wt")  # the same path on both hosts
    hook(host_a, wt, "toolu_a1", **IDS)
    hook(host_b, wt, "toolu_b1", **IDS)
    hook(host_b, wt, "toolu_b2", CLAUDE_PROJECT_DIR=str(wt))  # zero-setup on host B
    hook(host_a, wt, "toolu_a2", **IDS)
    rows = host_a.ledger_query(
        "SELECT run_id, seq, tool_use_id FROM checkpoints ORDER BY run_id, seq")
    r1 = [(r["seq"], r["tool_use_id"]) for r in rows if r["run_id"] == "r1"]
    assert r1 == [(0, "toolu_a1"), (1, "toolu_a2")]
    assert [r["tool_use_id"] for r in rows if r["run_id"] == "claude-sess"] == ["toolu_b2"]
    assert host_a.read_gaps() == []
    [gap] = host_b.read_gaps()
    assert (gap["reason"], gap["tool_use_id"], gap["run_id"]) == (
        "outside-worktree", "toolu_b1", "r1")
    assert "another host" in gap["detail"]
