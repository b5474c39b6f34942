"""``snapshotd du`` against the git CLI: its store figures are ``git count-objects -v``, each
run's the disk usage git reports for what its refs reach, and the largest path is named."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, make_git_worktree

NO_MAINTENANCE = {"SNAPSHOTD_MAINTENANCE_INTERVAL_S": "0",
                  "SNAPSHOTD_MAINTENANCE_LOOSE_OBJECTS": "0", **QUIET_WATCHER}


def _git(env: Env, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(["git", "--git-dir", str(env.home / "store.git"), *args],
                          capture_output=True, text=True, check=True, input=stdin).stdout


def _du(env: Env, *args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "du", "--json", *args],
                          env=env.environ(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_du_matches_count_objects_and_the_runs_disk_usage(sd_env: Env, make_daemon: MakeDaemon,
                                                          tmp_path: Path) -> None:
    daemon = make_daemon(sd_env, NO_MAINTENANCE)
    with daemon.client() as c:
        for run, size in (("small", 1_000), ("big", 300_000)):
            wt = make_git_worktree(tmp_path / run)
            c.attempt_begin(run, "n", str(wt))
            for i in range(3):
                (wt / "data.bin").write_bytes(os.urandom(size))
                (wt / f"note{i}.txt").write_text(f"{run} {i}\n")
                c.snapshot(str(wt), run_id=run, node_id="n")
    _git(sd_env, "repack", "-q")  # some packed, some loose: both are counted
    with daemon.client() as c:
        (tmp_path / "small" / "late.txt").write_text("loose\n")
        c.snapshot(str(tmp_path / "small"), run_id="small", node_id="n")
    report = _du(sd_env)
    counts = dict(line.split(": ") for line in _git(sd_env, "count-objects", "-v").splitlines())
    store = report["store"]
    assert store["loose_objects"] == int(counts["count"]) > 0
    assert store["loose_bytes"] == int(counts["size"]) * 1024
    assert store["packed_objects"] == int(counts["in-pack"]) > 0
    assert store["packed_bytes"] == int(counts["size-pack"]) * 1024
    assert store["bytes"] == (int(counts["size"]) + int(counts["size-pack"])
                              + int(counts["size-garbage"])) * 1024
    runs = {r["run_id"]: r for r in report["runs"]}
    for run in ("small", "big"):
        refs = _git(sd_env, "for-each-ref", "--format=%(refname)",
                    f"refs/snapshotd/runs/{run}/").split()
        usage = int(_git(sd_env, "rev-list", "--objects", "--disk-usage", "--stdin",
                         stdin="\n".join(refs) + "\n"))
        assert runs[run]["bytes"] == usage
        assert 0 < runs[run]["unique_bytes"] <= usage
        assert runs[run]["checkpoints"] == (4 if run == "small" else 3)
    assert runs["big"]["bytes"] > 3 * 300_000 > runs["small"]["bytes"]
    assert sum(w["bytes"] for w in report["worktrees"]) == sum(r["bytes"] for r in runs.values())
    assert report["largest_paths"][0] == {"path": "data.bin", "bytes": 300_000}
    reachable = int(_git(sd_env, "rev-list", "--objects", "--disk-usage", "--all"))
    assert report["unreachable_bytes"] == max(0, store["bytes"] - reachable)
    one = _du(sd_env, "big")
    assert [r["run_id"] for r in one["runs"]] == ["big"]
    assert one["runs"][0]["bytes"] == runs["big"]["bytes"]
    text = subprocess.run([sys.executable, "-m", "snapshotd", "du"], env=sd_env.environ(),
                          capture_output=True, text=True, timeout=120)
    assert text.returncode == 0 and "run big:" in text.stdout and "data.bin" in text.stdout
    missing = subprocess.run([sys.executable, "-m", "snapshotd", "du", "nosuch"],
                             env=sd_env.environ(), capture_output=True, text=True, timeout=120)
    assert missing.returncode != 0 and "unknown run" in missing.stderr
