"""Tier-1 capture after one changed file on a generated worktree.

Measures, on the same tree in the same run:
- ``hook_ms``: ``snapshot-hook`` end to end (process start to exit), median;
- ``daemon_ms``: the daemon's own capture time (``elapsed_ms`` of the reply), median;
- ``peer_ms``: the git-CLI private-index peer (add -A, write-tree, commit-tree, update-ref).

Usage: ``python -m bench.capture [--files 10000] [--rounds 15]``; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import DaemonProc, GitPeer, make_tree, median, write_payload

# What hooks/hooks.json runs: the environment's installed ``snapshot-hook`` script.
HOOK = [str(Path(sys.executable).parent / "snapshot-hook")]


def run(files: int, rounds: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="sdbench", dir="/tmp"))
    wt = make_tree(work / "wt", files)
    daemon = DaemonProc()
    try:
        peer = GitPeer(wt, work / "peer.git")
        started = time.perf_counter()
        with daemon.client() as c:
            first = c.snapshot(str(wt), run_id="bench", node_id="n")
        first_ms = (time.perf_counter() - started) * 1000
        peer_first = peer.capture()
        hook_ms, daemon_ms, peer_ms, nochange_ms = [], [], [], []
        target = next(wt.rglob("f1.txt"))
        for i in range(rounds):
            target.write_text(f"round {i}\n")
            payload = write_payload("bench", wt, target, f"toolu_bench_{i}")
            env = dict(daemon.env, SNAPSHOTD_RUN_ID="bench", SNAPSHOTD_NODE_ID="n")
            t0 = time.perf_counter()
            subprocess.run(HOOK, input=payload, env=env, check=True)
            hook_ms.append((time.perf_counter() - t0) * 1000)
            target.write_text(f"round {i} peer\n")
            with daemon.client() as c:
                daemon_ms.append(c.snapshot(str(wt), run_id="bench", node_id="n")["elapsed_ms"])
                nochange_ms.append(c.snapshot(str(wt), run_id="bench", node_id="n")["elapsed_ms"])
            target.write_text(f"round {i} peer again\n")
            peer_ms.append(peer.capture())
        return {
            "bench": "capture", "files": files, "rounds": rounds,
            "first_capture_ms": round(first_ms, 1), "first_seq": first["seq"],
            "peer_first_capture_ms": round(peer_first, 1),
            "hook_end_to_end_ms_median": median(hook_ms),
            "daemon_capture_1_change_ms_median": median(daemon_ms),
            "daemon_capture_no_change_ms_median": median(nochange_ms),
            "peer_capture_1_change_ms_median": median(peer_ms),
            "ratio_daemon_to_peer": round(median(daemon_ms) / median(peer_ms), 3),
        }
    finally:
        daemon.stop()
        subprocess.run(["rm", "-rf", str(work)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    print(json.dumps(run(args.files, args.rounds), indent=2))


if __name__ == "__main__":
    main()
