"""Review budgets (docs/review.md): ``show`` and ``log --stat`` under 100 ms on a 100k-file
worktree.

On a generated ``--files`` tree (default 100,000; ``bench.common.make_tree``), a daemon captures
a first checkpoint and then ``--checkpoints`` tool calls (default 50), each changing one file and
adding another. Then, in the same run:
- ``show``: ``snapshotd.features.review.history.show_checkpoint`` of a middle checkpoint (patch included) through
  ``backend.read_home`` (opening the ledger and the store is counted), and the same with
  ``--stat`` only;
- ``log --stat``: ``log_run`` over every checkpoint of the run, each with its diffstat;
- ``log --path``: the same filtered to one file (the path filter compares one tree entry);
- the CLI end to end (``python -m snapshotd show``/``log``: process start included, and
  ``snapshotd --version`` alone for the start-up share);
- the peer, on the store's own chain: ``git show --stat <commit>``, ``git show <commit>`` and
  ``git log --stat <tip>``, and without the first commit (``^<first>``: what our log renders
  by default); git's process start included, as ours is in the CLI figure.

Usage: ``python -m bench.review [--files 100000] [--checkpoints 50] [--rounds 9]``; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench.common import DaemonProc, bench_daemon, git_env, make_tree, median

RUN = "bench-review"
NODE = "agent"
QUIET = {"SNAPSHOTD_SETTLE_MS": "600000", "SNAPSHOTD_MAX_WAIT_MS": "600000"}


def replay_tool_calls(daemon: DaemonProc, wt: Path, files: int, checkpoints: int) -> list[dict]:
    """A first checkpoint, then one per tool call: one file changed, one added."""
    replies = []
    with daemon.client() as c:
        replies.append(c.snapshot(str(wt), run_id=RUN, node_id=NODE, source="hook",
                                  label="start", tool_use_id="toolu_start"))
        for k in range(checkpoints):
            i = (k * 7919) % files
            victim = wt / f"d{i // 100:04d}" / f"s{(i // 10) % 10}" / f"f{i}.txt"
            victim.write_text(victim.read_text() + f"tool call {k}\n")
            (wt / "agent").mkdir(exist_ok=True)
            (wt / "agent" / f"new{k}.py").write_text(f"def step{k}():\n    return {k}\n")
            replies.append(c.snapshot(str(wt), run_id=RUN, node_id=NODE, source="hook",
                                      label=f"Edit f{i}.txt", tool_use_id=f"toolu_{k:04d}"))
    return replies


def timed(fn: Callable[[], object], rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def ours(home: Path, seq: int, rounds: int) -> dict:
    """The in-process figures: the history functions on the home opened for reading."""
    from snapshotd.features.review.history import log_run, show_checkpoint
    from snapshotd.ops.backend import read_home

    def show(patch: bool) -> dict:
        return read_home(lambda v: show_checkpoint(v, run_id=RUN, node_id=NODE, seq=seq,
                                                   patch=patch), home=home)

    def log(path: str | None = None) -> dict:
        return read_home(lambda v: log_run(v, run_id=RUN, path=path), home=home)

    shown = show(True)
    assert shown["stats"]["files_changed"] == 2, shown["stat"]
    entries = log()["entries"]
    filtered = log("agent/new3.py")["entries"]
    assert len(filtered) == 1, [e["seq"] for e in filtered]
    return {
        "show_patch_ms_median": median(timed(lambda: show(True), rounds)),
        "show_stat_ms_median": median(timed(lambda: show(False), rounds)),
        "log_stat_ms_median": median(timed(log, rounds)),
        "log_stat_entries": len(entries),
        "log_path_ms_median": median(timed(lambda: log("agent/new3.py"), rounds)),
    }


def cli_and_peer(daemon: DaemonProc, seq: int, commit: str, chain: tuple[str, str],
                 rounds: int) -> dict:
    """End to end, process start included: our CLI beside git on the store's chain."""
    store = str(daemon.home / "store.git")
    env = dict(daemon.env)

    def run(args: list[str], **kw: str) -> Callable[[], object]:
        return lambda: subprocess.run(args, env=kw or env, check=True, capture_output=True)

    sd = [sys.executable, "-m", "snapshotd"]
    genv = git_env(GIT_DIR=store)
    first, tip = chain
    return {
        "cli_start_only_ms_median": median(timed(run([*sd, "--version"]), rounds)),
        "cli_show_ms_median": median(timed(run([*sd, "show", RUN, "--node", NODE, "--seq",
                                                str(seq)]), rounds)),
        "cli_log_stat_ms_median": median(timed(run([*sd, "log", RUN]), rounds)),
        "peer_git_show_stat_ms_median": median(timed(run(["git", "show", "--stat", commit],
                                                         **genv), rounds)),
        "peer_git_show_patch_ms_median": median(timed(run(["git", "show", commit], **genv),
                                                      rounds)),
        "peer_git_log_stat_ms_median": median(timed(run(["git", "log", "--stat", tip], **genv),
                                                    rounds)),
        # Our log leaves the first checkpoint's whole-tree diff out (docs/review.md): the same
        # commits for git.
        "peer_git_log_stat_without_first_ms_median": median(timed(run(
            ["git", "log", "--stat", tip, f"^{first}"], **genv), rounds)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--checkpoints", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--dir", default="/tmp")
    args = parser.parse_args()
    with bench_daemon("sdbench-review", args.dir, extra_env=QUIET) as (base, daemon):
        # The in-process figures read the daemon's home with the daemon's configuration.
        os.environ.update({k: v for k, v in daemon.env.items()
                           if k.startswith("SNAPSHOTD_") or k == "XDG_CONFIG_HOME"})
        wt = make_tree(base / "wt", args.files)
        replies = replay_tool_calls(daemon, wt, args.files, args.checkpoints)
        middle = replies[len(replies) // 2]
        result: dict = {"bench": "review", "files": args.files,
                        "checkpoints": len(replies), "rounds": args.rounds,
                        "budget_ms": 100}
        result.update(ours(daemon.home, middle["seq"], args.rounds))
        result.update(cli_and_peer(daemon, middle["seq"], middle["commit"],
                                   (replies[0]["commit"], replies[-1]["commit"]), args.rounds))
        result["within_budget"] = (result["show_patch_ms_median"] < 100
                                   and result["log_stat_ms_median"] < 100)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
