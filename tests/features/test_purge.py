"""``snapshotd purge RUN PATH``: a path gone from every checkpoint, the store still sound.

A real daemon captures an attempt whose second checkpoint adds a file with a (made-up) key and
later ones change other files; the purge goes through the real CLI and daemon. The git CLI is
the oracle: no tree of the attempt's chain holds the path, every other file of every checkpoint
is as it was, the ledger rows name the new commits, and ``git fsck --strict`` is clean.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.conftest import Daemon, Env, git

KEY = "sk-proj-Qm3xT8vR2kLp9Wz4Yb7Nc1Hd6Fg0Js5A"
RUN = "purge-run"


def files_of(store: Path, commit: str) -> dict[str, str]:
    out = git(store, "ls-tree", "-r", commit)
    return {line.split("\t")[1]: line.split()[2] for line in out.splitlines() if line}


def test_purge_takes_a_path_out_of_every_checkpoint(sd_env: Env, daemon: Daemon,
                                                    tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    (wt / "conf").mkdir(parents=True)
    (wt / "a.txt").write_text("a0\n")
    with daemon.client() as c:
        replies = [c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="p0")]
        (wt / "conf" / "keys.txt").write_text(f"key = {KEY}\n")
        replies.append(c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="p1"))
        for i in (2, 3):
            (wt / "a.txt").write_text(f"a{i}\n")
            replies.append(c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id=f"p{i}"))
    store = sd_env.home / "store.git"
    before = [files_of(store, r["commit"]) for r in replies]
    assert all("conf/keys.txt" in f for f in before[1:])
    (wt / "conf" / "keys.txt").unlink()  # the user removed it from the worktree as well

    proc = subprocess.run([sys.executable, "-m", "snapshotd", "purge", RUN, "conf/keys.txt"],
                          env=sd_env.environ(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "purged conf/keys.txt from 3 checkpoint(s)" in proc.stdout

    rows = sorted(sd_env.ledger_query("SELECT seq, commit_id, tree, parent FROM checkpoints"
                                      " WHERE run_id=?", (RUN,)), key=lambda r: r["seq"])
    assert rows[0]["commit_id"] == replies[0]["commit"]  # before the path: untouched
    tip = git(store, "rev-parse", f"refs/snapshotd/runs/{RUN}/n/0/1").strip()
    assert tip == rows[-1]["commit_id"] != replies[-1]["commit"]
    chain = git(store, "rev-list", "--first-parent", tip).split()
    assert chain == [r["commit_id"] for r in reversed(rows)]
    for row, old in zip(rows, before, strict=True):
        now = files_of(store, row["commit_id"])
        assert "conf/keys.txt" not in now and not any(p.startswith("conf/") for p in now)
        assert now == {p: b for p, b in old.items() if p != "conf/keys.txt"}
        assert git(store, "rev-parse", f"{row['commit_id']}^{{tree}}").strip() == row["tree"]
        if row["seq"]:
            assert row["parent"] == rows[row["seq"] - 1]["commit_id"]
    subprocess.run(["git", "--git-dir", str(store), "fsck", "--strict", "--no-dangling"],
                   check=True, capture_output=True)
    # The attempt goes on from the rewritten chain.
    (wt / "a.txt").write_text("a4\n")
    with daemon.client() as c:
        after = c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="p4")
    assert git(store, "rev-parse", f"{after['commit']}^").strip() == tip
    assert "conf/keys.txt" not in files_of(store, after["commit"])


def test_purge_refuses_paths_outside_the_worktree(sd_env: Env, daemon: Daemon) -> None:
    for bad in ("../etc/passwd", "/etc/passwd"):
        proc = subprocess.run([sys.executable, "-m", "snapshotd", "purge", RUN, bad],
                              env=sd_env.environ(), capture_output=True, text=True, timeout=60)
        assert proc.returncode == 1 and "relative" in proc.stderr, proc.stderr
