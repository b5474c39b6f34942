"""Restore budgets (docs/performance.md): in place after one changed file, and materializing
with ``--to``.

Measures, on the same trees in the same run:
- in place, a checkpoint that differs from the worktree in one file, on a ``--files`` tree
  (default 100,000): the daemon's own time for the ``restore`` op (``elapsed_ms``, which includes
  the safety checkpoint's capture), with its parts and how the safety capture read the tree
  (``fast``/``full``). Two cases: the realistic flow (an attempt ran under the watcher and ended,
  its worktree lingers; restore without ``--force``) and unwatched (a daemon with
  ``linger_s=0``: a full stat scan, as after a daemon restart). Against the git-CLI peer with a
  private index: ``git read-tree -m -u <tree>`` alone (its index refreshed beforehand by an
  untimed ``add -A``), and ``add -A`` + ``read-tree -m -u`` (look, then write, as we do);
- materializing a ``--materialize-files`` tree (default 10,000) into a new directory with
  ``--to`` (daemon-side and client wall time) against ``git checkout-index -a`` from a private
  index already holding the tree (``read-tree`` untimed).

Usage: ``python -m bench.restore [--files 100000] [--materialize-files 10000] [--rounds 9]
[--dir /tmp]``; prints JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import time
from pathlib import Path

from bench.common import DaemonProc, GitPeer, bench_daemon, git_env, make_tree, median


def _victims(wt: Path, files: int, rounds: int) -> list[Path]:
    """One file per round, spread over the tree (make_tree's layout: f{i}.txt in
    d{i // 100:04d}/s{(i // 10) % 10}/)."""
    return [wt / f"d{i // 100:04d}" / f"s{(i // 10) % 10}" / f"f{i}.txt"
            for i in range(7, files, max(1, files // rounds))]


def _restore_rounds(daemon: DaemonProc, wt: Path, node: str, seq: int, files: int,
                    rounds: int, *, force: bool) -> dict:
    """Change one file, restore ``seq`` in place; ``rounds`` times. Our side only."""
    ours, parts, wall, scans = [], [], [], []
    victims = _victims(wt, files, rounds)
    for i in range(rounds):
        victim = victims[i % len(victims)]
        original = victim.read_bytes()
        victim.write_text(f"changed in round {i}\n")
        with daemon.client() as c:
            t0 = time.perf_counter()
            r = c.restore(run_id="bench", node_id=node, seq=seq, force=force)
            wall.append((time.perf_counter() - t0) * 1000)
        assert victim.read_bytes() == original, "restore did not bring the file back"
        assert r["plan_total"] == 1, r["plan"]
        ours.append(r["elapsed_ms"])
        parts.append(r["timings"])
        scans.append(r["scan"])
    return {
        "daemon_restore_1_change_ms_median": median(ours),
        "daemon_restore_ms_all": [round(x, 1) for x in ours],
        "daemon_capture_part_ms_median": median([p["capture_ms"] for p in parts]),
        "daemon_plan_part_ms_median": median([p["plan_ms"] for p in parts]),
        "daemon_apply_part_ms_median": median([p["apply_ms"] for p in parts]),
        "safety_scan": {kind: scans.count(kind) for kind in sorted(set(scans), key=str)},
        "client_wall_ms_median": median(wall),
    }


def in_place(daemon: DaemonProc, base: Path, files: int, rounds: int) -> dict:
    """The realistic flow: an attempt runs (watched), captures, ends; then the user restores a
    checkpoint, without ``--force``. The ended attempt's worktree lingers under the watcher, so
    the safety checkpoint can take the fast path. Then the same without the lingering watch
    (a daemon with ``linger_s=0``: the safety checkpoint is a full stat scan, as after a
    daemon restart), and the git peer."""
    wt = make_tree(base / "wt", files)
    peer = GitPeer(wt, base / "peer.git")
    with daemon.client() as c:
        c.attempt_begin("bench", "inplace", str(wt))
        started = time.perf_counter()
        first = c.snapshot(str(wt), run_id="bench", node_id="inplace")
        first_ms = (time.perf_counter() - started) * 1000
        for k in range(3):  # the agent's edits, captured on the fast path
            (wt / "agent" / f"a{k}.txt").parent.mkdir(exist_ok=True)
            (wt / "agent" / f"a{k}.txt").write_text(f"agent edit {k}\n")
            c.snapshot(str(wt), run_id="bench", node_id="inplace")
        shutil.rmtree(wt / "agent")
        c.snapshot(str(wt), run_id="bench", node_id="inplace")
        c.attempt_end("bench", "inplace")
    lingering = _restore_rounds(daemon, wt, "inplace", first["seq"], files, rounds, force=False)
    unwatched_daemon = DaemonProc(extra_env={"SNAPSHOTD_LINGER_S": "0"})
    try:
        with unwatched_daemon.client() as c:
            cp = c.snapshot(str(wt), run_id="bench", node_id="unwatched")
            c.attempt_end("bench", "unwatched")
        unwatched = _restore_rounds(unwatched_daemon, wt, "unwatched", cp["seq"], files, rounds,
                                    force=False)
    finally:
        unwatched_daemon.stop()
    peer.capture()
    target_tree = peer._git("rev-parse", f"{peer.parent}^{{tree}}")
    peer_rt, peer_both = [], []
    victims = _victims(wt, files, rounds)
    for i in range(rounds):
        victim = victims[i % len(victims)]
        original = victim.read_bytes()
        # The peer, same change: read-tree alone after an untimed index refresh ...
        victim.write_text(f"changed in round {i} (peer)\n")
        peer._git("add", "-A", ".")
        t0 = time.perf_counter()
        peer._git("read-tree", "-m", "-u", target_tree)
        peer_rt.append((time.perf_counter() - t0) * 1000)
        assert victim.read_bytes() == original, "git read-tree did not bring the file back"
        # ... and look-then-write, as our restore does.
        victim.write_text(f"changed in round {i} (peer again)\n")
        t0 = time.perf_counter()
        peer._git("add", "-A", ".")
        peer._git("read-tree", "-m", "-u", target_tree)
        peer_both.append((time.perf_counter() - t0) * 1000)
        assert victim.read_bytes() == original
    return {
        "files": files, "rounds": rounds, "first_capture_ms": round(first_ms, 1),
        "after_attempt_end_lingering": lingering,
        "unwatched_linger_0": unwatched,
        "peer_read_tree_m_u_ms_median": median(peer_rt),
        "peer_add_A_plus_read_tree_ms_median": median(peer_both),
        "ratio_lingering_to_peer_read_tree": round(
            lingering["daemon_restore_1_change_ms_median"] / median(peer_rt), 3),
        "ratio_unwatched_to_peer_read_tree": round(
            unwatched["daemon_restore_1_change_ms_median"] / median(peer_rt), 3),
    }


def materialize(daemon: DaemonProc, base: Path, files: int, rounds: int) -> dict:
    """``--to`` into a new directory against ``git checkout-index -a`` (private index, tree read
    untimed). File creation is kernel work and this machine is shared, so the two sides
    alternate which goes first, each after a ``sync`` (neither pays for the other's writeback,
    nor for the order)."""
    src = make_tree(base / "src", files, git_init=False)
    with daemon.client() as c:
        cp = c.snapshot(str(src), run_id="bench", node_id="materialize")
        c.attempt_end("bench", "materialize")
    index = base / "peer-index"
    env = git_env(GIT_DIR=str(daemon.home / "store.git"), GIT_INDEX_FILE=str(index))
    subprocess.run(["git", "read-tree", cp["tree"]], env=env, check=True)
    ours, wall, peer, plan, apply, sync = [], [], [], [], [], []

    def run_ours(i: int) -> None:
        out = base / f"ours{i}"
        subprocess.run(["sync"], check=True)
        with daemon.client() as c:
            t0 = time.perf_counter()
            r = c.restore(run_id="bench", node_id="materialize", to=str(out))
            wall.append((time.perf_counter() - t0) * 1000)
        assert r["plan_total"] == files
        ours.append(r["elapsed_ms"])
        plan.append(r["timings"]["plan_ms"])
        apply.append(r["timings"]["apply_ms"])
        sync.append(r["timings"].get("sync_ms", 0.0))

    def run_peer(i: int) -> None:
        theirs = base / f"peer{i}"
        theirs.mkdir()
        subprocess.run(["sync"], check=True)
        t0 = time.perf_counter()
        subprocess.run(["git", "checkout-index", "-a"], cwd=theirs,
                       env=dict(env, GIT_WORK_TREE=str(theirs)), check=True)
        peer.append((time.perf_counter() - t0) * 1000)

    for i in range(rounds):
        for side in ((run_ours, run_peer) if i % 2 == 0 else (run_peer, run_ours)):
            side(i)
        shutil.rmtree(base / f"ours{i}")
        shutil.rmtree(base / f"peer{i}")
    return {
        "files": files, "rounds": rounds,
        "daemon_materialize_ms_median": median(ours),
        "daemon_materialize_ms_all": [round(x) for x in ours],
        "daemon_plan_part_ms_median": median(plan),
        "daemon_apply_part_ms_median": median(apply),
        "daemon_sync_part_ms_median": median(sync),
        "client_wall_ms_median": median(wall),
        "peer_checkout_index_a_ms_median": median(peer),
        "peer_checkout_index_a_ms_all": [round(x) for x in peer],
        "ratio_daemon_to_peer": round(median(ours) / median(peer), 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--files", type=int, default=100_000)
    parser.add_argument("--materialize-files", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=9)
    parser.add_argument("--only", choices=("in_place", "materialize"), default=None)
    parser.add_argument("--dir", default="/tmp", help="Where the trees live (their filesystem "
                        "is part of what is measured).")
    args = parser.parse_args()
    with bench_daemon("sdbench-restore", args.dir) as (base, daemon):
        result: dict = {"bench": "restore", "dir": args.dir}
        if args.only in (None, "in_place"):
            result["in_place"] = in_place(daemon, base / "a", args.files, args.rounds)
        if args.only in (None, "materialize"):
            result["materialize"] = materialize(daemon, base / "b", args.materialize_files,
                                                args.rounds)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
