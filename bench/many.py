"""Many watched worktrees: ``--worktrees`` (100) git worktrees of ``--files`` (10,000) files
each, all watched by one daemon: idle CPU (% of one core) and RSS with nothing changing, and
the settle latency of one write among them (write to committed checkpoint). The measuring is
``bench.idle``'s; this runner only sets the scale of the budget (100 × 10,000: idle <= 1 % of a
core, RSS <= 1 GB) and prints it beside the figures.

Usage: ``python -m bench.many [--worktrees 100] [--files 10000] [--seconds 60] [--rounds 20]
[--cache DIR] [--verify-interval S]``. With ``--verify-interval 6 --seconds 120`` the window holds
quiet worktrees' verifications (each due every ten intervals; they take turns, within
``quiet_verify_share`` of a core), which the default 60 s never reaches.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from bench.idle import run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worktrees", type=int, default=100)
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--cache", type=Path, default=None, metavar="DIR",
                        help="Keep the worktrees under DIR and reuse them (bench.tree).")
    parser.add_argument("--verify-interval", type=float, default=None, metavar="S",
                        help="The daemon's verify_interval_s (default: its own, 60).")
    args = parser.parse_args()
    load_before = round(os.getloadavg()[0], 2)
    doc = run(args.worktrees, args.files, args.seconds, args.rounds, None, args.cache,
              args.verify_interval)
    doc["bench"] = "many"
    doc["load_avg_1m_before"] = load_before
    doc["budgets"] = {"idle_cpu_pct_of_one_core": 1.0, "rss_mb": 1024,
                      "settle_median_ms": doc["settle"]["budget_median_ms"]}
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
