"""Daemon-side capture latency with the ledger on SQLite vs PostgreSQL (budget, docs/performance.md:
PostgreSQL-ledger capture overhead ≤ 3 ms over SQLite).

Runs three daemons on the same small generated tree, interleaved round by round so that disk and
CPU noise falls on all of them alike:
- ``sqlite``: the embedded default (``<home>/snapshotd.db``, WAL, synchronous=NORMAL);
- ``postgresql_tcp``: ``ledger_url = postgresql://…@127.0.0.1:PORT/…`` (how another host reaches it);
- ``postgresql_unix``: the same server over its Unix socket.

Each round changes one file and asks each daemon for a tier-1 capture with a new tool id; the
number is the daemon's own ``elapsed_ms`` (attribution, capture, commit, ledger transaction,
reply), plus the no-change (dedup) capture that follows. Unless ``--url`` is given, a private
PostgreSQL cluster is started with the server's durable defaults (fsync on), as a production
ledger would run, and removed afterwards; the daemons run with the default durability=process
(SQLite synchronous=NORMAL, PostgreSQL session synchronous_commit=off).

Usage: ``python -m bench.ledger [--files 500] [--rounds 60] [--url postgresql://…]``; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from bench.common import DaemonProc, make_tree, median


def _p90(values: list[float]) -> float:
    if len(values) < 2:
        return float("nan")
    return round(statistics.quantiles(values, n=10)[-1], 3)


def run(files: int, rounds: int, url: str | None) -> dict:
    cluster = None
    if url is None:
        from tests.support.conftest_pg import PgCluster, find_pg_bin

        bindir = find_pg_bin()
        if bindir is None:
            raise SystemExit("no PostgreSQL binaries found; pass --url")
        cluster = PgCluster(bindir, durable=True).start()
        tcp = cluster.url(cluster.create_database())
        unix = cluster.socket_url(cluster.create_database())
        server = (f"private PostgreSQL ({bindir}), server defaults (fsync=on); the daemon's "
                  "session uses synchronous_commit=off, its durability=process mapping")
    else:
        tcp, unix, server = url, None, "given by --url"
    work = Path(tempfile.mkdtemp(prefix="sdbench", dir="/tmp"))
    wt = make_tree(work / "wt", files)
    backends = {"sqlite": None, "postgresql_tcp": tcp}
    if unix:
        backends["postgresql_unix"] = unix
    # Tier-2 captures would race the measured ones: keep the watcher's window out of the way.
    quiet = {"SNAPSHOTD_SETTLE_MS": "60000", "SNAPSHOTD_MAX_WAIT_MS": "120000"}
    daemons = {name: DaemonProc({**quiet, "SNAPSHOTD_LEDGER_URL": u} if u else quiet)
               for name, u in backends.items()}
    try:
        target = next(wt.rglob("f1.txt"))
        changed: dict[str, list[float]] = {n: [] for n in daemons}
        nochange: dict[str, list[float]] = {n: [] for n in daemons}
        for d in daemons.values():  # the first (full) capture is not what we measure
            with d.client() as c:
                c.snapshot(str(wt), run_id="bench", node_id="n")
        for i in range(rounds):
            order = list(daemons.items())
            if i % 2:
                order.reverse()
            for name, d in order:
                target.write_text(f"round {i} for {name}\n")
                with d.client() as c:
                    r = c.snapshot(str(wt), run_id="bench", node_id="n",
                                   tool_use_id=f"toolu_{i}", source="hook")
                    assert not r["deduped"], r
                    changed[name].append(r["elapsed_ms"])
                    again = c.snapshot(str(wt), run_id="bench", node_id="n")
                    nochange[name].append(again["elapsed_ms"])
        result: dict = {"bench": "ledger", "files": files, "rounds": rounds,
                        "postgresql_server": server, "python": sys.version.split()[0]}
        for name in daemons:
            result[name] = {"capture_1_change_ms_median": median(changed[name]),
                            "capture_1_change_ms_p90": _p90(changed[name]),
                            "capture_no_change_ms_median": median(nochange[name])}
        base = result["sqlite"]["capture_1_change_ms_median"]
        for name in daemons:
            if name != "sqlite":
                over = round(result[name]["capture_1_change_ms_median"] - base, 3)
                result[f"{name}_overhead_ms"] = over
        worst = max(v for k, v in result.items() if k.endswith("_overhead_ms"))
        result["budget_overhead_ms"] = 3.0
        result["within_budget"] = worst <= 3.0
        return result
    finally:
        for d in daemons.values():
            d.stop()
        import shutil

        shutil.rmtree(work, ignore_errors=True)
        if cluster is not None:
            cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--url", default=None, help="an existing PostgreSQL database to use")
    args = parser.parse_args()
    started = time.perf_counter()
    out = run(args.files, args.rounds, args.url)
    out["wall_s"] = round(time.perf_counter() - started, 1)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
