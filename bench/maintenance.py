"""Store bytes over a long session, before and after maintenance, beside ``git gc`` of the
same commits; capture latency while maintenance runs.

For each tree size (``bench.common.make_tree``), one daemon with automatic maintenance and the
disk budget off: ``--calls`` one-file tool calls (a changed file, a capture over the socket),
then ``store_bytes_loose`` (``git count-objects -v``: loose + packed), ``git_gc_copy_bytes``
(``git gc --prune=now`` of a copy of the store at that moment); then the ``maintain`` op (the
automatic pass: ``git repack -d``) with captures running beside it: ``store_bytes_packed`` and
``capture_during_pack`` (daemon-side ``elapsed_ms`` p50/p99/max and how many); then
``gc --prune-grace 0s`` likewise (``store_bytes_pruned``, ``capture_during_prune``);
``capture_steady`` is the same figures for the tool calls before any maintenance;
``store_bytes_final`` after one more pass with no capture beside it, to compare with
``git_gc_copy_bytes_end`` (``git gc`` of a copy holding the same commits).

Usage: ``python -m bench.maintenance [--sizes 10000,100000] [--calls 1000]``; prints one JSON
document per size as it is measured.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import threading
import time
from pathlib import Path

from bench.common import bench_daemon, make_tree, tree_file

OFF = {"SNAPSHOTD_MAINTENANCE_INTERVAL_S": "0", "SNAPSHOTD_MAINTENANCE_LOOSE_OBJECTS": "0",
       "SNAPSHOTD_STORE_BUDGET": "", "SNAPSHOTD_FREE_SPACE_FLOOR": ""}


def _bytes(git_dir: Path) -> int:
    out = subprocess.run(["git", "--git-dir", str(git_dir), "count-objects", "-v"],
                         capture_output=True, text=True, check=True).stdout
    kv = dict(line.split(": ") for line in out.splitlines())
    return (int(kv["size"]) + int(kv["size-pack"]) + int(kv["size-garbage"])) * 1024


def _stats(ms: list[float]) -> dict:
    if not ms:
        return {"count": 0}
    s = sorted(ms)
    return {"count": len(s), "p50": round(s[len(s) // 2], 2),
            "p99": round(s[min(len(s) - 1, int(len(s) * 0.99))], 2), "max": round(s[-1], 2)}


def _during(client_factory, wt: Path, files: int, op: str, fields: dict, start: int) -> tuple:
    """Run ``op`` on one connection while captures go on over another: their latencies."""
    done = threading.Event()
    result: dict = {}

    def work() -> None:
        try:
            with client_factory() as c:
                result["reply"] = c.request(op, **fields)
        except Exception as exc:  # noqa: BLE001 - reported in the JSON
            result["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            done.set()

    thread = threading.Thread(target=work)
    clock = time.monotonic()
    thread.start()
    lat: list[float] = []
    n = start
    with client_factory() as c:
        while not done.is_set():
            n += 1
            tree_file(wt, (n * 7919) % files).write_text(f"during {n}\n")
            lat.append(c.snapshot(str(wt), run_id="bench", node_id="n")["elapsed_ms"])
    thread.join()
    return lat, result, round(time.monotonic() - clock, 2), n


def run(files: int, calls: int) -> dict:
    out: dict = {"bench": "maintenance", "files": files, "calls": calls}
    with bench_daemon("sdmaint", extra_env=OFF) as (base, daemon):
        wt = make_tree(base / "wt", files)
        lat: list[float] = []
        with daemon.client() as c:
            c.attempt_begin("bench", "n", str(wt))
            c.snapshot(str(wt), run_id="bench", node_id="n")
            for n in range(calls):
                tree_file(wt, (n * 7919) % files).write_text(f"call {n}\n")
                lat.append(c.snapshot(str(wt), run_id="bench", node_id="n")["elapsed_ms"])
        out["capture_steady"] = _stats(lat)
        store = daemon.home / "store.git"
        out["store_bytes_loose"] = _bytes(store)
        copy = base / "copy.git"
        shutil.copytree(store, copy)
        clock = time.monotonic()
        subprocess.run(["git", "--git-dir", str(copy), "gc", "-q", "--prune=now"], check=True)
        out["git_gc_copy_s"] = round(time.monotonic() - clock, 2)
        out["git_gc_copy_bytes"] = _bytes(copy)
        lat, res, secs, n = _during(daemon.client, wt, files, "maintain", {}, calls)
        out["capture_during_pack"] = {**_stats(lat), "pack_s": secs, **res}
        out["store_bytes_packed"] = _bytes(store)
        lat, res, secs, n = _during(daemon.client, wt, files, "gc", {"safety_interval_s": 0},
                                    n)
        out["capture_during_prune"] = {**_stats(lat), "prune_s": secs,
                                       "error": res.get("error")}
        out["store_bytes_pruned"] = _bytes(store)
        # The captures made during the two passes left loose objects (a block each on disk):
        # one more pass with none running, for the figure beside git gc of the same commits.
        with daemon.client() as c:
            c.request("maintain")
        out["store_bytes_final"] = _bytes(store)
        shutil.rmtree(copy)
        shutil.copytree(store, copy)
        subprocess.run(["git", "--git-dir", str(copy), "gc", "-q", "--prune=now"], check=True)
        out["git_gc_copy_bytes_end"] = _bytes(copy)
        out["errors"] = daemon.error_lines()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000")
    parser.add_argument("--calls", type=int, default=1000)
    args = parser.parse_args()
    for size in args.sizes.split(","):
        # One JSON document per size, printed as soon as it is measured.
        print(json.dumps(run(int(size), args.calls), indent=2), flush=True)


if __name__ == "__main__":
    main()
