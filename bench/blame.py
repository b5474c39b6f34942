"""Blame budget (docs/performance.md): a 2,000-line file over a 500-checkpoint attempt, < 1 s.

Builds, through a real daemon, an attempt of ``--checkpoints`` captures (default 500) of a
worktree holding a ``--lines``-line file (default 2,000) and a few others; every checkpoint
changes, inserts or deletes a few lines of the file. Then measures, in the same run:
- ``blame_library_ms``: ``snapshotd.features.review.blame.blame_commit`` on the store (libgit2 blame + trailers);
- ``blame_op_ms``: the daemon's ``blame`` op (``elapsed_ms``: ledger lookup + blame; for text
  over a frame's 512 KiB only the limit check: the client then blames from the store);
- ``blame_cli_ms``: ``snapshotd blame --json`` end to end (process start to exit);
- peer ``git_blame_first_parent_ms``: ``git blame --first-parent`` on the store's chain.
With ``--memory``, once more: peak RSS of ``snapshotd blame --json`` (``cli_peak_rss_mib``,
its output size ``cli_json_mib``) and of the peer (``git_peak_rss_mib``), and the Python heap
peak of the library call (``library_py_peak_mib``, tracemalloc). The limits are raised for the
bench (``blame_max_lines``/``blame_max_bytes``), so a file past the defaults is measured too.

Usage: ``python -m bench.blame [--lines 2000] [--checkpoints 500] [--rounds 5] [--memory]``.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import DaemonProc, git_env, median

QUIET = {"SNAPSHOTD_SETTLE_MS": "600000", "SNAPSHOTD_MAX_WAIT_MS": "600000",
         "SNAPSHOTD_BLAME_MAX_LINES": "100000000", "SNAPSHOTD_BLAME_MAX_BYTES": str(1 << 40)}
# Runs a command with its output counted and prints its peak RSS (KiB) and output bytes: the
# only child of a fresh interpreter, so RUSAGE_CHILDREN is that command's alone.
PEAK = ("import resource, subprocess, sys\n"
        "p = subprocess.Popen(sys.argv[1:], stdout=subprocess.PIPE)\n"
        "n = sum(len(b) for b in iter(lambda: p.stdout.read(1 << 20), b''))\n"
        "assert p.wait() == 0\n"
        "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, n)")
TARGET = "src/big.py"


def build(daemon: DaemonProc, wt: Path, lines: int, checkpoints: int) -> str:
    """The attempt's checkpoints; returns the newest commit."""
    rnd = random.Random(42)
    text = [f"line {i} = {i * 7}" for i in range(lines)]
    (wt / "src").mkdir(parents=True)
    for i in range(20):
        (wt / "src" / f"other{i}.py").write_text(f"other {i}\n")
    commit = ""
    with daemon.client() as c:
        for seq in range(checkpoints):
            if seq:
                for k in range(rnd.randint(1, 5)):
                    at = rnd.randrange(len(text))
                    action = rnd.random()
                    if action < 0.5:
                        text[at] = f"changed in {seq}.{k}"
                    elif action < 0.8 or len(text) < lines // 2:
                        text.insert(at, f"inserted in {seq}.{k}")
                    else:
                        del text[at]
            (wt / TARGET).write_text("\n".join(text) + "\n")
            cp = c.snapshot(str(wt), run_id="bench", node_id="blame", source="hook",
                            tool_use_id=f"call-{seq}", label=f"Edit {TARGET}")
            assert cp["seq"] == seq and not cp["deduped"], cp
            commit = cp["commit"]
    return commit


def measure(daemon: DaemonProc, commit: str, rounds: int) -> dict:
    from snapshotd.features.review.blame import blame_commit
    from snapshotd.store.store import Store

    repo = Store(daemon.home).reader()
    lib, op, cli, peer = [], [], [], []
    count = 0
    for _ in range(rounds):
        t0 = time.perf_counter()
        count = len(blame_commit(repo, commit, TARGET))
        lib.append((time.perf_counter() - t0) * 1000)
        with daemon.client() as c:
            op.append(c.request("blame", run_id="bench", node_id="blame",
                                path=TARGET)["elapsed_ms"])
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "snapshotd", "blame", "bench", TARGET, "--node",
                        "blame", "--json"], env=daemon.env, check=True, capture_output=True)
        cli.append((time.perf_counter() - t0) * 1000)
        t0 = time.perf_counter()
        subprocess.run(["git", "--git-dir", str(daemon.home / "store.git"), "blame",
                        "--first-parent", "--porcelain", commit, "--", TARGET], env=git_env(),
                       check=True, capture_output=True)
        peer.append((time.perf_counter() - t0) * 1000)
    return {"lines_blamed": count, "blame_library_ms": median(lib), "blame_op_ms": median(op),
            "blame_cli_ms": median(cli), "peer": {"git_blame_first_parent_ms": median(peer)},
            "budget_ms": 1000, "within_budget": median(op) < 1000}


def memory(daemon: DaemonProc, commit: str) -> dict:
    import tracemalloc

    from snapshotd.features.review.blame import blame_commit
    from snapshotd.store.store import Store

    def peak(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
        out = subprocess.run([sys.executable, "-c", PEAK, *cmd], env=env, check=True,
                             capture_output=True, text=True).stdout.split()
        return round(int(out[0]) / 1024, 1), round(int(out[1]) / 2**20, 1)

    repo = Store(daemon.home).reader()
    tracemalloc.start()
    lines = blame_commit(repo, commit, TARGET)
    py_peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    del lines
    cli_rss, cli_out = peak([sys.executable, "-m", "snapshotd", "blame", "bench", TARGET,
                             "--node", "blame", "--json"], daemon.env)
    git_rss, git_out = peak(["git", "--git-dir", str(daemon.home / "store.git"), "blame",
                             "--first-parent", "--porcelain", commit, "--", TARGET], git_env())
    return {"library_py_peak_mib": round(py_peak / 2**20, 1), "cli_peak_rss_mib": cli_rss,
            "cli_json_mib": cli_out, "git_peak_rss_mib": git_rss, "git_porcelain_mib": git_out}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--lines", type=int, default=2000)
    parser.add_argument("--checkpoints", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--memory", action="store_true", help="also peak memory (see above)")
    args = parser.parse_args()
    daemon = DaemonProc(QUIET)
    try:
        with tempfile.TemporaryDirectory(prefix="sdblame") as tmp:
            wt = Path(tmp) / "wt"
            t0 = time.perf_counter()
            commit = build(daemon, wt, args.lines, args.checkpoints)
            built_s = round(time.perf_counter() - t0, 1)
            result = {"lines": args.lines, "checkpoints": args.checkpoints,
                      "rounds": args.rounds, "build_s": built_s,
                      **measure(daemon, commit, args.rounds)}
            if args.memory:
                result.update(memory(daemon, commit))
    finally:
        daemon.stop()
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
