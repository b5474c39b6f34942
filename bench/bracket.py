"""What bracketing costs per tool call (docs/performance.md): ``snapshot-hook`` end to end on a
before-tool event (Claude Code ``PreToolUse``), with ``bracket`` off and on, on the same tree.

Measured, in one run, on a ``--files`` tree (default 10,000) watched by the daemon:
- ``before_tool_off_ms``: bracketing off, the daemon answers the no-op;
- ``before_tool_on_unchanged_ms``: on, nothing changed since the last capture (deduplicated);
- ``before_tool_on_one_change_ms``: on, one file edited since (a new ``outside`` checkpoint);
- ``after_tool_one_change_ms``: for scale, the after-tool hook after one changed file.
Each is the median of ``--rounds`` (default 15) process start-to-exit times of the environment's
installed ``snapshot-hook``; the two daemons' rounds are interleaved.

Usage: ``python -m bench.bracket [--files 10000] [--rounds 15]``; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import DaemonProc, make_tree, median

HOOK = [str(Path(sys.executable).parent / "snapshot-hook")]
QUIET = {"SNAPSHOTD_SETTLE_MS": "600000", "SNAPSHOTD_MAX_WAIT_MS": "600000"}


def hook_ms(daemon: DaemonProc, wt: Path, event: str, tool_use_id: str) -> float:
    payload = {"session_id": "bench", "cwd": str(wt), "hook_event_name": event,
               "tool_name": "Write", "tool_use_id": tool_use_id,
               "tool_input": {"file_path": str(wt / "edited.txt")}}
    env = dict(daemon.env, SNAPSHOTD_RUN_ID="bench", SNAPSHOTD_NODE_ID="bracket")
    t0 = time.perf_counter()
    subprocess.run(HOOK, input=json.dumps(payload).encode(), env=env, check=True)
    return (time.perf_counter() - t0) * 1000


def measure(files: int, rounds: int) -> dict[str, float]:
    """Two daemons (bracket off, on) on two copies of the tree, their rounds interleaved so a
    change in the machine's load hits both alike."""
    daemons = {False: DaemonProc(dict(QUIET, SNAPSHOTD_BRACKET="0")),
               True: DaemonProc(dict(QUIET, SNAPSHOTD_BRACKET="1"))}
    samples: dict[str, list[float]] = {name: [] for name in (
        "before_tool_off_ms", "after_tool_one_change_ms", "before_tool_on_unchanged_ms",
        "before_tool_on_one_change_ms")}
    try:
        with tempfile.TemporaryDirectory(prefix="sdbracket") as tmp:
            trees = {on: make_tree(Path(tmp) / f"wt-{on}", files) for on in daemons}
            for on, daemon in daemons.items():
                with daemon.client() as c:
                    c.attempt_begin("bench", "bracket", str(trees[on]))
                    c.snapshot(str(trees[on]), run_id="bench", node_id="bracket")  # cold
            for r in range(rounds):
                for on, daemon in daemons.items():
                    wt = trees[on]
                    (wt / "edited.txt").write_text(f"by the tool {r}\n")
                    after = hook_ms(daemon, wt, "PostToolUse", f"t{r}")
                    unchanged = hook_ms(daemon, wt, "PreToolUse", f"u{r}")
                    (wt / "edited.txt").write_text(f"by hand {r}\n")
                    changed = hook_ms(daemon, wt, "PreToolUse", f"c{r}")
                    if on:
                        samples["before_tool_on_unchanged_ms"].append(unchanged)
                        samples["before_tool_on_one_change_ms"].append(changed)
                    else:
                        samples["after_tool_one_change_ms"].append(after)
                        samples["before_tool_off_ms"] += [unchanged, changed]
    finally:
        for daemon in daemons.values():
            daemon.stop()
    return {name: median(values) for name, values in samples.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    result: dict = {"files": args.files, "rounds": args.rounds}
    result.update(measure(args.files, args.rounds))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
