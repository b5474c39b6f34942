"""Revert budget (docs/performance.md): ``revert --tool-call`` of a one-file tool call on a
``--files`` tree (default 100,000), through a real daemon.

Each round: an agent's tool call edits one file (a hook-style capture with a tool_use_id), then
that tool call is reverted (``revert`` op, ``force``: the attempt is still active). Measured:
the daemon's ``elapsed_ms`` for the revert (the safety checkpoint's capture, the per-path
merge, the confined write, the capture of the result and the event), and the client's wall
time; the file is checked to be back. Usage: ``python -m bench.revert [--files 100000]
[--rounds 5] [--dir /tmp]``; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import time

from bench.common import bench_daemon, make_tree, median


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--dir", default="/tmp")
    args = parser.parse_args()
    with bench_daemon("sdbench-revert", args.dir) as (base, daemon):
        wt = make_tree(base / "wt", args.files)
        ours, wall, counts = [], [], []
        with daemon.client() as c:
            c.attempt_begin("bench", "revert", str(wt))
            t0 = time.perf_counter()
            c.snapshot(str(wt), run_id="bench", node_id="revert")
            first_ms = (time.perf_counter() - t0) * 1000
            for i in range(args.rounds):
                victim = wt / f"d{(i * 37) % (args.files // 100):04d}" / "s0" / "f7.txt"
                if not victim.exists():
                    victim = next(p for p in sorted((wt / "d0000").rglob("*.txt")))
                original = victim.read_bytes()
                victim.write_bytes(original + f"edit of round {i}\n".encode())
                c.snapshot(str(wt), run_id="bench", node_id="revert", tool_use_id=f"t{i}",
                           label=f"Edit {victim.name}")
                t0 = time.perf_counter()
                r = c.request("revert", run_id="bench", node_id="revert", tool_call=f"t{i}",
                              force=True)
                wall.append((time.perf_counter() - t0) * 1000)
                assert r["applied"] and victim.read_bytes() == original, r
                ours.append(r["elapsed_ms"])
                counts.append(r["counts"])
            c.attempt_end("bench", "revert")
    print(json.dumps({"bench": "revert", "files": args.files, "rounds": args.rounds,
                      "first_capture_ms": round(first_ms, 1),
                      "daemon_revert_1_file_ms_median": median(ours),
                      "daemon_revert_ms_all": [round(x, 1) for x in ours],
                      "client_wall_ms_median": median(wall), "counts": counts[0]}, indent=2))


if __name__ == "__main__":
    main()
