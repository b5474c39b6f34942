"""``python -m bench.powerloss``: power cuts at random points under the daemon's home.

Each run starts a fresh home on powerfs (tests/support/powerfs.py: only what fsync made durable
survives a cut), begins a plain and a git worktree's attempts, captures a few rounds with the
cut point set at a random sync (uniform over the syncs a dry run of the same workload makes),
cuts the power, restarts the daemon and checks (tests/support/powercut.py): every checkpoint
acknowledged before the cut is in the ledger and on its attempt's chain (full mode), ``git fsck
--strict`` and the ledger's integrity check pass, no seq is handed out twice, and each
worktree can be captured again. Prints one JSON document: runs, acknowledged checkpoints
checked, problems (first few, verbatim).

With ``--settled`` the home is established first (each worktree captured once, the disk made
whole), so the cut falls among steady-state captures: where process mode loses its tail.

Usage: ``python -m bench.powerloss [--runs 50] [--durability full|process]
[--model strict|journal|both] [--rounds 3] [--seed 22] [--settled]``. Needs /dev/fuse and
fusermount3.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from tests.support import powerfs  # the test layer lives with the tests
from tests.support.powercut import Rig, git_tree, plain_tree


def one_run(durability: str, journal: bool, rounds: int, sync_limit: int | None,
            settled: bool = False) -> dict:
    root = Path(tempfile.mkdtemp(prefix="sdpl", dir="/tmp"))
    rig = Rig(root / "rig", durability=durability, journal=journal)
    out: dict = {"sync_limit": sync_limit, "journal": journal, "problems": []}
    try:
        rig.start(sync_limit=None if settled else sync_limit)
        attempts = [rig.begin("r", "plain", plain_tree(root / "plain")),
                    rig.begin("r", "git", git_tree(root / "git"))]
        if settled:
            # An established home: the cut point falls among the captures, not the set-up.
            for attempt in attempts:
                rig.change(attempt)
                rig.capture(attempt)
            rig.settle(sync_limit=sync_limit)
        for _ in range(rounds):
            for attempt in attempts:
                rig.change(attempt)
                rig.capture(attempt)
        out["syncs"] = rig.fs.status()["syncs"]
        out["acked_before_cut"] = sum(a.before_cut for a in rig.acks)
        rig.power_cut()
        out["problems"] += rig.problems()
        for attempt in attempts:
            try:
                rig.capture_again(attempt)
            except Exception as exc:  # any refusal is the finding, keep going
                out["problems"].append(f"cannot capture {attempt} again: {exc}")
        out["problems"] += [p for p in rig.problems() if p not in out["problems"]]
    except Exception as exc:
        out["problems"].append(f"run failed: {type(exc).__name__}: {exc}")
    finally:
        rig.close()
        shutil.rmtree(root, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="power cuts at random points")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--durability", choices=["full", "process"], default="full")
    parser.add_argument("--model", choices=["strict", "journal", "both"], default="both")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--settled", action="store_true",
                        help="cut among the captures of an established home (each worktree "
                             "captured once and the disk made whole first)")
    args = parser.parse_args(argv)
    reason = powerfs.unavailable()
    if reason:
        print(json.dumps({"skipped": reason}))
        return 0
    rng = random.Random(args.seed)
    models = [False, True] if args.model == "both" else [args.model == "journal"]
    started = time.monotonic()
    dry = {journal: one_run(args.durability, journal, args.rounds, None, args.settled)["syncs"]
           for journal in models}
    runs = []
    for i in range(args.runs):
        journal = models[i % len(models)]
        runs.append(one_run(args.durability, journal, args.rounds,
                            rng.randrange(0, dry[journal] + 1), args.settled))
    problems = [p for r in runs for p in r["problems"]]
    print(json.dumps({
        "durability": args.durability, "settled": args.settled, "runs": len(runs),
        "dry_run_syncs": dry,
        "acked_before_cut": sum(r.get("acked_before_cut", 0) for r in runs),
        "runs_with_problems": sum(bool(r["problems"]) for r in runs),
        "problems": problems[:20], "seconds": round(time.monotonic() - started, 1),
    }, indent=2))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
