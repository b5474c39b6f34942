"""Tool calls during a verification scan (docs/watcher.md, "A verification's scan runs off the
worktree's lock").

On a generated (cached) worktree of ``--files`` files: an attempt begun and its first capture
(a full scan, timed: ``first_capture_s``), then an agent at work (``--work`` tool calls, each a
one-file write and a tier-1 capture, 0.7 s apart), then a pause until the periodic verification
begins (``verify_interval_s`` is ``--interval``; a worktree whose scans are long waits for twice
a scan's length of quiet first), then the agent resumes at once: ``--resume`` tool calls 0.3 s
apart. The daemon says when a scan begins through the ``full-scan`` mark of its test seams
(``SNAPSHOTD_DELAY_AT=full-scan:0``: no delay, only the mark file), so the resumed calls land
inside the scan, not by luck of timing.

Prints JSON: ``during`` (the resumed tool calls whose reply came before the verification had
finished: count, p50, max ms), ``after`` (the rest), ``verification_s`` (from the scan's start
to its count in ``status``, measured to the polling), the daemon's RSS before the pause, its peak
from then on (sampled every 20 ms) and after, ``drifts`` and the gaps (there should be
none), and beside them the peer's scan: ``git status`` with a private index on the same tree in
the same run (what a shadow-git checkpointer pays for the same look at every file, holding
its own index lock).

Usage: ``python -m bench.verification [--files 1000000] [--cache /tmp/bench-1m] [--python
OTHER/bin/python --pause S]`` (``--pause``: for an install older than the mark, resume after
``S`` seconds of quiet instead).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from bench.common import DaemonProc, file_create_ms, git_env, median, tree_file
from bench.tree import cached_tree
from snapshotd_client.paths import gaps_path


def run(files: int, cache: Path, interval: float, work: int, resume: int,
        python: str = sys.executable, pause: float | None = None) -> dict:
    wt = cached_tree(files, cache)
    scratch = Path(tempfile.mkdtemp(prefix="sdverify", dir="/tmp"))
    mark = scratch / "scan-began"
    daemon = DaemonProc({"SNAPSHOTD_VERIFY_INTERVAL_S": str(interval),
                         "SNAPSHOTD_DELAY_AT": "full-scan:0", "SNAPSHOTD_DELAY_MARK": str(mark)},
                        python=python, cwd=scratch)
    out: dict = {"files": files, "interval_s": interval}
    try:
        with daemon.client() as c:
            c.attempt_begin("verify", "n", str(wt))
            started = time.perf_counter()
            c.snapshot(str(wt), run_id="verify", node_id="n")
            out["first_capture_s"] = round(time.perf_counter() - started, 2)
            out["file_create_ms"] = file_create_ms(daemon.dir)

            def tool_call(i: int, path: Path) -> float:
                path.write_text(f"tool call {i}\n")
                began = time.perf_counter()
                c.snapshot(str(wt), run_id="verify", node_id="n", source="hook")
                return (time.perf_counter() - began) * 1000

            at_work = []
            for i in range(work):
                at_work.append(tool_call(i, tree_file(wt, 5)))
                time.sleep(0.7)
            out["working_ms"] = {"n": len(at_work), "p50": median(at_work),
                                 "max": round(max(at_work), 1)}
            before = c.status()["watcher"]["verifications"]
            proc = psutil.Process(daemon.proc.pid)
            out["rss_mb_before"] = round(proc.memory_info().rss / 2**20)
            sampler = _RssSampler(proc)
            mark.unlink(missing_ok=True)
            paused = time.monotonic()
            if pause is not None:  # a daemon without the mark (an older install)
                time.sleep(pause)
                mark.touch()
            while not mark.exists() and time.monotonic() - paused < 600:
                time.sleep(0.02)
            if not mark.exists():
                raise SystemExit("no verification began within 600 s of quiet")
            scan_began = time.monotonic()
            out["scan_began_after_quiet_s"] = round(scan_began - paused, 1)
            during: list[float] = []
            after: list[float] = []
            finished_at = None
            for i in range(resume):
                ms = tool_call(100 + i, tree_file(wt, 7))
                done = c.status()["watcher"]["verifications"] > before
                if done and finished_at is None:
                    finished_at = time.monotonic()
                (after if done else during).append(ms)
                time.sleep(0.3)
            while finished_at is None and time.monotonic() - scan_began < 600:
                if c.status()["watcher"]["verifications"] > before:
                    finished_at = time.monotonic()
                time.sleep(0.05)
            out["verification_s"] = round((finished_at or time.monotonic()) - scan_began, 1)
            out["during"] = _summary(during)
            out["rss_mb_peak"] = sampler.stop()
            out["rss_mb_after"] = round(proc.memory_info().rss / 2**20)
            out["after"] = _summary(after)
            status = c.status()
            [row] = [w for w in status["watched"] if w["path"] == str(wt)]
            out["drifts"] = row["drifts"]
            out["fast_path"] = row["fast_path"]
            gaps_file = gaps_path(daemon.home)
            gaps = [json.loads(line) for line in gaps_file.read_text().splitlines()] \
                if gaps_file.exists() else []
            out["gaps"] = [{"reason": g["reason"], "detail": g.get("detail", "")[:200]}
                           for g in gaps]
        out["peer_scan_s"] = _peer_scan(wt, scratch)
    finally:
        daemon.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    return out


class _RssSampler:
    """The daemon's peak RSS (MB), sampled every 20 ms from start to ``stop``."""

    def __init__(self, proc: psutil.Process) -> None:
        self.proc = proc
        self.peak = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.done.wait(0.02):
            self.peak = max(self.peak, self.proc.memory_info().rss)

    def stop(self) -> int:
        self.done.set()
        self.thread.join()
        return round(self.peak / 2**20)


def _summary(values: list[float]) -> dict:
    return {"n": len(values), "p50": median(values) if values else None,
            "max": round(max(values), 1) if values else None}


def _peer_scan(wt: Path, scratch: Path) -> float:
    """``git status`` over the worktree with a private copy of its index (warm, as the
    daemon's cache is)."""
    index = scratch / "peer-index"
    shutil.copyfile(wt / ".git" / "index", index)
    env = git_env(GIT_INDEX_FILE=str(index))
    args = ["git", "-c", "core.untrackedCache=false", "status", "--porcelain"]
    subprocess.run(args, cwd=wt, env=env, capture_output=True, check=True)  # refreshes the copy
    started = time.perf_counter()
    subprocess.run(args, cwd=wt, env=env, capture_output=True, check=True)
    return round(time.perf_counter() - started, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--cache", type=Path, default=Path("/tmp/bench-1m"))
    parser.add_argument("--interval", type=float, default=10.0,
                        help="the daemon's verify_interval_s")
    parser.add_argument("--work", type=int, default=20)
    parser.add_argument("--resume", type=int, default=40)
    parser.add_argument("--python", default=sys.executable,
                        help="the interpreter whose snapshotd serves (another install's)")
    parser.add_argument("--pause", type=float, default=None,
                        help="resume after this many seconds of quiet instead of when a scan "
                             "begins (for a daemon that does not write the mark)")
    args = parser.parse_args()
    print(json.dumps(run(args.files, args.cache, args.interval, args.work, args.resume,
                         args.python, args.pause), indent=2))


if __name__ == "__main__":
    main()
