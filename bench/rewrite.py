"""Tree rewrite: what one fast-path capture costs to turn its changed paths into a new root tree.

Every tier-1 capture with a change runs ``trees.rewrite_tree`` over the directories on the
changed paths and writes each new tree; with sixteen agents on two cores that work is done one
capture after another, so its CPU time is the burst's. Measured per side (each side's own
``snapshotd.store.trees`` and ``snapshotd.store.loose``, in a process of its own, run from its checkout),
interleaved round by round, on two shapes:

- ``narrow``: 10 directories of 100 files two levels down (``dir3/sub/file042.txt``);
- ``wide``: a root of 10,000 directories holding one file each (a monorepo's root);

and two changes a step: ``add`` (a new file at the root, as ``bench.load``'s agents make) and
``modify`` (one file two levels down). Reported: the median wall and CPU time (the calling
thread's) of one ``rewrite_tree`` over ``--steps`` steps. The peer is the git CLI with a private
index on the same tree (``hash-object -w``, ``update-index --add --cacheinfo``, ``write-tree``:
what a shadow-git checkpoint runs per change), timed per step.

Usage: ``python -m bench.rewrite [--rounds 3] [--steps 200] [--dir /tmp] [--side old:/tmp/old/
.venv/bin/python:/tmp/old --side new]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pygit2

SHAPES = {"narrow": (10, 100), "wide": (10000, 1)}
HERE = Path(__file__).resolve().parent.parent
KINDS = ("add", "modify")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    parser.add_argument("--side", action="append", default=[])
    parser.add_argument("--child", nargs=3, metavar=("SHAPE", "KIND", "STEPS"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        shape, kind, steps = args.child
        print(json.dumps(measure(shape, kind, int(steps), Path(args.dir))))
        return
    from bench.common import median, parse_side  # not in a child: it runs a side's checkout

    sides = [parse_side(s) for s in (args.side or ["this"])]
    runs: dict[str, dict[str, list[dict]]] = {name: {} for name, _, _ in sides}
    peer: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for shape in SHAPES:
            for kind in KINDS:
                case = f"{shape}-{kind}"
                for name, python, cwd in sides:
                    # This file, run where the side's checkout comes first on the path.
                    argv = ["rewrite", "--dir", args.dir, "--child", shape, kind,
                            str(args.steps)]
                    code = ("import runpy, sys; sys.argv = " + repr(argv) +
                            "; runpy.run_path(" + repr(__file__) + ", run_name='__main__')")
                    out = subprocess.run([python, "-c", code], cwd=cwd or HERE, check=True,
                                         capture_output=True, text=True).stdout
                    runs[name].setdefault(case, []).append(json.loads(out))
                peer.setdefault(case, []).append(peer_step_ms(shape, kind, Path(args.dir)))
    print(json.dumps({
        "bench": "rewrite", "rounds": args.rounds, "steps": args.steps, "dir": args.dir,
        "sides": {name: {case: {"wall_us": median([r["wall_us"] for r in rows]),
                                "cpu_us": median([r["cpu_us"] for r in rows]),
                                "runs_cpu_us": [r["cpu_us"] for r in rows]}
                         for case, rows in cases.items()}
                  for name, cases in runs.items()},
        "peer_git_cli_ms": {case: median(values) for case, values in peer.items()},
    }, indent=2))


def measure(shape: str, kind: str, steps: int, parent: Path) -> dict:
    """One side's medians (this process's ``snapshotd``), checked against libgit2's own
    ``write_tree`` of the whole index at the end."""
    from snapshotd.store import trees
    from snapshotd.store.loose import StoredObjects

    work = Path(tempfile.mkdtemp(prefix="sdrewrite", dir=parent))
    try:
        repo, index, base = _tree(work, shape)
        stored = StoredObjects(Path(repo.path) / "objects", False)
        walls, cpus = [], []
        for n in range(steps):
            path = _changed(shape, kind, n)
            index.add(pygit2.IndexEntry(path, repo.create_blob(b"v%d\n" % n),
                                        pygit2.GIT_FILEMODE_BLOB))
            t0, c0 = time.perf_counter(), time.thread_time()
            base, _counts = trees.rewrite_tree(repo, index, base, {path}, stored)
            cpus.append(time.thread_time() - c0)
            walls.append(time.perf_counter() - t0)
        if base != str(index.write_tree(repo)):
            raise SystemExit(f"{shape}-{kind}: rewrite_tree diverged from the index's tree")
        return {"wall_us": round(statistics.median(walls) * 1e6, 1),
                "cpu_us": round(statistics.median(cpus) * 1e6, 1)}
    finally:
        shutil.rmtree(work)


def peer_step_ms(shape: str, kind: str, parent: Path, steps: int = 20) -> float:
    """The git CLI with a private index, per change: the blob, the index entry, the tree."""
    work = Path(tempfile.mkdtemp(prefix="sdrewrite", dir=parent))
    try:
        repo, index, _base = _tree(work, shape)
        private = work / "index"
        env = {**os.environ, "GIT_DIR": repo.path, "GIT_INDEX_FILE": str(private)}
        lines = "".join(f"100644 {e.id} 0\t{e.path}\n" for e in index)
        subprocess.run(["git", "update-index", "--index-info"], input=lines, env=env,
                       check=True, text=True)
        times = []
        for n in range(steps):
            t0 = time.perf_counter()
            blob = subprocess.run(["git", "hash-object", "-w", "--stdin"], input=b"v%d\n" % n,
                                  env=env, check=True, capture_output=True).stdout.decode()
            subprocess.run(["git", "update-index", "--add", "--cacheinfo",
                            f"100644,{blob.strip()},{_changed(shape, kind, n)}"], env=env,
                           check=True)
            subprocess.run(["git", "write-tree"], env=env, check=True, capture_output=True)
            times.append(time.perf_counter() - t0)
        return round(statistics.median(times) * 1000, 2)
    finally:
        shutil.rmtree(work)


def _tree(work: Path, shape: str) -> tuple[pygit2.Repository, pygit2.Index, str]:
    dirs, files = SHAPES[shape]
    repo = pygit2.init_repository(str(work / "store.git"), bare=True)
    index = pygit2.Index()
    for i in range(dirs):
        for j in range(files):
            path = f"dir{i:05d}/sub/file{j:03d}.txt" if files > 1 else f"dir{i:05d}/f.txt"
            index.add(pygit2.IndexEntry(path, repo.create_blob(b"%d %d\n" % (i, j)),
                                        pygit2.GIT_FILEMODE_BLOB))
    return repo, index, str(index.write_tree(repo))


def _changed(shape: str, kind: str, n: int) -> str:
    if kind == "add":
        return f"load-{n}.txt"
    return f"dir{n % 7:05d}/sub/file000.txt" if shape == "narrow" else f"dir{n % 7:05d}/f.txt"


if __name__ == "__main__":
    sys.exit(main())
