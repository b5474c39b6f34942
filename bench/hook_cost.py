"""What one tool call's hooks cost as the Claude Code plugin installs them: its start
(``PreToolUse``) and its end (``PostToolUse``), each the command string of ``hooks/hooks.json``
run through ``sh -c`` (``--shell``) as Claude Code runs it, with a real payload on stdin
(tests/fixtures/claude-code/post-tool-use.ndjson, a Write of ``hello.txt``; the start is that
payload as ``PreToolUse``, without the tool's result), zero-setup attribution (the session's
run, ``CLAUDE_PROJECT_DIR``) and the daemon's default settings (``bracket`` off).

Sides, each on a tree of its own (``--sizes``, generated and committed like a clone), one daemon
for all, rounds interleaved (the order rotates) so the machine's load hits all alike:
- ``python``: today's command, ``snapshot-hook``, for both events;
- ``native``: the plugin's command with ``snapshot-hook-native`` on the ``PATH`` (built here by
  ``snapshotd native-hook``'s code, handing over to this environment's ``snapshot-hook``);
- ``fallback``: the plugin's command with no native hook installed (so it runs ``snapshot-hook``:
  against ``python``, what choosing costs);
- ``native_direct``: the native program run with no shell at all (against ``native``, what the
  shell costs);
- ``peer``: the shadow-git way, once per tool call: ``git add -A``, ``write-tree``,
  ``commit-tree``, ``update-ref`` with a private index (``bench.common.GitPeer``).
Per side, medians over ``--rounds``: ``start_ms``, ``end_ms`` (process start to exit as the
agent sees it), ``tool_call_ms`` (the two together), ``tool_call_cpu_ms`` (CPU of the processes
it ran: shell, hook, Python), and the checks: tool calls recorded as checkpoints, and
``native_hook`` counts (relayed requests; ``fallbacks`` must stay 0).

Usage: ``python -m bench.hook_cost [--sizes 2000,10000] [--rounds 40] [--shell sh]
[--hook PATH]``; prints JSON. ``--hook``: another install's ``snapshot-hook`` (the README's
``pip install .``; this repository's editable install starts slower).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import DaemonProc, GitPeer, cpu_speed_ms, file_create_ms, make_tree, median

REPO = Path(__file__).resolve().parents[1]
# The Python hook: this environment's installed script unless ``--hook`` names another install's
# (a plain ``pip install .``: an editable install starts slower, docs/performance.md).
PYTHON_HOOK = Path(sys.executable).parent / "snapshot-hook"
FIXTURE = REPO / "tests" / "fixtures" / "claude-code" / "post-tool-use.ndjson"
HARNESS = "<harness>/runs/canonical/proj"
QUIET = {"SNAPSHOTD_SETTLE_MS": "600000", "SNAPSHOTD_MAX_WAIT_MS": "600000"}
SIDES = ("python", "native", "fallback", "native_direct")
WARM_UP = 2  # tool calls per side before measuring: the first capture seeds from the index


def plugin_command() -> str:
    """The command hooks/hooks.json runs for a tool call's start and end (the same string)."""
    hooks = json.loads((REPO / "hooks" / "hooks.json").read_text())["hooks"]
    commands = {h["command"] for event in ("PreToolUse", "PostToolUse")
                for entry in hooks[event] for h in entry["hooks"]}
    if len(commands) != 1:
        raise RuntimeError(f"hooks.json runs {len(commands)} commands on a tool call")
    return commands.pop()


def payloads(wt: Path, session: str, tool_use_id: str) -> tuple[bytes, bytes]:
    """The fixture's first payload, pointed at ``wt``: as the tool call's start and end."""
    with open(FIXTURE) as f:
        text = f.readline().replace(HARNESS, str(wt))
    end = dict(json.loads(text), session_id=session, tool_use_id=tool_use_id)
    start = {k: v for k, v in end.items() if k not in ("tool_response", "duration_ms")}
    start["hook_event_name"] = "PreToolUse"
    return json.dumps(start).encode(), json.dumps(end).encode()


class Side:
    """One way of running the hooks, on its own tree."""

    def __init__(self, name: str, wt: Path, daemon: DaemonProc, bins: dict[str, Path],
                 shell: str) -> None:
        self.name, self.wt = name, wt
        self.session = f"bench-{name}"
        path = bins["native" if name.startswith("native") else "python"]
        self.env = dict(daemon.env, CLAUDE_PROJECT_DIR=str(wt),
                        PATH=os.pathsep.join([str(path), "/usr/bin", "/bin"]))
        if name == "native_direct":
            self.argv = [str(path / "snapshot-hook-native")]
        else:
            command = "snapshot-hook" if name == "python" else plugin_command()
            self.argv = [shell, "-c", command]
        self.samples: dict[str, list[float]] = {k: [] for k in (
            "start_ms", "end_ms", "tool_call_ms", "tool_call_cpu_ms")}

    def tool_call(self, n: int, keep: bool) -> None:
        start, end = payloads(self.wt, self.session, f"toolu_{self.name}_{n}")
        cpu0 = _children_cpu_ms()
        start_ms = _run(self.argv, start, self.env, self.wt)
        (self.wt / "hello.txt").write_text(f"tool call {n}\n")  # the tool's write
        end_ms = _run(self.argv, end, self.env, self.wt)
        if keep:
            self.samples["start_ms"].append(start_ms)
            self.samples["end_ms"].append(end_ms)
            self.samples["tool_call_ms"].append(start_ms + end_ms)
            self.samples["tool_call_cpu_ms"].append(_children_cpu_ms() - cpu0)

    def result(self, daemon: DaemonProc) -> dict:
        with daemon.client() as c:
            listed = c.list(f"claude-{self.session}")["checkpoints"]
        out = {k: median(v) for k, v in self.samples.items()}
        out["tool_calls_recorded"] = sum(1 for cp in listed if cp.get("tool_use_id"))
        return out


def _run(argv: list[str], payload: bytes, env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, input=payload, env=env, cwd=cwd, capture_output=True)
    elapsed = (time.perf_counter() - started) * 1000
    if done.returncode != 0 or done.stdout or done.stderr:
        raise RuntimeError(f"{argv[-1][:40]} exited {done.returncode}: {done.stderr[:200]!r}")
    return elapsed


def _children_cpu_ms() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return (usage.ru_utime + usage.ru_stime) * 1000


def hook_bins(where: Path, python_hook: Path) -> dict[str, Path]:
    """``python``: a PATH directory with snapshot-hook alone; ``native``: with
    snapshot-hook-native beside it (what ``snapshotd native-hook`` installs)."""
    from snapshotd.daemon import build

    bins = {name: where / f"bin-{name}" for name in ("python", "native")}
    for path in bins.values():
        path.mkdir()
        (path / "snapshot-hook").symlink_to(python_hook)
    build(bins["native"] / "snapshot-hook-native", fallback=python_hook)
    return bins


def run_size(files: int, rounds: int, shell: str, parent: str, python_hook: Path) -> dict:
    work = Path(tempfile.mkdtemp(prefix="sdhookcost", dir=parent))
    daemon = DaemonProc(QUIET, parent=parent)
    try:
        bins = hook_bins(work, python_hook)
        sides = [Side(name, make_tree(work / f"wt-{name}", files), daemon, bins, shell)
                 for name in SIDES]
        peer_wt = make_tree(work / "wt-peer", files)
        peer = GitPeer(peer_wt, work / "peer.git")
        for side in sides:
            for n in range(WARM_UP):
                side.tool_call(-1 - n, keep=False)
        peer.capture()
        time.sleep(2.5)  # the first captures' own events drain, the watcher's verification ends
        out: dict = {"files": files, "file_create_ms": file_create_ms(daemon.dir),
                     "cpu_speed_ms": cpu_speed_ms(), "load_before": os.getloadavg()[0]}
        peer_ms: list[float] = []
        for r in range(rounds):
            for i in range(len(sides) + 1):
                k = (i + r) % (len(sides) + 1)
                if k < len(sides):
                    sides[k].tool_call(r, keep=True)
                else:
                    (peer_wt / "hello.txt").write_text(f"tool call {r}\n")
                    peer_ms.append(peer.capture())
        for side in sides:
            out[side.name] = side.result(daemon)
        out["peer"] = {"tool_call_ms": median(peer_ms)}
        with daemon.client() as c:
            out["native_hook"] = c.status()["native_hook"]
        out["load_after"] = os.getloadavg()[0]
        out["errors"] = daemon.error_lines()
        return out
    finally:
        daemon.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="2000,10000")
    parser.add_argument("--rounds", type=int, default=40)
    parser.add_argument("--shell", default="sh", help="what runs the command (Claude Code: sh)")
    parser.add_argument("--dir", default="/tmp", help="where the trees and the daemon live")
    parser.add_argument("--hook", type=Path, default=PYTHON_HOOK,
                        help="the snapshot-hook to run (default: this environment's)")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    result = {"bench": "hook_cost", "shell": args.shell, "rounds": args.rounds,
              "command": plugin_command(), "python_hook": str(args.hook),
              "sizes": [run_size(n, args.rounds, args.shell, args.dir, args.hook)
                        for n in sizes]}
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
