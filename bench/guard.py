"""What the guard costs (docs/performance.md, "snapshotd/features/guard"): ``snapshot-hook``
end to end on Claude Code's ``PreToolUse`` for a Bash ``ls``, with ``guard`` off and on, and the
guard's own cost before a destructive command.

Measured, in one run, on a ``--files`` tree (default 10,000, committed) with ``--ignored``
(default 200) ignored files (``*.local``, 1 KiB each) and a 2,000-file ``node_modules``:
- ``before_tool_ls_guard_off_ms``, ``before_tool_ls_guard_on_ms``: the hook for ``ls``;
- ``before_tool_rm_guard_on_ms``: the hook for ``rm -rf build`` (the guard checkpoint, nothing
  changed since the last capture, and the ignored files kept);
- ``guard_elapsed_ms``: the daemon's own ``guard.elapsed_ms`` for the same request, and its
  parts: ``guard_checkpoint_ms`` (the checkpoint), ``guard_walk_ms`` (finding the files the
  checkpoint left out), ``guard_keep_ms`` (writing them to the store);
- ``guard_kept_files``, ``guard_skipped``: what one guard kept and listed.
Each is the median of ``--rounds`` (default 15); the two daemons' rounds are interleaved.

Usage: ``python -m bench.guard [--files 10000] [--ignored 200] [--rounds 15]``; prints JSON.
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


def hook_ms(daemon: DaemonProc, wt: Path, command: str, tool_use_id: str) -> float:
    payload = {"session_id": "bench", "cwd": str(wt), "hook_event_name": "PreToolUse",
               "tool_name": "Bash", "tool_use_id": tool_use_id,
               "tool_input": {"command": command, "description": "bench"}}
    env = dict(daemon.env, SNAPSHOTD_RUN_ID="bench", SNAPSHOTD_NODE_ID="guard")
    t0 = time.perf_counter()
    subprocess.run(HOOK, input=json.dumps(payload).encode(), env=env, check=True)
    return (time.perf_counter() - t0) * 1000


def tree(root: Path, files: int, ignored: int) -> Path:
    wt = make_tree(root, files)
    (wt / ".gitignore").write_text("*.local\nnode_modules/\n")
    for i in range(ignored):
        (wt / f"d{i % 20}").mkdir(exist_ok=True)
        (wt / f"d{i % 20}" / f"cfg{i}.local").write_bytes(b"k" * 1024)
    for i in range(2000):
        (wt / "node_modules" / f"p{i // 100}").mkdir(parents=True, exist_ok=True)
        (wt / "node_modules" / f"p{i // 100}" / f"{i}.js").write_text("x\n")
    return wt


def measure(files: int, ignored: int, rounds: int) -> dict[str, float]:
    daemons = {False: DaemonProc(dict(QUIET, SNAPSHOTD_GUARD="0")),
               True: DaemonProc(dict(QUIET, SNAPSHOTD_GUARD="1"))}
    samples: dict[str, list[float]] = {name: [] for name in (
        "before_tool_ls_guard_off_ms", "before_tool_ls_guard_on_ms",
        "before_tool_rm_guard_on_ms", "guard_elapsed_ms", "guard_checkpoint_ms",
        "guard_walk_ms", "guard_keep_ms")}
    kept: dict = {}
    try:
        with tempfile.TemporaryDirectory(prefix="sdguard") as tmp:
            trees = {on: tree(Path(tmp) / f"wt-{on}", files, ignored) for on in daemons}
            for on, daemon in daemons.items():
                with daemon.client() as c:
                    c.attempt_begin("bench", "guard", str(trees[on]))
                    c.snapshot(str(trees[on]), run_id="bench", node_id="guard")  # cold
            for r in range(rounds):
                for on, daemon in daemons.items():
                    key = "before_tool_ls_guard_on_ms" if on else "before_tool_ls_guard_off_ms"
                    samples[key].append(hook_ms(daemon, trees[on], "ls -la", f"ls{r}"))
                wt = trees[True]
                samples["before_tool_rm_guard_on_ms"].append(
                    hook_ms(daemons[True], wt, "rm -rf build", f"rm{r}"))
                with daemons[True].client() as c:
                    reply = c.request("before_tool", cwd=str(wt), run_id="bench",
                                      node_id="guard", command="rm -rf build", label="Bash")
                samples["guard_elapsed_ms"].append(reply["guard"]["elapsed_ms"])
                samples["guard_checkpoint_ms"].append(reply["guard"]["checkpoint_ms"])
                kept = reply["guard"]["ignored"]
                samples["guard_walk_ms"].append(kept["walk_ms"])
                samples["guard_keep_ms"].append(kept["keep_ms"])
    finally:
        for daemon in daemons.values():
            daemon.stop()
    out: dict = {name: median(values) for name, values in samples.items()}
    out.update(guard_kept_files=kept.get("files"), guard_skipped=kept.get("skipped"))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--files", type=int, default=10000)
    parser.add_argument("--ignored", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    result: dict = {"files": args.files, "ignored": args.ignored, "rounds": args.rounds}
    result.update(measure(args.files, args.ignored, args.rounds))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
