"""The randomized fault run, long: the engine of tests/system/test_chaos.py (tests/support/chaos.py) for as
long as asked, on one seed, printing what it did and every violation it found as JSON.

Then a rename storm (``tests/support/storm.py``) for ``--storm`` seconds in a fresh world: real
hooks for the worktree and, with explicit ids (``SNAPSHOTD_RUN_ID``), for a second directory,
each under its own storm, beside ``git add -A`` + ``write-tree`` of the same worktree; its JSON
(``storm``) counts the checkpoints holding a state that never existed (``torn``) and those of
them carrying no ``unsettled`` mark (``torn_unmarked``: each one a violation).

Usage: ``python -m bench.chaos [--seconds 600] [--seed N] [--steps N] [--keep] [--storm 60]``
(``--seconds 0`` runs the storm alone). Run as root it runs the daemon as ``nobody``
(unreadable steps are real), otherwise as the caller. Exit status 1 when a violation was
found; replay one with the same ``--seed``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from tests.support.chaos import Chaos  # the engine lives with the tests
from tests.support.storm import StormRun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    parser.add_argument("--keep", action="store_true",
                        help="keep the world's directory when a violation was found")
    parser.add_argument("--storm", type=float, default=60.0,
                        help="seconds of rename storm after the random run (0: none)")
    parser.add_argument("--storm-pause-ms", type=float, default=60.0,
                        help="the longest pause between two bursts of renames")
    args = parser.parse_args()
    started = time.monotonic()
    world = Chaos(args.seed)
    try:
        stats = world.run(args.seconds, args.steps)
    finally:
        world.close(keep=args.keep and bool(world.stats.violations))
    out = {"seed": args.seed, "directory": str(world.base), "as_nobody": world.drop, "seconds": round(time.monotonic() -
                                                                         started, 1),
           "load_average": os.getloadavg(), **stats.as_dict()}
    if stats.violations:
        out["trace"] = world.trace
    if args.storm > 0:
        out["storm"] = storm(args.seed, args.storm, args.storm_pause_ms)
        if out["storm"]["daemon"]["torn_unmarked"]:
            stats.violations.append(f"rename storm: {out['storm']['daemon']['torn_unmarked']} "
                                    f"torn checkpoint(s) with no unsettled mark")
    print(json.dumps(out, indent=2))
    sys.exit(1 if stats.violations else 0)


def storm(seed: int, seconds: float, pause_ms: float) -> dict:
    """The rename storm in a world of its own (no random steps): its counts, and the pace."""
    world = Chaos(seed)
    try:
        run = StormRun(world)
        started = time.monotonic()
        counts = run.run(seconds, seed, pause_ms=pause_ms)
        return {"seconds": round(time.monotonic() - started, 1), "pause_ms": pause_ms,
                "hook_calls_per_directory": run.calls, **counts}
    finally:
        world.close()


if __name__ == "__main__":
    main()
