"""The hook's two transports side by side: what a tool call costs over the Unix socket and over
the HTTP hook endpoint, and how much of it is the capture.

One daemon (the HTTP endpoint on, on a free port) watches a generated git worktree; each round
changes one file and captures it over the socket (the client's ``snapshot``, as the process hook
and the native hook send it), then changes it again and POSTs a Claude Code after-tool payload to
``/hook`` (a new connection each time, as an agent's http hook makes it). Also per round, with
no capture: a socket ``ping`` and an authenticated POST to a path that does not exist (the HTTP
machinery alone, answered 404). Reported, medians over ``--rounds``:

- ``capture_ms``: the daemon's own ``elapsed_ms`` of the socket captures;
- ``socket_end_to_end_ms``, ``http_end_to_end_ms``: as the caller sees each (connect to reply);
- ``socket_ping_ms``, ``http_not_found_ms``: each transport's round trip without a capture;
- ``cpu_speed_ms`` and ``file_create_ms`` (``bench.common``): the host's speed phase and what
  creating a file costs where the store is, to compare runs only at similar values.

The peer is the socket transport in the same run: the HTTP row's budget (≤ 5 ms end to end,
docs/performance.md) is the capture plus what HTTP adds to it.

``--cache DIR`` takes the tree from ``bench.tree``'s cache (``python -m bench --cache``'s: the
million-file tree is prepared once and reset to its commit for each run) instead of generating
it under ``--dir``; the daemon's home stays under ``--dir``.

Usage: ``python -m bench.transport [--files 10000] [--rounds 60] [--dir /tmp] [--cache DIR]``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import time
from pathlib import Path

from bench.common import (
    DaemonProc,
    bench_daemon,
    cpu_speed_ms,
    file_create_ms,
    http_poster,
    make_tree,
    median,
    tree_file,
    write_payload,
)
from bench.tree import cached_tree

ENV = {"SNAPSHOTD_SETTLE_MS": "600000", "SNAPSHOTD_MAX_WAIT_MS": "600000",
       "SNAPSHOTD_HTTP_HOOK": "1", "SNAPSHOTD_HTTP_HOOK_PORT": "0"}
RUN, NODE = "transport", "n"


def run(files: int, rounds: int, parent: str, cache: Path | None = None) -> dict:
    with bench_daemon("sdtransport", parent, ENV, daemon_where=parent) as (work, daemon):
        tree = cached_tree(files, cache) if cache else make_tree(work / "wt", files)
        return _measure(daemon, tree, files, rounds)


def _measure(daemon: DaemonProc, wt: Path, files: int, rounds: int) -> dict:
    with daemon.client() as c:
        c.attempt_begin(RUN, NODE, str(wt))
        c.snapshot(str(wt), run_id=RUN, node_id=NODE)
    # The first capture's own events drain and the watcher's verification after it finishes.
    time.sleep(2.5)
    headers = {"X-Snapshotd-Run-Id": RUN, "X-Snapshotd-Node-Id": NODE}
    post_hook = http_poster(daemon, **headers)
    post_elsewhere = http_poster(daemon, path="/not-the-hook", **headers)
    target = tree_file(wt, 0)
    times: dict[str, list[float]] = {k: [] for k in (
        "capture_ms", "socket_end_to_end_ms", "http_end_to_end_ms", "socket_ping_ms",
        "http_not_found_ms")}
    out: dict = {"files": files, "rounds": rounds, "file_create_ms": file_create_ms(daemon.dir),
                 "cpu_speed_ms": cpu_speed_ms()}
    for r in range(rounds):
        target.write_text(f"socket round {r}\n")
        started = time.perf_counter()
        with daemon.client() as c:
            reply = c.snapshot(str(wt), run_id=RUN, node_id=NODE, tool_use_id=f"toolu_s{r}")
        times["socket_end_to_end_ms"].append((time.perf_counter() - started) * 1000)
        times["capture_ms"].append(reply["elapsed_ms"])
        target.write_text(f"http round {r}\n")
        body = write_payload("transport", wt, target, f"toolu_h{r}")
        started = time.perf_counter()
        if post_hook(body) != 200:
            raise RuntimeError("the HTTP hook did not answer 200")
        times["http_end_to_end_ms"].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        with daemon.client() as c:
            c.ping()
        times["socket_ping_ms"].append((time.perf_counter() - started) * 1000)
        started = time.perf_counter()
        if post_elsewhere(b"{}") != http.client.NOT_FOUND:
            raise RuntimeError("a POST to another path was not answered 404")
        times["http_not_found_ms"].append((time.perf_counter() - started) * 1000)
    with daemon.client() as c:
        recorded = sum(1 for cp in c.list(RUN)["checkpoints"] if cp["tool_use_id"])
    out.update({name: median(values) for name, values in times.items()})
    # Every round's two tool calls became checkpoints: nothing was measured that was not taken.
    out["tool_calls_recorded"] = recorded
    out["errors"] = daemon.error_lines()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=60)
    parser.add_argument("--dir", default="/tmp", help="where the tree and the daemon live")
    parser.add_argument("--cache", type=Path, default=None, metavar="DIR",
                        help="take the tree from this cache (bench.tree), kept for the next run")
    args = parser.parse_args()
    print(json.dumps({"bench": "transport",
                      **run(args.files, args.rounds, args.dir, args.cache)}, indent=2))


if __name__ == "__main__":
    main()
