"""Start-up: what a command and a daemon cost before they do anything.

An agent runner calls the CLI (``snapshotd status``, ``snapshotd show``) and starts the daemon;
the test suite does both thousands of times. Measured per side, interleaved round by round so
each side sees the same machine: the CPU time (user+system, the process's own) and wall time of

- ``status``: ``snapshotd status --json`` with no daemon (the CLI's floor: parse, load the
  command, fail to connect);
- ``show``: ``snapshotd show --json`` of a checkpoint (opens the ledger and the store);
- ``daemon``: ``snapshotd serve`` from exec until it answers ``ping``, then SIGTERM until it
  has exited (wall: to ready; CPU: the whole life);

beside the peer, ``git rev-parse HEAD`` in the same worktree (a native command's start).

Usage: ``python -m bench.startup [--rounds 10] [--side old:/tmp/old/.venv/bin/python:/tmp/old
--side new]``; a side is ``NAME`` (this interpreter and checkout) or ``NAME:PYTHON:CWD``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import median, parse_side
from snapshotd_client import Client, SnapshotdError


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--side", action="append", default=[])
    args = parser.parse_args()
    sides = [parse_side(s) for s in (args.side or ["this"])]
    work = Path(tempfile.mkdtemp(prefix="sdstart"))
    try:
        wt = work / "wt"
        wt.mkdir()
        subprocess.run(["git", "init", "-q", str(wt)], check=True)
        (wt / "a.txt").write_text("a\n")
        subprocess.run(["git", "-C", str(wt), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(wt), "-c", "user.name=b", "-c", "user.email=b@b",
                        "commit", "-qm", "a"], check=True)
        samples: dict[str, dict[str, list[tuple[float, float]]]] = {
            name: {"status": [], "show": [], "daemon": []} for name, _, _ in sides}
        peer: list[tuple[float, float]] = []
        for _name, python, cwd in sides:
            compile_side(python, cwd)
        for _ in range(args.rounds):
            for name, python, cwd in sides:
                measure_side(samples[name], python, cwd, wt, work / name)
            peer.append(timed(["git", "-C", str(wt), "rev-parse", "HEAD"], os.environ, None))
        print(json.dumps({"rounds": args.rounds, "sides": {
            name: {what: summary(runs) for what, runs in rows.items()}
            for name, rows in samples.items()}, "peer_git_rev_parse": summary(peer)}, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)


def compile_side(python: str, cwd: Path | None) -> None:
    """Compile the side's modules first: where ``PYTHONDONTWRITEBYTECODE`` is set (stock CI
    images, this bench's own machine) a checkout nobody compiled would otherwise compile every
    module at every start, and that side would measure the compiler."""
    root = cwd if cwd is not None else Path(__file__).resolve().parents[1]
    subprocess.run([python, "-m", "compileall", "-q", str(root / "snapshotd"),
                    str(root / "client")], check=True, stdout=subprocess.DEVNULL)


def measure_side(rows: dict[str, list[tuple[float, float]]], python: str, cwd: Path | None,
                 wt: Path, scratch: Path) -> None:
    """One round of one side: a fresh home, each command once."""
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAPSHOTD_")}
    env.update(SNAPSHOTD_HOME=str(scratch / "home"), SNAPSHOTD_SOCKET=str(scratch / "s.sock"),
               SNAPSHOTD_AUTOSTART="0", XDG_CONFIG_HOME=str(scratch / "config"))
    cli = [python, "-m", "snapshotd"]
    rows["status"].append(timed([*cli, "status", "--json"], env, cwd))
    rows["daemon"].append(daemon_life([*cli, "serve"], env, cwd, scratch / "s.sock", wt))
    rows["show"].append(timed([*cli, "show", "bench", "--node", "n", "--json"], env, cwd))


def timed(argv: list[str], env: dict[str, str], cwd: Path | None) -> tuple[float, float]:
    """(wall ms, CPU ms) of one run to exit, whatever its status."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    return wall * 1000, cpu_since(before) * 1000


def daemon_life(argv: list[str], env: dict[str, str], cwd: Path | None, sock: Path,
                wt: Path) -> tuple[float, float]:
    """(ms to its first ``ping`` answer, CPU ms of its whole life). Its life holds one capture
    of ``wt`` (one file), for ``show`` to read."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    ready = None
    deadline = time.monotonic() + 30
    while ready is None and time.monotonic() < deadline:
        try:
            with Client(sock, timeout=2) as c:
                c.ping()
            ready = time.perf_counter() - start
        except (OSError, SnapshotdError):  # not listening yet
            time.sleep(0.002)
    if ready is None:
        proc.kill()
        proc.wait()
        raise RuntimeError("the daemon did not answer ping within 30 s")
    with Client(sock, timeout=30) as c:
        c.snapshot(str(wt), run_id="bench", node_id="n")
    proc.send_signal(signal.SIGTERM)
    proc.wait(60)
    return ready * 1000, cpu_since(before) * 1000


def cpu_since(before: resource.struct_rusage) -> float:
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def summary(runs: list[tuple[float, float]]) -> dict[str, float]:
    return {"wall_ms_median": round(median([w for w, _ in runs]), 1),
            "cpu_ms_median": round(median([c for _, c in runs]), 1)}


if __name__ == "__main__":
    main()
