"""Tier 2 budgets (docs/performance.md): what watching costs while nothing happens, and how
soon after the last write a settled checkpoint is committed.

Sets up ``--worktrees`` git worktrees of ``--files`` files each (one generated tree, copied;
``--cache DIR`` keeps them for the next run, ``prepare_s`` is what writing or resetting took),
begins an attempt on each (the daemon's default ``settle_ms``/``max_wait_ms`` unless given),
flushes each once so every stat cache is warm, waits for the watcher to merge its notifiers,
then measures:

- ``idle``: the daemon's CPU over ``--seconds`` with nothing changing, as % of one core
  (psutil, user + system), its RSS and thread count;
- ``settle``: ``--rounds`` times, one write to one worktree, and the time from the write to the
  committed checkpoint (the checkpoint row's ``created_at``), reported against ``settle_ms``.

Budgets: idle CPU <= 1 % of a core for 20 worktrees of 10,000 files over 60 s; median
write-to-checkpoint <= settle_ms + 50 ms.

Usage: ``python -m bench.idle [--worktrees 20] [--files 10000] [--seconds 60] [--rounds 20]``;
prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import psutil

from bench.common import DaemonProc, make_tree, median
from bench.tree import cached_copies


def run(worktrees: int, files: int, seconds: float, rounds: int,
        settle_ms: int | None, cache: Path | None = None,
        verify_interval_s: float | None = None) -> dict:
    """The idle and settle figures; with ``cache`` the worktrees are kept there for the next
    run (``bench.tree.cached_copies``), else written under a temporary directory and removed.
    ``verify_interval_s`` sets the daemon's: a quiet worktree is due a verification every ten
    of them, so a short one brings those into the idle window."""
    work = Path(tempfile.mkdtemp(prefix="sdidle", dir="/tmp"))
    started = time.monotonic()
    if cache is not None:
        roots = cached_copies(worktrees, files, cache)
    else:
        # make_tree's commit is one pack (fast-import): no background gc to race the copies.
        roots = [make_tree(work / "wt0", files)]
        for i in range(1, worktrees):
            dest = work / f"wt{i}"
            subprocess.run(["cp", "-a", str(roots[0]), str(dest)], check=True)
            roots.append(dest)
    prepare_s = time.monotonic() - started
    extra = {"SNAPSHOTD_SETTLE_MS": str(settle_ms)} if settle_ms else {}
    if verify_interval_s:
        extra["SNAPSHOTD_VERIFY_INTERVAL_S"] = str(verify_interval_s)
    daemon = DaemonProc(extra)
    try:
        with daemon.client() as c:
            for i, root in enumerate(roots):
                c.attempt_begin(f"idle{i}", "n", str(root))
            for root in roots:
                c.flush(str(root))  # seq 0: warm stat caches, as a worktree with history has
            settle = int(c.status()["watched"][0]["settle_ms"])
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and c.status()["watcher"]["notifiers"] > 1:
                time.sleep(0.5)
            notifiers = c.status()["watcher"]["notifiers"]
        setup_s = time.monotonic() - started
        time.sleep(3.0)  # the flushes' verification scans, then quiet
        proc = psutil.Process(daemon.proc.pid)
        with daemon.client() as c:
            watcher_before = c.status()["watcher"]
        before = proc.cpu_times()
        t0 = time.monotonic()
        time.sleep(seconds)
        after = proc.cpu_times()
        elapsed = time.monotonic() - t0
        with daemon.client() as c:
            watcher_after = c.status()["watcher"]
        cpu = ((after.user - before.user) + (after.system - before.system)) / elapsed * 100
        rss = proc.memory_info().rss
        threads = proc.num_threads()
        latencies = settle_rounds(daemon, roots, rounds)
        with daemon.client() as c:
            tier2 = c.status()["latency_ms"]["tier2"]
    finally:
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)
    med = median(latencies)
    return {
        "bench": "idle",
        "worktrees": worktrees,
        "files_per_worktree": files,
        "prepare_s": round(prepare_s, 1),
        "setup_s": round(setup_s, 1),
        "notifiers": notifiers,
        "idle": {
            "seconds": round(elapsed, 1),
            "cpu_pct_of_one_core": round(cpu, 3),
            "rss_mb": round(rss / 2**20, 1),
            "threads": threads,
            "verify_interval_s": verify_interval_s,
            # Counted over the window: verifications (a quiet worktree's every ten intervals,
            # in turns) and the settle scheduler's passes.
            **{key: watcher_after.get(key, 0) - watcher_before.get(key, 0)
               for key in ("verifications", "scheduler_passes")},
            "budget_cpu_pct": 1.0,
        },
        "settle": {
            "settle_ms": settle,
            "rounds": len(latencies),
            "write_to_checkpoint_ms_median": med,
            "write_to_checkpoint_ms_p90": _quantile(latencies, 0.9),
            "write_to_checkpoint_ms_min": round(min(latencies), 3) if latencies else None,
            "write_to_checkpoint_ms_max": round(max(latencies), 3) if latencies else None,
            "median_over_settle_ms": round(med - settle, 3) if latencies else None,
            # The daemon's own time per tier-2 capture (stat scan + commit), all captures.
            "capture_ms_p50": tier2.get("p50"),
            "capture_ms_p99": tier2.get("p99"),
            "load_avg_1m": round(os.getloadavg()[0], 2),
            "budget_median_ms": settle + 50,
        },
    }


def settle_rounds(daemon: DaemonProc, roots: list[Path], rounds: int) -> list[float]:
    """One write, then wait for its checkpoint; the write's own timestamp is the start."""
    out: list[float] = []
    with daemon.client() as c:
        for r in range(rounds):
            i = r % len(roots)
            run_id = f"idle{i}"
            have = len(c.list(run_id)["checkpoints"])
            target = roots[i] / "bench-edit.txt"
            written = time.time()
            target.write_text(f"round {r}\n")
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                cps = c.list(run_id)["checkpoints"]
                if len(cps) > have:
                    out.append((cps[-1]["created_at"] - written) * 1000)
                    break
                time.sleep(0.005)
            time.sleep(1.5)  # let the verification scan pass before the next round
    return out


def _quantile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) < 2:
        return round(values[0], 3)
    return round(statistics.quantiles(values, n=100)[int(q * 100) - 1], 3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worktrees", type=int, default=20)
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--settle-ms", type=int, default=None)
    parser.add_argument("--cache", type=Path, default=None, metavar="DIR",
                        help="Keep the worktrees under DIR and reuse them (bench.tree).")
    args = parser.parse_args()
    print(json.dumps(run(args.worktrees, args.files, args.seconds, args.rounds,
                         args.settle_ms, args.cache), indent=2))


if __name__ == "__main__":
    main()
