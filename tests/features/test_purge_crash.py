"""A purge killed mid-way is finished (or was never begun) after the next start.

A real daemon, armed with ``SNAPSHOTD_CRASH_AT`` at one of the purge's crash points, dies
abruptly (``os._exit``, as ``kill -9``) while ``snapshotd purge RUN PATH`` runs through the real
CLI: after the new commits are written (no journal yet), after the journal, or after the ledger
transaction (the ref not yet moved). A daemon started again on the same home must leave every
attempt whole: its ref resolves, the ledger's rows are exactly the ref's first-parent chain,
each row's tree is its commit's, ``git fsck --strict`` is clean, and the path is in every
checkpoint that held it (crash before the journal: a second purge then takes it out) or in none.
After the purge is run again, nothing keeps the purged file's blob (no ref, no stat cache), so
``snapshotd gc`` deletes it from the store.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, git

KEY = "sk-proj-Qm3xT8vR2kLp9Wz4Yb7Nc1Hd6Fg0Js5A"
RUN = "purge-crash"
SECRET = "conf/keys.txt"
CRASH_EXIT_STATUS = 86


def purge(env: Env) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snapshotd", "purge", RUN, SECRET],
                          env=env.environ(), capture_output=True, text=True, timeout=120)


def gc(env: Env) -> subprocess.CompletedProcess[str]:
    """A gc that drops no checkpoint and deletes every unreachable object at once."""
    return subprocess.run([sys.executable, "-m", "snapshotd", "gc", "--keep-last", "1000",
                           "--prune-grace", "0s"],
                          env=env.environ(), capture_output=True, text=True, timeout=120)


def files_of(store: Path, commit: str) -> dict[str, str]:
    out = git(store, "ls-tree", "-r", commit)
    return {line.split("\t")[1]: line.split()[2] for line in out.splitlines() if line}


def reachable_objects(store: Path) -> set[str]:
    out = git(store, "rev-list", "--objects", "--all")
    return {line.split()[0] for line in out.splitlines() if line}


def assert_whole(env: Env, nodes: list[str]) -> list[dict[str, dict[str, str]]]:
    """Every attempt of the run is whole; the files of each checkpoint, per node."""
    store = env.home / "store.git"
    subprocess.run(["git", "--git-dir", str(store), "fsck", "--strict", "--no-dangling"],
                   check=True, capture_output=True)
    chains = []
    for node in nodes:
        rows = sorted(env.ledger_query(
            "SELECT c.seq, c.commit_id, c.tree, c.parent FROM checkpoints c JOIN attempts a"
            " ON c.attempt_pk = a.pk WHERE a.run_id=? AND a.node_id=?", (RUN, node)),
            key=lambda r: r["seq"])
        tip = git(store, "rev-parse", "--verify", f"refs/snapshotd/runs/{RUN}/{node}/0/1").strip()
        chain = git(store, "rev-list", "--first-parent", tip).split()
        assert chain == [r["commit_id"] for r in reversed(rows)], node
        for row in rows:
            assert git(store, "rev-parse", f"{row['commit_id']}^{{tree}}").strip() == row["tree"]
            if row["seq"]:
                assert row["parent"] == rows[row["seq"] - 1]["commit_id"]
        chains.append({r["commit_id"]: files_of(store, r["commit_id"]) for r in rows})
    return chains


@pytest.mark.parametrize("point", ["purge-after-commits", "purge-after-journal",
                                   "purge-after-ledger"])
def test_a_purge_killed_midway_is_finished_or_undone(sd_env: Env, make_daemon: MakeDaemon,
                                                     tmp_path: Path, point: str) -> None:
    nodes = ["n1", "n2"]
    daemon = make_daemon(sd_env, dict(QUIET_WATCHER, SNAPSHOTD_CRASH_AT=point))
    for node in nodes:
        wt = tmp_path / node
        (wt / "conf").mkdir(parents=True)
        (wt / "a.txt").write_text("a0\n")
        with daemon.client() as c:
            c.snapshot(str(wt), run_id=RUN, node_id=node, tool_use_id=f"{node}-0")
            (wt / SECRET).write_text(f"key = {KEY} for {node}\n")
            for i in (1, 2, 3):
                (wt / "a.txt").write_text(f"a{i}\n")
                c.snapshot(str(wt), run_id=RUN, node_id=node, tool_use_id=f"{node}-{i}")
    store = sd_env.home / "store.git"
    before = assert_whole(sd_env, nodes)
    blobs = {files[SECRET] for chain in before for files in chain.values() if SECRET in files}
    assert len(blobs) == 2

    # A gc names every stat cache with a keep ref: those must not keep the key either.
    assert gc(sd_env).returncode == 0
    assert git(store, "for-each-ref", "refs/snapshotd/cache/").count("\n") == len(nodes)

    crashed = purge(sd_env)
    assert crashed.returncode != 0
    assert daemon.proc is not None and daemon.proc.wait(timeout=30) == CRASH_EXIT_STATUS

    make_daemon(sd_env, QUIET_WATCHER)
    after = assert_whole(sd_env, nodes)
    # The first attempt was being purged when the daemon died: all of its chain or none.
    holds = [SECRET in files for files in after[0].values()]
    if point == "purge-after-commits":
        assert after[0] == before[0] and holds == [False, True, True, True]
    else:
        assert not any(holds)
    # The second attempt was not reached: a purge run again finishes the job.
    assert after[1] == before[1]
    for node in nodes:
        (tmp_path / node / SECRET).unlink()  # the user removed it from the worktree as well
    again = purge(sd_env)
    assert again.returncode == 0, again.stderr
    final = assert_whole(sd_env, nodes)
    for chain, old in zip(final, before, strict=True):
        assert [{p: b for p, b in files.items() if p != SECRET} for files in old.values()] \
            == list(chain.values())
    assert not blobs & reachable_objects(store)
    # Nothing vouches for the key's blob any more (no stat cache either): gc deletes it.
    reclaimed = gc(sd_env)
    assert reclaimed.returncode == 0, reclaimed.stderr
    for blob in blobs:
        present = subprocess.run(["git", "--git-dir", str(store), "cat-file", "-e", blob],
                                 capture_output=True)
        assert present.returncode != 0, f"the purged blob {blob} is still in the store"


@pytest.mark.parametrize("point", ["purge-after-journal", "purge-after-ledger"])
def test_a_gc_and_a_capture_after_a_killed_purge_break_nothing(
        sd_env: Env, make_daemon: MakeDaemon, tmp_path: Path, point: str) -> None:
    """Killed with the journal written (the ref not moved yet), while a change the watcher saw
    waits to be captured: a gc run with no daemon (no start-up has finished the purge yet)
    must not delete the new chain, and the change the next start captures (on the old chain,
    before the purge is finished) must end up on the purged chain, not orphaned."""
    daemon = make_daemon(sd_env, dict(QUIET_WATCHER, SNAPSHOTD_CRASH_AT=point))
    wt = tmp_path / "n1"
    (wt / "conf").mkdir(parents=True)
    (wt / "a.txt").write_text("a0\n")
    (wt / SECRET).write_text(f"key = {KEY}\n")
    with daemon.client() as c:
        for i in range(3):
            (wt / "a.txt").write_text(f"a{i}\n")
            c.snapshot(str(wt), run_id=RUN, node_id="n1", tool_use_id=f"t{i}")
    (wt / SECRET).unlink()
    assert purge(sd_env).returncode != 0
    assert daemon.proc is not None and daemon.proc.wait(timeout=30) == CRASH_EXIT_STATUS

    reclaimed = gc(sd_env)  # no daemon answers: gc runs on the home directly
    assert reclaimed.returncode == 0, reclaimed.stderr
    make_daemon(sd_env, QUIET_WATCHER)
    (chain,) = assert_whole(sd_env, ["n1"])
    assert len(chain) >= 3  # and the start-up capture of the pending change, if it came first
    assert all(SECRET not in files for files in chain.values())
