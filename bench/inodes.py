"""Inodes made and freed per capture: the daemon against the git-CLI peer, same trees, same run.

Why it matters: on ext4 without a journal every freed inode is checked again at each later
inode allocation in its block group for one to five minutes (the kernel's
``recently_deleted``), so a capture that frees files makes every later file creation near it
slower while the load lasts (docs/performance.md, "Files made and freed per capture").

How: ``worktrees`` trees of ``files`` files each, each captured twice first (the first capture
and a first ref move), then ``captures`` tool-call captures round-robin, one file written before
each, counted with perf's ``ext4:ext4_allocate_inode`` and ``ext4:ext4_free_inode`` tracepoints
on the daemon's process (a capture's tier-2 settle capture of the same window included, over
the ``settle`` seconds after). The peer (``GitPeer``: ``git add -A``, ``write-tree``,
``commit-tree``, ``update-ref`` with a private index) captures the same trees the same number of
times in a child process counted the same way (after its own warm-up). Needs ``perf`` and an
ext4 file system under ``--dir``. Usage: ``python -m bench.inodes [--captures 200] [--worktrees 4] [--files 200]
[--dir /tmp] [--python PY --cwd DIR]`` (``--python``/``--cwd``: another install's daemon).
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.common import DaemonProc, make_tree

EVENTS = ("ext4:ext4_allocate_inode", "ext4:ext4_free_inode")
# A peer child process: capture each tree in turn, ``n`` times, after a write like the daemon's.
PEER_CODE = """
import sys
from pathlib import Path
from bench.common import GitPeer
trees, stores, n = sys.argv[1].split(","), sys.argv[2].split(","), int(sys.argv[3])
peers = [GitPeer(Path(t), Path(s)) for t, s in zip(trees, stores)]
for p in peers:
    for k in range(2):
        (p.worktree / "w.txt").write_text(f"warm{k}")
        p.capture()
print("warm", flush=True)
sys.stdin.readline()
for j in range(n):
    p = peers[j % len(peers)]
    (p.worktree / "w.txt").write_text(f"edit {j}")
    p.capture()
"""


def run(captures: int, worktrees: int, files: int, parent: str, python: str,
        cwd: Path | None, settle_s: float = 4.0) -> dict:
    if shutil.which("perf") is None:
        raise SystemExit("bench.inodes needs perf (linux-perf / linux-tools)")
    work = Path(tempfile.mkdtemp(prefix="sdinodes", dir=parent))
    try:
        daemon_trees = [make_tree(work / f"wt{i}", files) for i in range(worktrees)]
        peer_trees = [make_tree(work / f"peer-wt{i}", files) for i in range(worktrees)]
        return {"bench": "inodes", "captures": captures, "worktrees": worktrees,
                "files_per_worktree": files, "dir": parent,
                "snapshotd": _daemon(daemon_trees, captures, python, cwd, parent, settle_s),
                "git_cli": _peer(peer_trees, work, captures)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _daemon(trees: list[Path], n: int, python: str, cwd: Path | None, parent: str,
            settle_s: float) -> dict:
    daemon = DaemonProc(python=python, cwd=cwd, parent=parent)
    try:
        out = daemon.dir / "perf.txt"
        with daemon.client() as c:
            for i, wt in enumerate(trees):
                for k in range(2):
                    (wt / "w.txt").write_text(f"warm{k}")
                    c.request("snapshot", cwd=str(wt), source="cli", run_id=f"r{i}",
                              node_id="n")
            time.sleep(settle_s)  # the warm-up's settle windows close before counting
            perf = _perf(["-p", str(daemon.proc.pid)], out)
            time.sleep(1.0)  # perf attached
            for j in range(n):
                wt = trees[j % len(trees)]
                (wt / "w.txt").write_text(f"edit {j}")
                c.request("snapshot", cwd=str(wt), source="cli", run_id=f"r{j % len(trees)}",
                          node_id="n")
            time.sleep(settle_s)
            perf.send_signal(signal.SIGINT)
            perf.wait(30)
        return _per_capture(out, n)
    finally:
        daemon.stop()


def _peer(trees: list[Path], work: Path, n: int) -> dict:
    """The peer in a child process, counted (its git processes included: counters are
    inherited) from after its warm-up."""
    stores = [work / f"peer-store{i}.git" for i in range(len(trees))]
    out = work / "peer-perf.txt"
    child = subprocess.Popen([sys.executable, "-c", PEER_CODE, ",".join(map(str, trees)),
                              ",".join(map(str, stores)), str(n)],
                             cwd=Path(__file__).resolve().parent.parent,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert child.stdin is not None and child.stdout is not None
    child.stdout.readline()  # warm
    perf = _perf(["-p", str(child.pid)], out)
    time.sleep(1.0)  # perf attached
    child.stdin.write(b"go\n")
    child.stdin.close()
    code = child.wait(600)
    perf.send_signal(signal.SIGINT)
    perf.wait(30)
    if code != 0:
        raise RuntimeError(f"the git peer exited {code}")
    return _per_capture(out, n)


def _perf(args: list[str], out: Path) -> subprocess.Popen:
    cmd = ["perf", "stat", "-x,", "-o", str(out)]
    for event in EVENTS:
        cmd += ["-e", event]
    return subprocess.Popen(cmd + args)


def _per_capture(out: Path, n: int) -> dict:
    counts: dict[str, int] = {}
    for line in out.read_text().splitlines():
        parts = line.split(",")
        if len(parts) > 2 and parts[2] in EVENTS:
            counts[parts[2]] = int(parts[0]) if parts[0].isdigit() else 0
    return {"inodes_allocated_per_capture": round(counts.get(EVENTS[0], 0) / n, 2),
            "inodes_freed_per_capture": round(counts.get(EVENTS[1], 0) / n, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--captures", type=int, default=200)
    parser.add_argument("--worktrees", type=int, default=4)
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--dir", default="/tmp")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--cwd", default=None)
    args = parser.parse_args()
    print(json.dumps(run(args.captures, args.worktrees, args.files, args.dir, args.python,
                         Path(args.cwd) if args.cwd else None), indent=2))


if __name__ == "__main__":
    main()
