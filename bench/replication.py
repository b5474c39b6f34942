"""Replication budgets (docs/performance.md): lag to a local bare remote, and what replication
costs captures.

Measures, on the same generated worktree:
- ``lag_ms``: from a tier-1 capture's reply until the remote's attempt ref names that commit
  (the remote's ref file is polled every 5 ms, no git process in the loop), median and p90;
- ``capture_ms``: the daemon's own tier-1 capture time (``elapsed_ms``) and the client round
  trip, with replication off and on (same tree, same rounds, same pacing), and their ratio.

Budgets: lag median ≤ 1000 ms; capture median with replication on within 10 % of off.

Usage: ``python -m bench.replication [--files 2000] [--rounds 40] [--pace-ms 100]``; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from bench.common import DaemonProc, make_tree, median


def _remote_ref(remote: Path, ref: str) -> str | None:
    loose = remote / ref
    try:
        return loose.read_text().strip()
    except OSError:
        pass
    try:
        for line in (remote / "packed-refs").read_text().splitlines():
            if line.endswith(" " + ref):
                return line.split()[0]
    except OSError:
        pass
    return None


def _p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3) if ordered else 0.0


def _session(wt: Path, rounds: int, pace_s: float, remote: Path | None, run_id: str) -> dict:
    extra = {"SNAPSHOTD_SETTLE_MS": "600000", "SNAPSHOTD_MAX_WAIT_MS": "600000"}
    if remote is not None:
        extra["SNAPSHOTD_REMOTE"] = str(remote)
    daemon = DaemonProc(extra)
    ref = f"refs/snapshotd/runs/{run_id}/n/0/1"
    daemon_ms, wall_ms, lag_ms = [], [], []
    try:
        target = next(wt.rglob("f1.txt"))
        with daemon.client() as c:
            c.snapshot(str(wt), run_id=run_id, node_id="n")  # first capture: not measured
            time.sleep(1.0)
            for i in range(rounds):
                target.write_text(f"{run_id} round {i}\n")
                t0 = time.perf_counter()
                reply = c.snapshot(str(wt), run_id=run_id, node_id="n", tool_use_id=f"t{i}")
                t1 = time.perf_counter()
                wall_ms.append((t1 - t0) * 1000)
                daemon_ms.append(reply["elapsed_ms"])
                if remote is not None and i % 2 == 0:
                    # Every other round waits for the push (lag); the others are captured while
                    # a push may be in flight, as under a busy agent.
                    deadline = t1 + 10
                    while _remote_ref(remote, ref) != reply["commit"]:
                        if time.perf_counter() > deadline:
                            raise RuntimeError("replication did not arrive within 10 s")
                        time.sleep(0.005)
                    lag_ms.append((time.perf_counter() - t1) * 1000)
                # Agents' tool calls are spaced (every round, both modes): the next capture
                # comes ``pace`` after this one's push was seen, or after this capture.
                time.sleep(pace_s)
    finally:
        daemon.stop()
    out = {"daemon_capture_ms_median": median(daemon_ms), "daemon_capture_ms_p90":
           _p(daemon_ms, 0.9), "client_round_trip_ms_median": median(wall_ms)}
    if lag_ms:
        out.update(lag_ms_median=median(lag_ms), lag_ms_p90=_p(lag_ms, 0.9),
                   lag_samples=len(lag_ms))
    return out


def run(files: int, rounds: int, pace_ms: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="sdbrep", dir="/tmp"))
    try:
        wt = make_tree(work / "wt", files)
        remote = work / "remote.git"
        subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
        pace = pace_ms / 1000
        # Off, on, off, on: alternating halves damp drift of a shared machine.
        off1 = _session(wt, rounds // 2, pace, None, "off1")
        on1 = _session(wt, rounds // 2, pace, remote, "on1")
        off2 = _session(wt, rounds // 2, pace, None, "off2")
        on2 = _session(wt, rounds // 2, pace, remote, "on2")
        off = median([off1["daemon_capture_ms_median"], off2["daemon_capture_ms_median"]])
        on = median([on1["daemon_capture_ms_median"], on2["daemon_capture_ms_median"]])
        lag = median([on1["lag_ms_median"], on2["lag_ms_median"]])
        return {
            "bench": "replication", "files": files, "rounds": rounds, "pace_ms": pace_ms,
            "push_interval_ms": 200,
            "replication_off": [off1, off2], "replication_on": [on1, on2],
            "capture_ms_median_off": off, "capture_ms_median_on": on,
            "capture_ratio_on_to_off": round(on / off, 3) if off else None,
            "lag_ms_median": lag,
            "budget_lag_ms_median_le_1000": lag <= 1000,
            "budget_capture_within_10pct": bool(off) and on <= off * 1.10,
        }
    finally:
        subprocess.run(["rm", "-rf", str(work)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--pace-ms", type=int, default=100)
    args = parser.parse_args()
    print(json.dumps(run(args.files, args.rounds, args.pace_ms), indent=2))


if __name__ == "__main__":
    main()
