"""``python -m bench``: the capture budgets (docs/performance.md) beside the git-CLI peer.

For each tree size (generated, committed and packed like a clone), in one process run:
- ``first_capture``: the daemon's first capture of the git worktree (seeded from its index)
  against the peer's first ``add -A`` + ``write-tree`` + ``commit-tree`` + ``update-ref``
  into an empty private index;
- ``capture_0``, ``capture_1``, ``capture_100``: daemon-side capture (``elapsed_ms``; the
  fast path: the watcher's changed paths after a cookie round trip) after 0, 1 and 100
  changed files, against the peer after the same change;
- ``hook``: ``snapshot-hook`` end to end (process start to exit) after one changed file: the
  environment's installed script (what ``hooks/hooks.json`` runs), and any ``--hook PATH``;
  ``hook_http_end_to_end_ms``: the same payload POSTed to the HTTP hook endpoint, connect to
  the empty 200;
- ``store_bytes_per_checkpoint``: bytes the store grew by for one small changed file, against
  the size of the objects that change needs (compressed blob, trees on its path, commit);
- ``watch_setup_ms`` (``attempt_begin``, which sets the watch up before it returns; ``watches``
  is how many inotify watches it holds), ``daemon_rss_mb_watched`` (after every row above),
  ``restore_1_file_ms`` against the peer's ``add -A`` + ``read-tree -m -u``;
- ``file_create_ms``: what creating one file cost where the store is, just before the steady
  rows (on some disks it swings 30x after thousands of files were written, and every capture
  with a change creates several: compare runs only at similar values); ``cpu_speed_ms``, the
  host's speed phase at the same moment (``bench.common.cpu_speed_ms``: lower is faster).

A tree of N files has N/10 directories of 10 files (``--sizes 1000000``: 1,000,000 files in
about 110,000 directories), committed as one pack like a clone (``git fast-import``; no loose
objects) with a fresh index. ``--cache DIR`` keeps each tree under ``DIR/tree-<files>`` and
reuses it on the next run (``bench.tree``; written niced, measured unniced); ``prepare_s`` is
what preparing or resetting it took. ``daemon_rss_mb_at`` is the daemon's RSS when started,
with the tree watched, and after the first capture.

Restore and idle budgets have their own runners (``bench.restore``, ``bench.idle``); pass
``--all`` to run them too (short settings) and merge their JSON into this document. Memory over
many captures of one attempt (RSS every N captures, up to 100,000) has ``bench.soak``.

Usage: ``python -m bench [--sizes 1000,10000,100000] [--rounds 15] [--all] [--hook PATH]
[--cache DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

import psutil

from bench.common import (
    DaemonProc,
    GitPeer,
    cpu_speed_ms,
    file_create_ms,
    http_poster,
    make_tree,
    median,
    tree_file,
    write_payload,
)
from bench.tree import cached_tree

# What hooks/hooks.json runs: the environment's installed ``snapshot-hook`` script.
HOOK = [str(Path(sys.executable).parent / "snapshot-hook")]
QUIET = {"SNAPSHOTD_SETTLE_MS": "600000", "SNAPSHOTD_MAX_WAIT_MS": "600000",
         # The content scan for secrets (on by default); SNAPSHOTD_SECRET_SCAN=0 measures without.
         "SNAPSHOTD_SECRET_SCAN": os.environ.get("SNAPSHOTD_SECRET_SCAN", "1"),
         "SNAPSHOTD_HTTP_HOOK": "1", "SNAPSHOTD_HTTP_HOOK_PORT": "0"}


def run_size(files: int, rounds: int, hooks: list[str] | None = None,
             cache: Path | None = None) -> dict:
    work = Path(tempfile.mkdtemp(prefix="sdperf", dir=str(cache) if cache else "/tmp"))
    reused = cache is not None and (cache / f"tree-{files}" / "ready").exists()
    started = time.perf_counter()
    wt = cached_tree(files, cache) if cache else make_tree(work / "wt", files)
    prepare_s = time.perf_counter() - started
    daemon = DaemonProc(QUIET)
    try:
        peer = GitPeer(wt, work / "peer.git")
        rss = {"started": _rss_mb(daemon)}
        with daemon.client() as c:
            started = time.perf_counter()
            c.attempt_begin("perf", "n", str(wt))  # sets the watch up before it returns
            watch_ms = (time.perf_counter() - started) * 1000
            rss["watched"] = _rss_mb(daemon)
            started = time.perf_counter()
            c.snapshot(str(wt), run_id="perf", node_id="n")
            first_ms = (time.perf_counter() - started) * 1000
            rss["first_capture"] = _rss_mb(daemon)
        peer_first = peer.capture()
        # Let the first capture's own events drain and the watcher's verification scan (about
        # a second after it) finish: the rounds below measure the steady state.
        time.sleep(2.5)
        # The first 100 files in path order: 10 in each of 10 directories.
        targets = [tree_file(wt, i) for i in range(min(100, files))]
        out: dict = {"files": files, "directories": _directories(wt),
                     "prepare_s": round(prepare_s, 1), "tree_reused": reused,
                     "first_capture_ms": round(first_ms, 1),
                     "peer_first_capture_ms": round(peer_first, 1),
                     "watch_setup_ms": round(watch_ms, 1),
                     # What creating a file cost where the store is, before the steady rows
                     # (every capture with a change creates several: bench.common).
                     "file_create_ms": file_create_ms(daemon.dir),
                     # This host's speed phase (lower is faster; bench.common.cpu_speed_ms).
                     "cpu_speed_ms": cpu_speed_ms()}
        for changed in (0, 1, 100):
            ours, theirs = [], []
            for r in range(rounds):
                for t in targets[:changed]:
                    t.write_text(f"round {r} {changed}\n")
                with daemon.client() as c:
                    ours.append(c.snapshot(str(wt), run_id="perf", node_id="n")["elapsed_ms"])
                for t in targets[:changed]:
                    t.write_text(f"peer round {r} {changed}\n")
                theirs.append(peer.capture())
            out[f"capture_{changed}_ms"] = median(ours)
            out[f"peer_capture_{changed}_ms"] = median(theirs)
        env = dict(daemon.env, SNAPSHOTD_RUN_ID="perf", SNAPSHOTD_NODE_ID="n")
        commands = {"hook_end_to_end_ms": HOOK}
        for i, path in enumerate(hooks or []):
            commands[f"hook_end_to_end_ms_{i + 1}"] = [path]
        hook_ms: dict[str, list[float]] = {name: [] for name in commands}
        for r in range(rounds):
            for name, command in commands.items():  # interleaved: the same load for each
                targets[0].write_text(f"hook round {r} {name}\n")
                payload = write_payload("perf", wt, targets[0], f"toolu_perf_{r}_{name}")
                t0 = time.perf_counter()
                subprocess.run(command, input=payload, env=env, check=True)
                hook_ms[name].append((time.perf_counter() - t0) * 1000)
        for name, command in commands.items():
            out[name] = median(hook_ms[name])
            if name != "hook_end_to_end_ms":
                out[name.replace("_ms_", "_command_")] = command[0]
        out["hook_http_end_to_end_ms"] = _http_hook(daemon, wt, targets[0], rounds)
        out.update(_restore_1_file(daemon, peer, targets[2:2 + rounds]))
        out.update(_growth(daemon, wt, targets[1]))
        out["daemon_rss_mb_watched"] = _rss_mb(daemon)
        out["daemon_rss_mb_at"] = rss
        with daemon.client() as c:
            status = c.status()
        counters, watcher = status["counters"], status.get("watcher", {})
        out["watches"] = watcher.get("watches")
        out["fast_captures"] = counters.get("fast_captures")
        out["full_scans"] = counters.get("full_scans")
        out["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        return out
    finally:
        daemon.stop()
        subprocess.run(["rm", "-rf", str(work)])


def _rss_mb(daemon: DaemonProc) -> float:
    return round(psutil.Process(daemon.proc.pid).memory_info().rss / 2**20, 1)


def _http_hook(daemon: DaemonProc, wt: Path, target: Path, rounds: int) -> float:
    """The hook over HTTP as the agent sees it: connect, POST the payload, read the empty 200
    (the capture of one changed file included)."""
    post = http_poster(daemon, **{"X-Snapshotd-Run-Id": "perf", "X-Snapshotd-Node-Id": "n"})
    times = []
    for r in range(rounds):
        target.write_text(f"http hook round {r}\n")
        body = write_payload("perf", wt, target, f"toolu_perf_http_{r}")
        t0 = time.perf_counter()
        if post(body) != 200:
            raise RuntimeError("the HTTP hook did not answer 200")
        times.append((time.perf_counter() - t0) * 1000)
    return median(times)


def _restore_1_file(daemon: DaemonProc, peer: GitPeer, victims: list[Path]) -> dict:
    """Restore of a one-file diff in place: the daemon's ``restore`` of its newest checkpoint
    after one file changed (watched worktree), against the peer's ``add -A`` (the peer has no
    stat cache it can trust otherwise) + ``read-tree -m -u`` of its own newest tree."""
    with daemon.client() as c:
        seq = c.list("perf")["checkpoints"][-1]["seq"]
    peer.capture()
    target = peer._git("rev-parse", f"{peer.parent}^{{tree}}")
    ours, theirs = [], []
    for i, victim in enumerate(victims):
        original = victim.read_bytes()
        victim.write_text(f"restore round {i}\n")
        with daemon.client() as c:
            ours.append(c.restore(run_id="perf", node_id="n", seq=seq, force=True)
                        ["elapsed_ms"])
        if victim.read_bytes() != original:
            raise RuntimeError(f"restore did not bring {victim} back")
        victim.write_text(f"peer restore round {i}\n")
        t0 = time.perf_counter()
        peer._git("add", "-A", ".")
        peer._git("read-tree", "-m", "-u", target)
        theirs.append((time.perf_counter() - t0) * 1000)
    return {"restore_1_file_ms": median(ours), "peer_restore_1_file_ms": median(theirs)}


def _directories(root: Path) -> int:
    count = 0
    for _, dirs, _ in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".git"]
        count += len(dirs)
    return count


def _growth(daemon: DaemonProc, wt: Path, target: Path) -> dict:
    """Store growth for one small changed file, against the objects that change needs."""
    objects = daemon.home / "store.git" / "objects"

    def loose() -> dict[str, int]:
        return {str(p): p.stat().st_size for p in objects.glob("??/*")}

    before = loose()
    target.write_text("one small change\n")
    with daemon.client() as c:
        r = c.snapshot(str(wt), run_id="perf", node_id="n")
    after = loose()
    grown = sum(size for path, size in after.items() if path not in before)
    # What the change needs: the blob, each tree on its path, the commit (zlib, as git stores).
    need = 0
    show = ["git", "--git-dir", str(daemon.home / "store.git"), "cat-file"]
    rel = target.relative_to(wt).as_posix().split("/")
    paths = ["" ] + ["/".join(rel[:i]) for i in range(1, len(rel))]
    oids = [r["commit"]] + [subprocess.run(show[:3] + ["rev-parse", f"{r['commit']}:{p}"],
                                           capture_output=True, text=True).stdout.strip()
                            for p in paths] + [
        subprocess.run(show[:3] + ["rev-parse", f"{r['commit']}:{target.relative_to(wt)}"],
                       capture_output=True, text=True).stdout.strip()]
    for oid in oids:
        kind = subprocess.run(show + ["-t", oid], capture_output=True, text=True).stdout.strip()
        body = subprocess.run(show + [kind, oid], capture_output=True).stdout
        need += len(zlib.compress(f"{kind} {len(body)}\0".encode() + body))
    return {"store_bytes_per_checkpoint": grown, "needed_bytes": need,
            "growth_ratio": round(grown / need, 3) if need else None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--all", action="store_true", help="Also run bench.restore and "
                        "bench.idle (short) and merge their JSON.")
    parser.add_argument("--hook", action="append", default=[], metavar="PATH",
                        help="Also time this snapshot-hook (e.g. a non-editable install's), "
                        "interleaved with the environment's own; repeatable.")
    parser.add_argument("--cache", type=Path, default=None, metavar="DIR",
                        help="Keep each generated tree under DIR/tree-<files> and reuse it on "
                        "the next run (bench.tree); without it a tree is written and removed.")
    args = parser.parse_args()
    doc: dict = {"bench": "performance", "machine": {"cpus": os.cpu_count()},
                 "load_average_before": [round(x, 2) for x in os.getloadavg()],
                 "sizes": [run_size(int(n), args.rounds, args.hook, args.cache)
                           for n in args.sizes.split(",")]}
    if args.all:
        for name, extra in (("restore", ["--files", "100000", "--rounds", "5"]),
                            ("idle", ["--worktrees", "20", "--files", "10000",
                                      "--seconds", "60", "--rounds", "10"])):
            proc = subprocess.run([sys.executable, "-m", f"bench.{name}", *extra],
                                  capture_output=True, text=True)
            try:
                doc[name] = json.loads(proc.stdout)
            except ValueError:
                doc[name] = {"error": proc.stderr[-2000:]}
    print(json.dumps(doc, indent=2))


if __name__ == "__main__":
    main()
