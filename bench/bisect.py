"""Bisect's scratch directory (docs/performance.md, "``snapshotd/features/bisect/scratch.py``"):
a step moved by diff against a whole materialization per step, on a ``--files`` tree.

One attempt: a first checkpoint of the whole tree, then ``--calls`` tool calls that each
change 2 files and add 1. Measured in the same run, over the checkpoints a bisection visits
(the middles of good = 0 and bad = the newest, every run good):
- ``cli``: ``snapshotd bisect --json -- true`` end to end; each step's ``move_s`` from its
  result (step 1 writes the whole tree; the later ones sweep and move by diff);
- ``scratch``: the same moves in process (``ScratchTree``), the sweep (one ``lstat`` per
  entry: what the command changed, undone) and the diff apply timed apart;
- ``restore_to``: the daemon's ``restore --to`` into a new directory per step (what a bisect
  without a diff move would do), the previous copy's removal timed apart;
- ``peer``: git moving a work tree between the same trees, ``git read-tree -m -u A B`` with a
  private index (what ``git checkout`` does for ``git bisect``).

Usage: ``python -m bench.bisect [--files 20000] [--calls 32] [--restore-steps 3] [--dir /tmp]``;
prints JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pygit2

from bench.common import bench_daemon, git_env, make_tree, median, tree_file
from snapshotd.features.bisect import ScratchTree, Search


def record(daemon, wt: Path, files: int, calls: int) -> list[dict]:
    """The attempt's checkpoints: the whole tree, then ``calls`` small tool calls."""
    out = []
    with daemon.client() as c:
        c.attempt_begin("bench", "bisect", str(wt))
        t0 = time.perf_counter()
        out.append(c.snapshot(str(wt), run_id="bench", node_id="bisect", tool_use_id="call-0"))
        first_ms = (time.perf_counter() - t0) * 1000
        for k in range(1, calls + 1):
            for j in (k * 7919 % files, k * 104729 % files):
                tree_file(wt, j).write_text(f"changed by tool call {k}\n")
            (wt / "added").mkdir(exist_ok=True)
            (wt / "added" / f"a{k}.txt").write_text(f"added by {k}\n")
            out.append(c.snapshot(str(wt), run_id="bench", node_id="bisect",
                                  tool_use_id=f"call-{k}", label=f"tool call {k}"))
        c.attempt_end("bench", "bisect")
    out[0]["first_capture_ms"] = round(first_ms, 1)
    return out


def visited(count: int) -> list[int]:
    """The checkpoints a bisection over ``count`` visits when every run is good."""
    search, order = Search(count), []
    while (i := search.next()) is not None:
        order.append(i)
        search.mark(i, "good")
    return order


def cli_bisect(daemon, base: Path) -> dict:
    scratch = base / "tmp"
    scratch.mkdir()
    env = dict(daemon.env, TMPDIR=str(scratch))
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "bisect", "bench", "--node",
                           "bisect", "--json", "--", "true"], env=env, capture_output=True,
                          text=True, check=True)
    wall = (time.perf_counter() - t0) * 1000
    steps = json.loads(proc.stdout)["steps"]
    moves = [s["move_s"] * 1000 for s in steps]
    return {"wall_ms": round(wall), "steps": len(steps),
            "first_step_move_ms": round(moves[0], 1),
            "later_step_move_ms_median": median(moves[1:]),
            "later_step_move_ms_all": [round(m, 1) for m in moves[1:]],
            "written_per_later_step": [s["move"]["written"] for s in steps[1:]]}


def in_process(daemon, base: Path, cps: list[dict], order: list[int]) -> dict:
    repo = pygit2.Repository(str(daemon.home / "store.git"))
    root = base / "scratch"
    root.mkdir()
    tree = ScratchTree(repo, root)
    sweeps, moves = [], []
    t0 = time.perf_counter()
    tree.move_to(cps[order[0]]["tree"])
    first = (time.perf_counter() - t0) * 1000
    for i in order[1:]:
        t0 = time.perf_counter()
        tree.sweep()
        t1 = time.perf_counter()
        tree.move_to(cps[i]["tree"])
        t2 = time.perf_counter()
        sweeps.append((t1 - t0) * 1000)
        moves.append((t2 - t1) * 1000)
    tree.close()
    return {"first_materialize_ms": round(first, 1),
            "sweep_ms_median": median(sweeps), "diff_apply_ms_median": median(moves),
            "step_ms_median": median([a + b for a, b in zip(sweeps, moves, strict=True)])}


def restore_to(daemon, base: Path, cps: list[dict], order: list[int], steps: int) -> dict:
    ours, removal = [], []
    previous: Path | None = None
    for n, i in enumerate(order[:steps]):
        out = base / f"restore{n}"
        with daemon.client() as c:
            t0 = time.perf_counter()
            c.restore(run_id="bench", node_id="bisect", seq=cps[i]["seq"], to=str(out))
            ours.append((time.perf_counter() - t0) * 1000)
        if previous is not None:
            t0 = time.perf_counter()
            shutil.rmtree(previous)
            removal.append((time.perf_counter() - t0) * 1000)
        previous = out
    return {"steps": len(ours), "restore_to_ms_median": median(ours),
            "restore_to_ms_all": [round(x) for x in ours],
            "remove_previous_ms_median": median(removal) if removal else None}


def peer(daemon, base: Path, cps: list[dict], order: list[int]) -> dict:
    work = base / "peer"
    work.mkdir()
    env = git_env(GIT_DIR=str(daemon.home / "store.git"), GIT_INDEX_FILE=str(base / "peer-idx"),
                  GIT_WORK_TREE=str(work))
    t0 = time.perf_counter()
    subprocess.run(["git", "read-tree", "-m", "-u", cps[order[0]]["tree"]], env=env, check=True,
                   cwd=work)
    first = (time.perf_counter() - t0) * 1000
    steps = []
    for a, b in zip(order, order[1:], strict=False):
        t0 = time.perf_counter()
        subprocess.run(["git", "read-tree", "-m", "-u", cps[a]["tree"], cps[b]["tree"]],
                       env=env, check=True, cwd=work)
        steps.append((time.perf_counter() - t0) * 1000)
    return {"first_checkout_ms": round(first, 1), "step_ms_median": median(steps)}


def run(files: int, calls: int, restore_steps: int, where: str) -> dict:
    with bench_daemon("sdbench-bisect", where) as (base, daemon):
        t0 = time.perf_counter()
        wt = make_tree(base / "wt", files)
        cps = record(daemon, wt, files, calls)
        prepare_s = round(time.perf_counter() - t0, 1)
        order = visited(len(cps))
        result = {"bench": "bisect", "files": files, "checkpoints": len(cps),
                  "prepare_s": prepare_s, "first_capture_ms": cps[0]["first_capture_ms"],
                  "visited_seqs": [cps[i]["seq"] for i in order]}
        result["cli"] = cli_bisect(daemon, base)
        result["scratch"] = in_process(daemon, base, cps, order)
        result["restore_to"] = restore_to(daemon, base, cps, order, restore_steps)
        result["peer"] = peer(daemon, base, cps, order)
        result["ratio_restore_to_per_step_over_diff_step"] = round(
            result["restore_to"]["restore_to_ms_median"]
            / result["cli"]["later_step_move_ms_median"], 1)
        result["ratio_diff_step_over_peer_step"] = round(
            result["cli"]["later_step_move_ms_median"] / result["peer"]["step_ms_median"], 2)
        # Printed before the trees are removed: at 100,000 files that removal is minutes.
        print(json.dumps(result, indent=2), flush=True)
        return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=20_000)
    parser.add_argument("--calls", type=int, default=32)
    parser.add_argument("--restore-steps", type=int, default=3)
    parser.add_argument("--dir", default="/tmp", help="Where the trees live.")
    args = parser.parse_args()
    run(args.files, args.calls, args.restore_steps, args.dir)


if __name__ == "__main__":
    main()
