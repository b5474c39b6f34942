"""``python -m bench.compare``: the capture rows of ``python -m bench`` for several installs of
snapshotd (or settings) side by side, interleaved round by round so every side sees the same
machine load: the figure to quote when a change is checked for a regression against an older
commit on a shared machine, where two separate ``python -m bench`` runs minutes apart differ by
more than the effect.

A side is ``NAME`` (this install), ``NAME:PYTHON:CWD`` (another install: e.g. a worktree of an
older commit at ``CWD`` and the virtualenv whose ``PYTHON`` runs it) or either with
``--env NAME:KEY=VALUE`` settings (e.g. ``--env noscan:SNAPSHOTD_SECRET_SCAN=0``). Each side
captures its own copy of the same generated tree (committed and packed like a clone).

Rows, per side:
- ``first_capture_ms``: median over ``--first-rounds`` daemons, each in a new home, of the
  first capture of the worktree (seeded from its index; after ``attempt_begin``, as
  ``python -m bench`` times it);
- ``capture_0_ms``, ``capture_1_ms``, ``capture_100_ms``: median daemon-side capture
  (``elapsed_ms``, the fast path) after 0, 1 and 100 changed files, over ``--rounds``;
- every round runs the sides in turn, each first in turn (in a fixed order the first side
  came out ahead on the steady rows), after the trees are synced to disk;
- ``*_cpu_ms`` beside each: the CPU time the daemon (and the git commands it ran and waited
  for) spent across that request, median. On a loaded machine the wall-clock figures mostly
  measure the wait for a core; CPU time is what a change can regress.

``--per-dir N`` puts N files in each top-level directory (default 100, ``bench``'s layout): the
root of a tree has files/N entries, so ``--files 100000 --per-dir 10`` has the 10,000-entry root
of the million-file tree, which every capture with a change rewrites.

Usage: ``python -m bench.compare --side old:/tmp/old/.venv/bin/python:/tmp/old --side new
[--side noscan --env noscan:SNAPSHOTD_SECRET_SCAN=0] [--files 10000] [--rounds 15]
[--first-rounds 7] [--per-dir 100]``; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from bench.common import DaemonProc, git_env, make_tree, median

QUIET = {"SNAPSHOTD_SETTLE_MS": "600000", "SNAPSHOTD_MAX_WAIT_MS": "600000"}


@dataclass
class Side:
    """One install (or setting) under comparison, with its own copy of the tree."""

    name: str
    python: str = sys.executable
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    tree: Path = Path()
    times: dict[str, list[float]] = field(default_factory=dict)

    def daemon(self) -> DaemonProc:
        return DaemonProc({**QUIET, **self.env}, python=self.python, cwd=self.cwd)


def run(sides: list[Side], files: int, rounds: int, first_rounds: int,
        per_dir: int = 100) -> dict:
    work = Path(tempfile.mkdtemp(prefix="sdcmp", dir="/tmp"))
    try:
        for side in sides:
            side.tree = make_tree(work / side.name, files, per_dir=per_dir)
            subprocess.run(["git", "gc", "-q"], cwd=side.tree, check=True, env=git_env())
        # The trees' files reach the disk before any timing: the write-back of the side made
        # last would otherwise still run under the rounds.
        os.sync()
        load_before = [round(x, 2) for x in os.getloadavg()]
        for r in range(first_rounds):
            for side in _rotated(sides, r):
                side.times.setdefault("first_capture_ms", []).append(_first_capture(side))
        _steady(sides, rounds)
        return {"bench": "compare", "files": files, "per_dir": per_dir, "rounds": rounds,
                "first_rounds": first_rounds, "load_average_before": load_before,
                "load_average_after": [round(x, 2) for x in os.getloadavg()],
                "sides": {side.name: {"python": side.python, "env": side.env,
                                      **{row: median(t) for row, t in side.times.items()}}
                          for side in sides}}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _first_capture(side: Side) -> float:
    daemon = side.daemon()
    try:
        with daemon.client() as c:
            c.attempt_begin("perf", "n", str(side.tree))
            cpu = _cpu_ms(daemon)
            started = time.perf_counter()
            c.snapshot(str(side.tree), run_id="perf", node_id="n")
            elapsed = round((time.perf_counter() - started) * 1000, 1)
            side.times.setdefault("first_capture_cpu_ms", []).append(_cpu_ms(daemon) - cpu)
            return elapsed
    finally:
        daemon.stop()


def _cpu_ms(daemon: DaemonProc) -> float:
    """CPU time of the daemon so far: its threads' from the scheduler's nanosecond counters
    (``/proc/PID/task/*/schedstat``; the clock-tick figures are 10 ms coarse), and the
    children it waited for (the git commands of a first capture) in clock ticks."""
    pid = daemon.proc.pid
    ns = 0
    for task in os.scandir(f"/proc/{pid}/task"):
        try:
            with open(f"{task.path}/schedstat") as f:
                ns += int(f.read().split()[0])
        except (OSError, ValueError):
            continue  # a thread that ended meanwhile
    t = psutil.Process(pid).cpu_times()
    return round(ns / 1e6 + (t.children_user + t.children_system) * 1000, 3)


def _steady(sides: list[Side], rounds: int) -> None:
    daemons = {}
    try:
        for side in sides:
            daemons[side.name] = daemon = side.daemon()
            with daemon.client() as c:
                c.attempt_begin("perf", "n", str(side.tree))
                c.snapshot(str(side.tree), run_id="perf", node_id="n")
        # The first captures' own events drain and the watchers' verification scans finish.
        time.sleep(2.5)
        targets = {side.name: sorted(side.tree.rglob("f*.txt"))[:100] for side in sides}
        for changed in (0, 1, 100):
            for r in range(rounds):
                for side in _rotated(sides, r):
                    for t in targets[side.name][:changed]:
                        t.write_text(f"round {r} {changed}\n")
                    daemon = daemons[side.name]
                    cpu = _cpu_ms(daemon)
                    with daemon.client() as c:
                        reply = c.snapshot(str(side.tree), run_id="perf", node_id="n")
                    side.times.setdefault(f"capture_{changed}_ms", []).append(
                        reply["elapsed_ms"])
                    side.times.setdefault(f"capture_{changed}_cpu_ms", []).append(
                        _cpu_ms(daemon) - cpu)
    finally:
        for daemon in daemons.values():
            daemon.stop()


def _rotated(sides: list[Side], r: int) -> list[Side]:
    """The sides in round ``r``'s order: each goes first in turn. In a fixed order the side
    listed first measured up to twice as fast on the steady rows as the same code listed
    second (2026-12-01, load 5)."""
    k = r % len(sides)
    return sides[k:] + sides[:k]


def parse_sides(specs: list[str], envs: list[str]) -> list[Side]:
    sides = []
    for spec in specs:
        name, _, rest = spec.partition(":")
        python, _, cwd = rest.partition(":")
        sides.append(Side(name, python or sys.executable, Path(cwd) if cwd else None))
    by_name = {side.name: side for side in sides}
    for setting in envs:
        name, _, pair = setting.partition(":")
        key, _, value = pair.partition("=")
        if name not in by_name or not key:
            raise SystemExit(f"--env {setting}: expected NAME:KEY=VALUE for a --side NAME")
        by_name[name].env[key] = value
    return sides


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--side", action="append", required=True, metavar="NAME[:PYTHON:CWD]")
    parser.add_argument("--env", action="append", default=[], metavar="NAME:KEY=VALUE")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--first-rounds", type=int, default=7)
    parser.add_argument("--per-dir", type=int, default=100,
                        help="files per top-level directory (10 gives a root as wide as a "
                        "million-file tree's at 100,000 files)")
    args = parser.parse_args()
    sides = parse_sides(args.side, args.env)
    print(json.dumps(run(sides, args.files, args.rounds, args.first_rounds, args.per_dir),
                     indent=2))


if __name__ == "__main__":
    main()
