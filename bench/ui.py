"""Web app budgets (docs/ui.md): a checkpoint's diff page of a 100,000-file worktree under
300 ms server-side, and the timeline data of a 1,000-checkpoint run.

Builds, through a real daemon, a ``--files``-file git worktree (default 100,000) and a few
checkpoints that each change three files, then serves ``snapshotd ui`` on that home (in this
process, on 127.0.0.1) and times, over HTTP with the API token (bearer), the requests the checkpoint
page makes: ``/api/checkpoint`` (the tool call and the files it changed), ``/api/diff``
(against the previous checkpoint, and against the first one) and ``/api/run``. Each figure is
the median of ``--rounds`` requests, measured at the client on loopback: an upper bound of the
server-side time.

With ``--paint N`` (default 1,000; 0 leaves it out) a run of N checkpoints is recorded too and
the distribution's Chromium, driven by Playwright as the browser tests drive it, opens its
timeline: ``first_paint_ms`` is the median, over ``--paint-rounds`` page loads, from asking for
the run's page to its Nth checkpoint mark being drawn (the budget: 1,000 checkpoints in 1 s).
``cpu_speed_ms`` beside it tells a slow phase of the host apart (``bench.common``).

Usage: ``python -m bench.ui [--files 100000] [--rounds 15] [--paint 1000] [--paint-rounds 5]``;
prints JSON.
"""

from __future__ import annotations

import argparse
import http.client
import json
import secrets
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import DaemonProc, cpu_speed_ms, make_tree, median

QUIET = {"SNAPSHOTD_SETTLE_MS": "600000", "SNAPSHOTD_MAX_WAIT_MS": "600000"}
CHANGES = 5


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--paint", type=int, default=1000,
                        help="checkpoints of the run whose timeline is painted (0: no browser)")
    parser.add_argument("--paint-rounds", type=int, default=5)
    args = parser.parse_args()
    from snapshotd.ui.app import bind, create_app, serve

    daemon = DaemonProc(QUIET)
    try:
        with tempfile.TemporaryDirectory(prefix="sdui-bench-") as tmp:
            wt = make_tree(Path(tmp) / "wt", args.files)
            started = time.perf_counter()
            with daemon.client() as c:
                c.snapshot(str(wt), run_id="bench", node_id="ui", source="hook", label="first")
                first_ms = (time.perf_counter() - started) * 1000
                for seq in range(1, CHANGES + 1):
                    for k in range(3):
                        path = wt / "d0000" / "s0" / f"f{k}.txt"
                        path.write_text(f"changed in {seq}\n" + path.read_text())
                    c.snapshot(str(wt), run_id="bench", node_id="ui", source="hook",
                               label=f"Edit three files ({seq})", tool_use_id=f"call-{seq}")
            sock = bind(0)
            port = sock.getsockname()[1]
            token = secrets.token_urlsafe(16)
            app = create_app(home=daemon.home, socket=daemon.socket, token=token, port=port)
            threading.Thread(target=serve, args=(app, sock), daemon=True).start()
            time.sleep(0.5)
            sel = f"run=bench&node=ui&iteration=0&attempt=1&seq={CHANGES}"
            paths = {"checkpoint_ms": f"/api/checkpoint?{sel}",
                     "diff_previous_ms": f"/api/diff?{sel}",
                     "diff_first_ms": f"/api/diff?{sel}&a_node=ui&a_iteration=0&a_attempt=1"
                                      "&a_seq=0",
                     "timeline_ms": "/api/run?run=bench"}
            out = {"files": args.files, "first_capture_ms": round(first_ms, 1)}
            auth = f"Bearer {token}"
            for name, path in paths.items():
                out[name] = median([_get(port, path, auth) for _ in range(args.rounds)])
            if args.paint:
                _record_long_run(daemon, Path(tmp) / "long", args.paint)
                out["paint_checkpoints"] = args.paint
                out["first_paint_ms"] = _first_paint(f"http://127.0.0.1:{port}", app.mint_code,
                                                     args.paint, args.paint_rounds)
                out["cpu_speed_ms"] = cpu_speed_ms()
    finally:
        daemon.stop()
    print(json.dumps(out, indent=2))


def _record_long_run(daemon: DaemonProc, wt: Path, checkpoints: int) -> None:
    """Run ``long``: ``checkpoints`` checkpoints of a one-file worktree, each a change."""
    wt.mkdir()
    with daemon.client() as c:
        for i in range(checkpoints):
            (wt / "f.txt").write_text(f"{i}\n")
            c.snapshot(str(wt), run_id="long", node_id="n", label=f"step {i}")


def _first_paint(base: str, mint_code: Callable[[], str], checkpoints: int, rounds: int) -> float:
    """The median time from asking for run ``long``'s page to its last timeline mark drawn,
    in a fresh page each round (the app's own cache empty), the session cookie already set."""
    from playwright.sync_api import sync_playwright

    from snapshotd.ui.screenshots import chromium_path

    chromium = chromium_path()
    if chromium is None:
        raise SystemExit("no system Chromium (apt-get install chromium, or set "
                         "SNAPSHOTD_CHROMIUM): run with --paint 0 to leave the paint row out")
    times = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            for _ in range(rounds):
                page = browser.new_page()
                page.goto(f"{base}/login?code={mint_code()}")
                page.wait_for_selector("table.runs")
                started = time.perf_counter()
                page.goto(f"{base}/#/run/long")
                page.locator("svg.timeline .mark").nth(checkpoints - 1).wait_for()
                times.append((time.perf_counter() - started) * 1000)
                if page.locator("svg.timeline .mark").count() != checkpoints:
                    raise RuntimeError("the timeline does not show every checkpoint")
                page.close()
        finally:
            browser.close()
    return median(times)


def _get(port: int, path: str, auth: str) -> float:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    started = time.perf_counter()
    conn.request("GET", path, headers={"Authorization": auth})
    resp = conn.getresponse()
    body = resp.read()
    elapsed = (time.perf_counter() - started) * 1000
    conn.close()
    if resp.status != 200:
        raise RuntimeError(f"{path}: {resp.status} {body[:200]!r}")
    return elapsed


if __name__ == "__main__":
    main()
