"""Load: worktrees × hooks fired in bursts of concurrent hooks.

Every hook is a real ``snapshot-hook`` process with a Claude Code-shaped payload (or, with
``--http``, the same payload POSTed to the daemon's loopback HTTP hook endpoint, as Claude
Code's ``"type": "http"`` hooks do; with ``--native``, a ``snapshot-hook-native`` process, built
for the run by the side's ``snapshotd native-hook``); each edits its worktree first. Reports hook wall-time
p50/p99 as the agent sees it, the hooks' own CPU time (children's user+system, per hook),
daemon-side capture p50/p99 (from ``status``), the daemon's CPU time, the load average, gaps and
errors, and the daemon's ledger read-cache hits and (``--http``) the endpoint's thread starts.

Sessions decide how the CPU is shared on Linux (autogroup scheduling: each session one group;
``autogroup`` in the JSON says whether it is on). The daemon runs in a session of its own, as
its autostart and user services start it (``--daemon-session bench``: in the bench's, as a
``snapshotd serve`` typed into the agents' terminal). ``--agent-sessions one`` (the default)
starts every hook from the bench's session, like agents run by one runner; ``each`` gives every
hook a session of its own, like agents in separate terminals, so each competes with the daemon
as an equal.

``--side NAME`` / ``--side NAME:PYTHON:CWD`` (as in ``bench.compare``: another install's
virtualenv and checkout runs the daemon) with ``--rounds N`` runs every side once per round,
interleaved so each sees the same machine load, and prints each side's runs and medians. The
runs' files are removed after the last run, not after each (a removal slows the next run's file
creations on some disks: see ``main``).

Usage: ``python -m bench.load [--worktrees 8] [--hooks 100] [--burst 16] [--http | --native]
[--agent-sessions one|each] [--daemon-session own|bench] [--quiet-disk-ms 0.05] [--dir /tmp]
[--side old:/work/main/.venv/bin/python:/work/main --side new --rounds 3]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

from bench.common import (
    DaemonProc,
    cpu_speed_ms,
    file_create_ms,
    http_poster,
    make_tree,
    median,
    parse_side,
    write_payload,
)

# The hook as ``snapshot-hook`` runs it, under the side's own interpreter (its install's start-up
# cost: an editable install's import finder alone adds ~15 ms of CPU to every hook).
HOOK_CODE = "from snapshotd_client.hook import main; main()"


def run(worktrees: int, hooks: int, burst: int, files: int, use_http: bool = False,
        warm: bool = True, python: str = sys.executable, cwd: Path | None = None, *,
        agent_sessions: str = "one", daemon_session: str = "own", native: bool = False,
        quiet_disk_ms: float = 0.0, parent: str = "/tmp",
        removals: list[Path] | None = None) -> dict:
    """One run. Its trees and the daemon's home are removed at the end, or, given
    ``removals``, added to it for the caller to remove once every run is done."""
    work = Path(tempfile.mkdtemp(prefix="sdload", dir=parent))
    hook_argv = [python, "-c", HOOK_CODE]
    if native:
        hook_argv = [str(_build_native(python, cwd, work))]
    trees = [make_tree(work / f"wt{i}", files) for i in range(worktrees)]
    extra = {"SNAPSHOTD_HTTP_HOOK": "1", "SNAPSHOTD_HTTP_HOOK_PORT": "0"} if use_http else {}
    daemon = DaemonProc(extra, python=python, cwd=cwd, own_session=daemon_session == "own",
                        parent=parent)
    gaps_file = daemon.home / "gaps.ndjson"
    post = http_poster(daemon) if use_http else None
    try:
        def fire(n: int) -> tuple[int, float]:
            wt = trees[n % worktrees]
            (wt / f"load-{n}.txt").write_text(str(n))
            body = write_payload(f"load-{n % worktrees}", wt, wt / f"load-{n}.txt",
                                 f"toolu_load_{n}")
            t0 = time.perf_counter()
            if post is not None:
                code = post(body)
            else:
                code = subprocess.run(hook_argv, input=body, env=daemon.env,
                                      cwd=cwd, start_new_session=agent_sessions == "each"
                                      ).returncode
            return code, (time.perf_counter() - t0) * 1000

        notifiers = _warm(daemon, trees) if warm else None
        total = worktrees * hooks
        disk_wait_s, create_ms = _quiet_disk(daemon.dir, quiet_disk_ms)
        latencies: list[float] = []
        codes: list[int] = []
        children_before = _children_cpu()
        daemon_before = _cpu(daemon.proc.pid)
        started = time.perf_counter()
        with ThreadPoolExecutor(burst) as pool:
            for first in range(0, total, burst):
                for code, ms in pool.map(fire, range(first, min(total, first + burst))):
                    codes.append(code)
                    latencies.append(ms)
        wall = time.perf_counter() - started
        hook_cpu = _children_cpu() - children_before
        daemon_cpu = _cpu(daemon.proc.pid) - daemon_before
        with daemon.client() as c:
            status = c.status()
        gaps = gaps_file.read_text().splitlines() if gaps_file.exists() else []
        ordered = sorted(latencies)
        ok = 200 if use_http else 0
        return {
            "bench": "load", "warm": warm,
            "transport": "http" if use_http else "native" if native else "process",
            "worktrees": worktrees, "hooks_per_worktree": hooks, "burst": burst,
            "agent_sessions": agent_sessions, "daemon_session": daemon_session,
            # Watcher notifiers when the timed hooks began (1: the warm-up's merge was done).
            "notifiers_at_start": notifiers,
            "autogroup": _autogroup(),
            "files_per_worktree": files, "cpus": os.cpu_count(),
            "loadavg_1m": round(os.getloadavg()[0], 2), "wall_s": round(wall, 2),
            # What creating one file cost where the store is, just before the timed hooks.
            "file_create_ms": create_ms, "dir": parent,
            # This host's speed just after the timed hooks (``cpu_speed_ms``: lower is faster).
            "cpu_speed_ms": cpu_speed_ms(),
            # How long the run waited for it to fall under --quiet-disk-ms (0: not asked).
            "disk_wait_s": disk_wait_s,
            "hook_ms_p50": round(ordered[len(ordered) // 2], 1),
            "hook_ms_p99": round(ordered[max(0, int(len(ordered) * 0.99) - 1)], 1),
            "hook_cpu_ms_per_hook": round(hook_cpu * 1000 / total, 1),
            "daemon_cpu_ms_per_hook": round(daemon_cpu * 1000 / total, 1),
            "daemon_capture_ms": status["latency_ms"]["tier1"],
            "failed_hooks": sum(1 for c in codes if c != ok),
            "gaps": len(gaps),
            # The daemon's own count of the spool by reason (absent from older installs).
            "gap_reasons": status.get("gap_spool", {}).get("by_reason"),
            "daemon_errors": status["counters"]["errors"],
            # What they were: the first gaps' reasons and details, the log's error lines.
            "gap_details": [_gap_detail(line) for line in gaps[:5]],
            "daemon_error_lines": daemon.error_lines() if status["counters"]["errors"] else [],
            "checkpoints": status["checkpoints"]["checkpoints"],
            # Nothing lost: every tool call has its checkpoint (two calls on one worktree in
            # one burst may share one) or a gap.
            "tool_calls": total, "tool_calls_recorded": _tool_calls(daemon.home),
            # Absent from installs without them (an older side of ``--side``).
            "ledger_cache_hits": status["ledger"].get("cache_hits"),
            "http_threads_started": status.get("http_hook", {}).get("threads_started"),
            # --native: payloads the daemon ran, and those handed to the Python hook.
            "native_hook": status.get("native_hook") if native else None,
        }
    finally:
        daemon.stop(remove=removals is None)
        if removals is None:
            subprocess.run(["rm", "-rf", str(work)])
        else:
            removals.extend([work, daemon.dir])


def _quiet_disk(directory: Path, below_ms: float) -> tuple[float, float]:
    """Wait (up to ``QUIET_DISK_WAIT_S``) until creating a file in ``directory`` costs less
    than ``below_ms`` (0: do not wait): the trees the bench just made slow it for tens of
    seconds on some disks. The seconds waited and the last cost measured."""
    started = time.monotonic()
    cost = file_create_ms(directory)
    while below_ms > 0 and cost >= below_ms and time.monotonic() - started < QUIET_DISK_WAIT_S:
        time.sleep(2.0)
        cost = file_create_ms(directory)
    return round(time.monotonic() - started, 1), cost


QUIET_DISK_WAIT_S = 120.0


def _build_native(python: str, cwd: Path | None, work: Path) -> Path:
    """``snapshot-hook-native`` built by the side's own ``snapshotd native-hook``, handing over
    to the side's Python hook."""
    fallback = work / "snapshot-hook"
    fallback.write_text(f"#!{python}\n{HOOK_CODE.replace('; ', chr(10))}\n")
    fallback.chmod(0o755)
    program = work / "snapshot-hook-native"
    subprocess.run([python, "-m", "snapshotd", "native-hook", "-o", str(program), "--fallback",
                    str(fallback)], cwd=cwd, check=True, stdout=subprocess.DEVNULL)
    return program


def _warm(daemon: DaemonProc, trees: list[Path]) -> int:
    """Each worktree's first capture (seeding its stat cache: the ``first_capture`` budget of
    ``python -m bench``), taken for the session the hooks attribute to, as tier 2 so the timed
    tier-1 latencies are the steady state; then the watcher's merge of the new worktrees'
    notifiers into one (three seconds after the last was watched, it watches every directory
    of them again: part of watch set-up, once per fleet), waited for up to ``MERGE_WAIT_S``.
    Returns the notifiers left."""
    with daemon.client() as c:
        for i, wt in enumerate(trees):
            c.request("snapshot", cwd=str(wt), tier=2, source="watch", fallback={
                "run_id": f"claude-load-{i}", "node_id": "session", "iteration": 0,
                "attempt": 1, "worktree": str(wt)})
        deadline = time.monotonic() + MERGE_WAIT_S
        while True:
            notifiers = int(c.status()["watcher"]["notifiers"])
            if notifiers <= 1 or time.monotonic() > deadline:
                return notifiers
            time.sleep(0.2)


# How long the warm-up waits for the watcher to merge the new worktrees' notifiers (s).
MERGE_WAIT_S = 15.0


def _tool_calls(home: Path) -> int:
    db = sqlite3.connect(f"file:{home / 'snapshotd.db'}?mode=ro", uri=True)
    try:
        return int(db.execute("SELECT count(*) FROM tool_calls").fetchone()[0])
    finally:
        db.close()


def _autogroup() -> bool | None:
    """Whether the kernel schedules by session (autogroup); None where it cannot say."""
    try:
        return Path("/proc/sys/kernel/sched_autogroup_enabled").read_text().strip() == "1"
    except OSError:
        return None


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _cpu(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--worktrees", type=int, default=8)
    parser.add_argument("--hooks", type=int, default=100)
    parser.add_argument("--burst", type=int, default=16)
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--cold", action="store_true",
                        help="time each worktree's first capture too (no warm-up)")
    parser.add_argument("--http", action="store_true",
                        help="POST to the daemon's HTTP hook endpoint instead of a process")
    parser.add_argument("--native", action="store_true",
                        help="run snapshot-hook-native (built for the run) instead of Python")
    parser.add_argument("--agent-sessions", choices=("one", "each"), default="one",
                        help="hooks from the bench's session, or each from its own")
    parser.add_argument("--daemon-session", choices=("own", "bench"), default="own",
                        help="the daemon in a session of its own, or in the bench's")
    parser.add_argument("--side", action="append", default=[],
                        help="NAME (this install) or NAME:PYTHON:CWD; repeat to compare")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--quiet-disk-ms", type=float, default=0.0,
                        help="before timing, wait (up to 120 s) until creating a file costs "
                             "less than this (ms); 0: do not wait")
    parser.add_argument("--dir", default="/tmp",
                        help="where the worktrees and the daemon's home go (a tmpfs mounted "
                             "for the run takes the disk's state out of an A/B comparison)")
    args = parser.parse_args()
    if args.http and args.native:
        parser.error("--http and --native are two transports: pick one")
    sessions = {"agent_sessions": args.agent_sessions, "daemon_session": args.daemon_session,
                "native": args.native, "quiet_disk_ms": args.quiet_disk_ms, "parent": args.dir}
    if not args.side:
        print(json.dumps(run(args.worktrees, args.hooks, args.burst, args.files, args.http,
                             not args.cold, **sessions), indent=2))
        return
    sides = [parse_side(spec) for spec in args.side]
    runs: dict[str, list[dict]] = {name: [] for name, _, _ in sides}
    # Every run's files are removed only once all runs are done: on ext4 without a journal a
    # deleted inode slows each file creation in its block group for minutes after (the kernel
    # skips inodes deleted recently, checking each), so a run that removed its thousands of
    # files would slow whichever run came next, and not the daemon's own doing.
    removals: list[Path] = []
    try:
        for _ in range(args.rounds):
            for name, python, cwd in sides:
                runs[name].append(run(args.worktrees, args.hooks, args.burst, args.files,
                                      args.http, not args.cold, python, cwd, **sessions,
                                      removals=removals))
    finally:
        for path in removals:
            subprocess.run(["rm", "-rf", str(path)])
    print(json.dumps({name: {"median": _medians(rows), "runs": [_brief(r) for r in rows]}
                      for name, rows in runs.items()}, indent=2))


def _brief(row: dict) -> dict:
    capture = row["daemon_capture_ms"]
    return {"capture_p50": capture["p50"], "capture_p99": capture["p99"],
            **{k: row[k] for k in _FIGURES if k not in ("capture_p50", "capture_p99")},
            "gap_reasons": row["gap_reasons"],
            **{k: row[k] for k in ("gap_details", "daemon_error_lines") if row.get(k)}}


_FIGURES = ("capture_p50", "capture_p99", "hook_ms_p50", "hook_ms_p99", "hook_cpu_ms_per_hook",
            "daemon_cpu_ms_per_hook", "loadavg_1m", "file_create_ms", "cpu_speed_ms", "disk_wait_s",
            "failed_hooks",
            "gaps", "daemon_errors",
            "tool_calls", "tool_calls_recorded")


def _medians(rows: list[dict]) -> dict:
    briefs = [_brief(r) for r in rows]
    return {k: median([float(b[k]) for b in briefs]) for k in _FIGURES}


def _gap_detail(line: str) -> dict:
    try:
        gap = json.loads(line)
    except ValueError:
        return {"unreadable": line[:300]}
    return {"reason": gap.get("reason"), "detail": str(gap.get("detail"))[:300]}


if __name__ == "__main__":
    main()

