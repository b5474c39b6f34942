"""powercut: snapshotd with its home on powerfs (tests/support/powerfs.py), a workload of captures,
power cuts, and the checks that follow each cut.

``Rig(root, durability)`` keeps ``<root>/disk`` (the backing directory: the "disk"), mounts it
at ``<root>/mnt`` and runs the daemon with its home at ``<root>/mnt/home`` (socket and worktrees
stay off the layer: a power cut is about the daemon's own files). ``capture`` records every
reply; a reply received before the cut point fired (``PowerFS.status()["frozen"]`` still false
after it arrived) is *acknowledged before the cut* and must survive in full mode.
``power_cut()`` kills the daemon (SIGKILL: the power took it too), rewrites the disk to its
durable state, remounts and starts the daemon again. ``problems()`` then lists what broke:

- an acknowledged checkpoint (full mode) missing from the ledger or from its attempt's chain;
- ``git fsck --strict`` of the store failing (full mode), or the ledger's ``PRAGMA
  integrity_check``;
- a seq handed out twice for different commits (any mode);
- a ledger row naming a commit the store does not have.

``capture_again(wt)`` changes a file and captures: every worktree must stay capturable.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.powerfs import PowerFS

QUIET_WATCHER = {"SNAPSHOTD_SETTLE_MS": "600000", "SNAPSHOTD_MAX_WAIT_MS": "600000"}


@dataclass
class Ack:
    attempt: str
    seq: int
    commit: str
    tree: str
    before_cut: bool


@dataclass
class Rig:
    root: Path
    durability: str = "full"
    extra_env: dict[str, str] = field(default_factory=dict)
    home_exists: bool = False  # the home directory is on the disk before the first start
    journal: bool = False  # powerfs's journal (ext4) model instead of the strict one

    def __post_init__(self) -> None:
        self.disk = self.root / "disk"
        self.disk.mkdir(parents=True, exist_ok=True)
        if self.home_exists:
            (self.disk / "home").mkdir(exist_ok=True)
        self.fs = PowerFS(self.disk, self.root / "mnt", state=self.root / "pfs",
                          journal=self.journal)
        self.home = self.root / "mnt" / "home"
        self.sockdir = Path(tempfile.mkdtemp(prefix="pc", dir="/tmp"))
        self.socket = self.sockdir / "s.sock"
        self.log = self.root / "daemon.log"
        self.proc: subprocess.Popen | None = None
        self.acks: list[Ack] = []
        self.handed: dict[str, dict[int, str]] = {}  # attempt -> seq -> commit, every reply
        self.reuse: list[str] = []
        self.worktrees: dict[str, Path] = {}  # attempt -> worktree
        self.counter = 0

    # -- the daemon ------------------------------------------------------------------------

    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SNAPSHOTD_", "GIT_", "CLAUDE_", "GEMINI_"))}
        env.update(SNAPSHOTD_HOME=str(self.home), SNAPSHOTD_SOCKET=str(self.socket),
                   SNAPSHOTD_AUTOSTART="0", XDG_CONFIG_HOME=str(self.root / "config"),
                   SNAPSHOTD_DURABILITY=self.durability, **QUIET_WATCHER,
                   # Every cut is a reboot: the seq marks apply after one (snapshotd.service.seqmarks).
                   SNAPSHOTD_BOOT_ID=f"powercut-boot-{self.fs.cuts}")
        env.update(self.extra_env)
        return env

    def start(self, sync_limit: int | None = None, timeout: float = 30.0) -> None:
        if self.fs.proc is None:
            self.fs.mount(sync_limit=sync_limit)
        with open(self.log, "ab") as logf:
            self.proc = subprocess.Popen([sys.executable, "-m", "snapshotd", "serve"],
                                         env=self.environ(), stdout=logf, stderr=logf,
                                         stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {self.log_tail()}")
            try:
                with self.client(timeout=2) as c:
                    c.ping()
                return
            except Exception:
                time.sleep(0.05)
        raise RuntimeError(f"daemon did not answer: {self.log_tail()}")

    def client(self, timeout: float = 60.0) -> Any:
        from snapshotd_client import Client

        return Client(self.socket, timeout=timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def settle(self, sync_limit: int | None = None) -> None:
        """Stop the daemon and unmount cleanly, then start again: everything so far is on the
        disk (a home that has been running for a while), so a later cut tests only what
        follows."""
        if self.proc is not None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)
            self.proc = None
        self.fs.unmount()
        self.start(sync_limit=sync_limit)

    def power_cut(self, restart: bool = True) -> None:
        self.kill()
        self.fs.cut()
        if restart:
            self.start()

    def close(self) -> None:
        self.kill()
        if self.fs.proc is not None:
            self.fs.unmount()
        shutil.rmtree(self.sockdir, ignore_errors=True)

    def log_tail(self, n: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    # -- the workload ----------------------------------------------------------------------

    def begin(self, run: str, node: str, worktree: Path) -> str:
        with self.client() as c:
            reply = c.attempt_begin(run, node, str(worktree))
        attempt = f"{run}/{node}/0/{reply.get('attempt', 1)}"
        self.worktrees[attempt] = worktree
        return attempt

    def capture(self, attempt: str) -> dict:
        run, node, iteration, number = attempt.split("/")
        with self.client() as c:
            reply = c.snapshot(str(self.worktrees[attempt]), run_id=run, node_id=node,
                               iteration=int(iteration), attempt=int(number))
        before_cut = not self.fs.status()["frozen"]
        self._record(attempt, reply, before_cut)
        return reply

    def change(self, attempt: str, files: int = 1) -> None:
        wt = self.worktrees[attempt]
        for _ in range(files):
            self.counter += 1
            target = wt / f"d{self.counter % 3}" / f"f{self.counter % 7}.txt"
            target.parent.mkdir(exist_ok=True)
            target.write_text(f"change {self.counter}\n")

    def capture_again(self, attempt: str) -> dict:
        """A new change must be capturable after any cut (raises if the daemon refuses)."""
        self.change(attempt)
        return self.capture(attempt)

    def _record(self, attempt: str, reply: dict, before_cut: bool) -> None:
        seq, commit = int(reply["seq"]), str(reply["commit"])
        self.acks.append(Ack(attempt, seq, commit, str(reply.get("tree", "")), before_cut))
        if not before_cut:
            # The power went before this reply: it was never sent, its seq never handed out.
            return
        seen = self.handed.setdefault(attempt, {})
        if seq in seen and seen[seq] != commit:
            self.reuse.append(f"{attempt} seq {seq} handed out for {seen[seq]} and again for "
                              f"{commit}")
        seen.setdefault(seq, commit)

    # -- the checks ------------------------------------------------------------------------

    def problems(self, require_acked: bool | None = None) -> list[str]:
        """What is broken now (run with the daemon up after a cut); [] when all holds."""
        if require_acked is None:
            require_acked = self.durability == "full"
        out = list(self.reuse)
        store = self.home / "store.git"
        fsck = subprocess.run(["git", "--git-dir", str(store), "fsck", "--strict",
                               "--no-dangling", "--no-progress"], capture_output=True, text=True)
        # Process mode may lose a surviving checkpoint's blob (docs/durability.md): fsck then
        # names it. Full mode may lose nothing.
        if fsck.returncode != 0 and self.durability == "full":
            out.append(f"git fsck --strict: {(fsck.stdout + fsck.stderr).strip()[:600]}")
        rows = self._ledger_rows()
        if isinstance(rows, str):
            return [*out, rows]
        for key, seq, commit in rows:
            if not _has_commit(store, commit):
                out.append(f"ledger row {key} seq {seq} names commit {commit}, not in the store")
        if require_acked:
            by_key = {(k, s): c for k, s, c in rows}
            for ack in self.acks:
                if not ack.before_cut:
                    continue
                if by_key.get((ack.attempt, ack.seq)) != ack.commit:
                    out.append(f"acknowledged {ack.attempt} seq {ack.seq} ({ack.commit}) lost "
                               f"from the ledger (now {by_key.get((ack.attempt, ack.seq))})")
                elif not _reachable(store, ack.attempt, ack.commit):
                    out.append(f"acknowledged {ack.attempt} seq {ack.seq} ({ack.commit}) not on "
                               "its attempt's chain")
        return out

    def _ledger_rows(self) -> list[tuple[str, int, str]] | str:
        path = self.home / "snapshotd.db"
        try:
            db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        except sqlite3.Error as exc:
            return f"ledger cannot be opened: {exc}"
        try:
            check = db.execute("PRAGMA integrity_check").fetchone()[0]
            if check != "ok":
                return f"ledger integrity_check: {check}"
            cur = db.execute(
                "SELECT run_id, node_id, iteration, attempt, seq, commit_id FROM checkpoints "
                "WHERE pruned_at IS NULL")
            return [(f"{r}/{n}/{i}/{a}", int(s), str(c)) for r, n, i, a, s, c in cur]
        except sqlite3.Error as exc:
            return f"ledger cannot be read: {exc}"
        finally:
            db.close()


def _has_commit(store: Path, commit: str) -> bool:
    return subprocess.run(["git", "--git-dir", str(store), "cat-file", "-e",
                           f"{commit}^{{commit}}"], capture_output=True).returncode == 0


def _reachable(store: Path, attempt: str, commit: str) -> bool:
    ref = "refs/snapshotd/runs/" + attempt
    return subprocess.run(["git", "--git-dir", str(store), "merge-base", "--is-ancestor",
                           commit, ref], capture_output=True).returncode == 0


def plain_tree(path: Path, files: int = 5) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        (path / f"file{i}.txt").write_text(f"content {i}\n")
    return path


def git_tree(path: Path, files: int = 5) -> Path:
    plain_tree(path, files)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    for args in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-q", "-m", "init"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True, capture_output=True)
    return path
