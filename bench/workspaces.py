"""Whole workspaces: what capturing nested repositories whole costs, beside one repository of the
same files.

Builds, in one run, a plain folder holding ``--repos`` committed repositories of
``--files / --repos`` files each (the last one nested inside the first), and one repository of
the same ``--files`` files (``flat``). For each, with the watcher on (changes come in through
the fast path):
- ``first_capture_ms``: the daemon's first capture (each nested repository seeded from its own
  index);
- ``capture_1_change_ms_median``: daemon-side capture after one changed file (inside a nested
  repository for the workspace);
- ``full_scan_1_change_ms_median``: the same with a watch budget of one inotify watch (the
  watch fails, so every capture is a full stat scan);
and, for ``flat`` only, the git-CLI private-index peer after the same change
(``peer_capture_1_change_ms_median``).

Usage: ``python -m bench.workspaces [--files 20000] [--repos 4] [--rounds 9]``; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import DaemonProc, GitPeer, make_tree, median

QUIET = {"SNAPSHOTD_SETTLE_MS": "600000", "SNAPSHOTD_MAX_WAIT_MS": "600000"}


def build(work: Path, files: int, repos: int) -> tuple[Path, Path, Path, Path]:
    """(workspace, the file changed in it, flat repository, the file changed in it)."""
    ws = work / "ws"
    ws.mkdir(parents=True)
    per = files // repos
    for i in range(repos - 1):
        make_tree(ws / f"repo{i}", per)
    make_tree(ws / "repo0" / "vendor" / "inner", per)  # nested inside repo0
    flat = make_tree(work / "flat", per * repos)
    return ws, next((ws / "repo0" / "vendor" / "inner").rglob("f1.txt")), flat, \
        next(flat.rglob("f1.txt"))


def measure(root: Path, target: Path, rounds: int, *, watch: bool) -> dict:
    daemon = DaemonProc(QUIET if watch else {**QUIET, "SNAPSHOTD_MAX_WATCHES": "1"})
    try:
        with daemon.client() as c:
            c.attempt_begin("bench", "n", str(root))
            t0 = time.perf_counter()
            first = c.snapshot(str(root), run_id="bench", node_id="n")
            first_ms = (time.perf_counter() - t0) * 1000
            times, scans = [], set()
            for i in range(rounds):
                target.write_text(f"round {i} {watch}\n")
                reply = c.snapshot(str(root), run_id="bench", node_id="n")
                times.append(reply["elapsed_ms"])
                scans.add(reply.get("scan"))
        files = subprocess.run(["git", "--git-dir", str(daemon.home / "store.git"), "ls-tree",
                                "-r", "--name-only", first["commit"]], capture_output=True,
                               check=True, text=True).stdout.count("\n")
        return {"first_capture_ms": round(first_ms, 1), "files_in_checkpoint": files,
                "capture_1_change_ms_median": median(times), "scans": sorted(map(str, scans))}
    finally:
        daemon.stop()


def run(files: int, repos: int, rounds: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="sdbench-ws", dir="/tmp"))
    try:
        ws, ws_target, flat, flat_target = build(work, files, repos)
        out: dict = {"bench": "workspaces", "files": files, "repos": repos, "rounds": rounds,
                     "loadavg_1m": round(os.getloadavg()[0], 2)}
        for name, root, target in (("workspace", ws, ws_target), ("flat", flat, flat_target)):
            fast = measure(root, target, rounds, watch=True)
            full = measure(root, target, rounds, watch=False)
            fast["full_scan_1_change_ms_median"] = full["capture_1_change_ms_median"]
            fast["full_scans"] = full["scans"]
            out[name] = fast
        peer = GitPeer(flat, work / "peer.git")
        peer.capture()
        times = []
        for i in range(rounds):
            flat_target.write_text(f"peer round {i}\n")
            times.append(peer.capture())
        out["flat"]["peer_capture_1_change_ms_median"] = median(times)
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--repos", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args()
    print(json.dumps(run(args.files, args.repos, args.rounds), indent=2))


if __name__ == "__main__":
    main()
