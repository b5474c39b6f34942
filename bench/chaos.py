"""The randomized fault run, long: the engine of tests/system/test_chaos.py (tests/support/chaos.py) for as
long as asked, on one seed, printing what it did and every violation it found as JSON.

Usage: ``python -m bench.chaos [--seconds 600] [--seed N] [--steps N] [--keep]``. Run as root it runs
the daemon as ``nobody`` (unreadable steps are real), otherwise as the caller. Exit status 1
when a violation was found; replay one with the same ``--seed``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from tests.support.chaos import Chaos  # the engine lives with the tests


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=int(time.time()) % 100000)
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    parser.add_argument("--keep", action="store_true",
                        help="keep the world's directory when a violation was found")
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
    print(json.dumps(out, indent=2))
    sys.exit(1 if stats.violations else 0)


if __name__ == "__main__":
    main()
