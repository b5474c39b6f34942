"""Load: worktrees × hooks fired in bursts of concurrent hooks.

Every hook is a real ``snapshot-hook`` process with a Claude Code-shaped payload; each edits its
worktree first. Reports hook wall-time p50/p99, daemon-side capture p50/p99 (from ``status``),
gaps and errors. Usage: ``python -m bench.load [--worktrees 8] [--hooks 100] [--burst 16]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import DaemonProc, make_tree

HOOK = [sys.executable, "-c", "from snapshotd_client.hook import main; main()"]


def run(worktrees: int, hooks: int, burst: int, files: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="sdload", dir="/tmp"))
    trees = [make_tree(work / f"wt{i}", files) for i in range(worktrees)]
    daemon = DaemonProc()
    gaps_file = daemon.home / "gaps.ndjson"
    try:
        def fire(n: int) -> tuple[int, float]:
            wt = trees[n % worktrees]
            (wt / f"load-{n}.txt").write_text(str(n))
            payload = {"session_id": f"load-{n % worktrees}", "cwd": str(wt),
                       "hook_event_name": "PostToolUse", "tool_name": "Write",
                       "tool_input": {"file_path": str(wt / f"load-{n}.txt")},
                       "tool_use_id": f"toolu_load_{n}"}
            t0 = time.perf_counter()
            proc = subprocess.run(HOOK, input=json.dumps(payload).encode(), env=daemon.env)
            return proc.returncode, (time.perf_counter() - t0) * 1000

        total = worktrees * hooks
        latencies: list[float] = []
        codes: list[int] = []
        started = time.perf_counter()
        with ThreadPoolExecutor(burst) as pool:
            for first in range(0, total, burst):
                for code, ms in pool.map(fire, range(first, min(total, first + burst))):
                    codes.append(code)
                    latencies.append(ms)
        wall = time.perf_counter() - started
        with daemon.client() as c:
            status = c.status()
        gaps = gaps_file.read_text().splitlines() if gaps_file.exists() else []
        ordered = sorted(latencies)
        return {
            "bench": "load", "worktrees": worktrees, "hooks_per_worktree": hooks,
            "burst": burst, "files_per_worktree": files, "wall_s": round(wall, 2),
            "hook_ms_p50": round(ordered[len(ordered) // 2], 1),
            "hook_ms_p99": round(ordered[int(len(ordered) * 0.99) - 1], 1),
            "daemon_capture_ms": status["latency_ms"]["tier1"],
            "non_zero_exits": sum(1 for c in codes if c != 0),
            "gaps": len(gaps), "daemon_errors": status["counters"]["errors"],
            "checkpoints": status["checkpoints"]["checkpoints"],
        }
    finally:
        daemon.stop()
        subprocess.run(["rm", "-rf", str(work)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worktrees", type=int, default=8)
    parser.add_argument("--hooks", type=int, default=100)
    parser.add_argument("--burst", type=int, default=16)
    parser.add_argument("--files", type=int, default=1000)
    args = parser.parse_args()
    print(json.dumps(run(args.worktrees, args.hooks, args.burst, args.files), indent=2))


if __name__ == "__main__":
    main()
