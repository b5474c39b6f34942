"""Memory soak (docs/performance.md, "Memory over many captures"): the daemon's RSS over
``--captures`` hook-style captures of one attempt, to show memory bounded by what is active.

One daemon subprocess on a temporary home, one git worktree of ``--files`` files (quiet settle
windows: only the requests capture), one attempt begun on it; then, ``--captures`` times, one
file changed and a ``snapshot`` request sent over the socket on a new connection with a tool use
id of its own, as ``snapshot-hook`` does after each tool call. Every ``--every`` captures it
samples the daemon's RSS and open file descriptors (psutil).

Prints JSON: ``samples`` (captures, rss_mb, fds, elapsed_s) and ``kb_per_capture``, the RSS
growth per capture between the middle sample and the last (after warm-up; about 0 when memory
is bounded). ``SNAPSHOTD_SECRET_SCAN`` and the other daemon settings come from the environment.

Usage: ``python -m bench.soak [--captures 100000] [--every 2000] [--files 2000]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from pathlib import Path

import psutil

from bench.common import DaemonProc, make_tree, tree_file

QUIET = {"SNAPSHOTD_SETTLE_MS": "600000", "SNAPSHOTD_MAX_WAIT_MS": "600000"}


def run(captures: int, every: int, files: int, leftovers: list[Path]) -> dict:
    """The soak's JSON; the directories it wrote are added to ``leftovers`` for the caller to
    remove after printing (removing 100,000 checkpoints' loose objects takes minutes)."""
    work = Path(tempfile.mkdtemp(prefix="sdsoak"))
    leftovers.append(work)
    wt = make_tree(work / "wt", files)
    daemon = DaemonProc(QUIET)
    leftovers.append(daemon.dir)
    proc = psutil.Process(daemon.proc.pid)
    samples: list[dict] = []
    started = time.monotonic()

    def sample(done: int) -> None:
        samples.append({"captures": done, "rss_mb": round(proc.memory_info().rss / 2**20, 1),
                        "fds": proc.num_fds(),
                        "elapsed_s": round(time.monotonic() - started, 1)})

    try:
        with daemon.client() as c:
            c.attempt_begin("soak", "n", str(wt))
            c.snapshot(str(wt), run_id="soak", node_id="n", source="hook")
        sample(0)
        failed = 0
        for i in range(1, captures + 1):
            tree_file(wt, i % files).write_text(f"soak {i}\n")
            with daemon.client() as c:
                reply = c.snapshot(str(wt), run_id="soak", node_id="n", source="hook",
                                   tool_use_id=f"toolu_soak_{i:08d}")
            failed += "seq" not in reply
            if i % every == 0 or i == captures:
                sample(i)
        return {"bench": "soak", "files": files, "captures": captures,
                "failed_captures": failed, "samples": samples,
                "kb_per_capture": _slope(samples), "errors": daemon.error_lines()}
    finally:
        daemon.stop(remove=False)


def _slope(samples: list[dict]) -> float | None:
    """RSS growth per capture (KB) from the middle sample to the last: the first half is
    warm-up (caches filling, the allocator's arenas)."""
    if len(samples) < 3:
        return None
    mid, last = samples[len(samples) // 2], samples[-1]
    if last["captures"] == mid["captures"]:
        return None
    return round((last["rss_mb"] - mid["rss_mb"]) * 1024 / (last["captures"] - mid["captures"]),
                 4)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--captures", type=int, default=100_000)
    parser.add_argument("--every", type=int, default=2000, help="Sample RSS every N captures.")
    parser.add_argument("--files", type=int, default=2000)
    args = parser.parse_args()
    # A soak is often cut short (``timeout``): SIGTERM unwinds, so the daemon is stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    if args.captures < 1 or args.every < 1 or args.files < 1:
        parser.error("--captures, --every and --files must be at least 1")
    leftovers: list[Path] = []
    try:
        doc = run(args.captures, args.every, args.files, leftovers)
        doc["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        print(json.dumps(doc, indent=2), flush=True)
    finally:
        for path in leftovers:
            shutil.rmtree(path, ignore_errors=True)


if __name__ == "__main__":
    main()
