"""A gc killed mid-prune is finished at the next start, whatever the watcher captures meanwhile.

A real daemon, armed with ``SNAPSHOTD_CRASH_AT`` at one of gc's crash points (after the
journal, or after the ledger transaction with the ref not yet moved), dies while ``snapshotd gc
--keep-last 1`` prunes an ended attempt of a worktree whose next attempt is active and watched,
with a settle window open (a write the watcher has seen, not yet captured). The next start
captures that write at once (the window's crash marker) while gc's journal is completed: after
it, every kept checkpoint row's commit exists and is on its attempt's first-parent chain, the
pruned seqs are marked, each row's tree is its commit's, and ``git fsck --strict`` is clean.
Also with a gc run on the home without a daemon between the crash and the start (a prune
grace of 0 s): it finishes the journal first, so the rewritten chain is never reclaimed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, git
from tests.support.helpers import open_markers, wait_for

RUN = "gc-order"
CRASH_EXIT_STATUS = 86


def rows_of(env: Env, attempt: int) -> list[dict]:
    return sorted(env.ledger_query(
        "SELECT c.seq, c.commit_id, c.tree, c.pruned_at FROM checkpoints c JOIN attempts a"
        " ON c.attempt_pk = a.pk WHERE a.run_id=? AND a.node_id='n' AND a.attempt=?",
        (RUN, attempt)), key=lambda r: r["seq"])


def assert_whole(env: Env, attempt: int) -> list[dict]:
    """The attempt's kept rows are exactly its ref's first-parent chain; its rows."""
    store = env.home / "store.git"
    rows = rows_of(env, attempt)
    kept = [r for r in rows if r["pruned_at"] is None]
    tip = git(store, "rev-parse", "--verify", f"refs/snapshotd/runs/{RUN}/n/0/{attempt}").strip()
    chain = git(store, "rev-list", "--first-parent", tip).split()
    assert chain == [r["commit_id"] for r in reversed(kept)], attempt
    for row in kept:
        assert git(store, "rev-parse", f"{row['commit_id']}^{{tree}}").strip() == row["tree"]
    return rows


@pytest.mark.parametrize(("point", "offline_gc"), [("gc-after-journal", False),
                                                   ("gc-after-ledger", False),
                                                   ("gc-after-ledger", True)])
def test_a_killed_gc_is_finished_beside_a_start_up_capture(
        sd_env: Env, make_daemon: MakeDaemon, tmp_path: Path, point: str,
        offline_gc: bool) -> None:
    daemon = make_daemon(sd_env, dict(QUIET_WATCHER, SNAPSHOTD_CRASH_AT=point))
    wt = tmp_path / "wt"
    wt.mkdir()
    with daemon.client() as c:
        c.attempt_begin(RUN, "n", str(wt), attempt=1)
        for i in range(4):
            (wt / "a.txt").write_text(f"a{i}\n")
            c.snapshot(str(wt), run_id=RUN, node_id="n", attempt=1, tool_use_id=f"t{i}")
        c.attempt_begin(RUN, "n", str(wt), attempt=2)  # supersedes attempt 1: gc may prune it
        (wt / "b.txt").write_text("b0\n")
        c.snapshot(str(wt), run_id=RUN, node_id="n", attempt=2, tool_use_id="u0")
    (wt / "b.txt").write_text("b1: seen by the watcher, not yet captured\n")
    wait_for(lambda: open_markers(sd_env.home), what="a settle window's marker")

    crashed = subprocess.run([sys.executable, "-m", "snapshotd", "gc", "--keep-last", "1"],
                             env=sd_env.environ(), capture_output=True, text=True, timeout=120)
    assert crashed.returncode != 0
    assert daemon.proc is not None and daemon.proc.wait(timeout=30) == CRASH_EXIT_STATUS
    assert (sd_env.home / "gc-journal.json").exists()
    if offline_gc:
        # A gc with no daemon (deleting unreachable objects at once) finishes the journal
        # before it reclaims anything: the rewritten chain, named by no ref yet, survives.
        offline = subprocess.run([sys.executable, "-m", "snapshotd", "gc", "--keep-last", "1000",
                                  "--prune-grace", "0s"], env=sd_env.environ(),
                                 capture_output=True, text=True, timeout=120)
        assert offline.returncode == 0, offline.stderr
        assert not (sd_env.home / "gc-journal.json").exists()
        assert_whole(sd_env, 1)

    make_daemon(sd_env, QUIET_WATCHER)
    wait_for(lambda: len(rows_of(sd_env, 2)) == 2, what="the start-up capture of attempt 2")
    assert not (sd_env.home / "gc-journal.json").exists()
    subprocess.run(["git", "--git-dir", str(sd_env.home / "store.git"), "fsck", "--strict",
                    "--no-dangling"], check=True, capture_output=True)
    pruned = assert_whole(sd_env, 1)
    assert [r["seq"] for r in pruned if r["pruned_at"] is not None] == [0, 1, 2]
    second = assert_whole(sd_env, 2)
    store = sd_env.home / "store.git"
    assert git(store, "show", f"{second[-1]['commit_id']}:b.txt").startswith("b1")
