"""snapshotd's own events in the ledger (issue 43): a restore and a purge are each listed as a
labelled event at the seq that holds the state after them, even when every checkpoint they took
deduplicated onto an unlabelled tier-2 one. A real daemon, the real CLI, a real git worktree."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.conftest import Daemon, Env, make_git_worktree


def cli(env: Env, *args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def checkpoints(env: Env, run_id: str) -> list[dict]:
    return json.loads(cli(env, "snapshots", run_id, "--json").stdout)["checkpoints"]


def events_at(cp: dict) -> list[dict]:
    return [t for t in cp.get("tool_calls") or [] if t.get("kind")]


def table_line(env: Env, run_id: str, seq: int) -> str:
    """The table's row of checkpoint ``seq`` and the lines listed under it."""
    lines = cli(env, "snapshots", run_id).stdout.splitlines()
    start = next(n for n, line in enumerate(lines) if line.split()[:1] == [str(seq)])
    end = next((n for n in range(start + 1, len(lines)) if not lines[n].startswith(" ")),
               len(lines))
    return "\n".join(lines[start:end])


def test_a_restore_whose_checkpoints_deduplicate_is_still_listed(sd_env: Env, daemon: Daemon,
                                                                 tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("one\n")
    with daemon.client() as c:
        c.snapshot(str(wt), run_id="r", node_id="n", label="Write a.txt", tool_use_id="toolu_0")
        (wt / "a.txt").write_text("two\n")
        c.flush(str(wt))  # the watcher captures the change: seq 1, tier 2, no label
    rows = checkpoints(sd_env, "r")
    assert [(r["seq"], r["tier"], r["source"], r["label"]) for r in rows][1] == (
        1, 2, "watch", None)

    # Restore the state the watcher already holds: the safety checkpoint and the restored state
    # both deduplicate onto seq 1, and nothing new is numbered.
    result = json.loads(cli(sd_env, "restore", "r", "--node", "n", "--seq", "1", "--force",
                            "--json").stdout)
    assert result["safety"]["seq"] == 1 and result["safety"]["deduped"]
    assert result["event"]["seq"] == 1
    rows = checkpoints(sd_env, "r")
    assert len(rows) == 2
    [event] = events_at(rows[1])
    assert event["kind"] == "restore" and event["id"].startswith("restore-")
    assert event["label"] == "restore to seq 1 (safety checkpoint seq 1)"
    assert event["id"] == result["event"]["id"]
    assert "restore to seq 1 (safety checkpoint seq 1)" in table_line(sd_env, "r", 1)

    # Restore seq 0: the safety checkpoint deduplicates onto seq 1 again; the restored state is
    # a checkpoint of its own, where the event is listed.
    result = json.loads(cli(sd_env, "restore", "r", "--node", "n", "--seq", "0", "--force",
                            "--json").stdout)
    assert (wt / "a.txt").read_text() == "one\n"
    rows = checkpoints(sd_env, "r")
    assert [r["seq"] for r in rows] == [0, 1, 2] and rows[2]["tree"] == rows[0]["tree"]
    [second] = events_at(rows[2])
    assert second["label"] == "restore to seq 0 (safety checkpoint seq 1)"
    assert second["id"] != event["id"] and result["event"]["seq"] == 2
    assert "restore to seq 0 (safety checkpoint seq 1)" in table_line(sd_env, "r", 2)
    # The ledger holds both events, each once.
    kinds = sd_env.ledger_query("SELECT kind, seq, label FROM tool_calls WHERE kind IS NOT NULL"
                                " ORDER BY created_at")
    assert [(k["kind"], k["seq"]) for k in kinds] == [("restore", 1), ("restore", 2)]


def test_a_purge_is_listed_as_an_event_at_the_attempts_newest_seq(sd_env: Env, daemon: Daemon,
                                                                 tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    with daemon.client() as c:
        c.snapshot(str(wt), run_id="p", node_id="n", tool_use_id="p0")
        (wt / "key.txt").write_text("not a real key\n")
        c.snapshot(str(wt), run_id="p", node_id="n", tool_use_id="p1")
        (wt / "a.txt").write_text("b\n")
        c.snapshot(str(wt), run_id="p", node_id="n", tool_use_id="p2")
    cli(sd_env, "purge", "p", "key.txt")
    rows = checkpoints(sd_env, "p")
    assert [events_at(r) for r in rows[:2]] == [[], []]
    [event] = events_at(rows[2])
    assert event["kind"] == "purge" and event["label"] == "purge key.txt"
    assert event["id"].startswith("purge-")
    assert "purge key.txt" in table_line(sd_env, "p", 2)
