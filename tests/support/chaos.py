"""The randomized fault engine shared by tests/system/test_chaos.py (bounded, fixed seeds) and
bench/chaos.py (long runs).

One ``Chaos`` world: a git worktree, a snapshotd home, the daemon as a real subprocess (run as
``nobody`` when this process is root, so ``chmod 000`` really hides a path from it, the way
tests/capture/test_unreadable.py runs it: every module imported first, then the uid dropped). Each
``step`` picks, from its seeded ``random.Random``:

- a tool call: a few random edits (new, changed and deleted files, odd names: bytes that are
  not UTF-8, spaces, newlines, leading dashes, unicode; symlinks, some pointing outside; a
  FIFO; a ``chmod 000`` file or directory, or one made readable again), then the real
  ``snapshot-hook`` with a fresh tool call id;
- the same tool call with a store (``objects``) or ledger write fault injected through
  ``SNAPSHOTD_FAULT_FILE`` (snapshotd/faults.py), cleared after it;
- a restore of a random earlier checkpoint, into a new ``to`` directory (its files then must
  equal the checkpoint) or, sometimes, in place (forced: the daemon takes a safety checkpoint);
- a ``gc`` (keep the newest checkpoint of ended attempts, no grace), or a new attempt (the old
  one ended, so gc has something to drop);
- a ``kill -9`` of the daemon, a tool call while it is down, and a restart.

After every step it checks the invariants (``check``): every tool call is either a checkpoint
whose tree equals the oracle taken right after the hook returned (``git add -A`` into a
scratch index of a throwaway repository whose work tree is the worktree; paths the engine made
unreadable are compared on neither side) or a gap with a reason; ``git fsck --strict`` on the
store is clean, any "missing" or "broken link" a violation, dangling objects allowed (fsck runs
with the daemon stopped, so it sees one instant of the store: its object scan precedes its ref
read, and a capture landing in between looked like a hole); SQLite's ``PRAGMA integrity_check`` says ``ok``; the daemon answers ``status``.
Violations are collected with the seed and step that found them (replay: the same seed)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

NOBODY = 65534
RUN, NODE = "chaos", "agent"
FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "claude-code" / "post-tool-use.ndjson"
GIT = ["git", "-c", "safe.directory=*", "-c", "core.quotePath=false"]
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "HOME": "/nonexistent",
           "GIT_AUTHOR_NAME": "o", "GIT_AUTHOR_EMAIL": "o@o", "GIT_COMMITTER_NAME": "o",
           "GIT_COMMITTER_EMAIL": "o@o"}

# Imports first, then drops to ``nobody`` (whose reads of the interpreter's own library may be
# refused). The daemon imports every module; the hook and the worker only the client.
_DROP = textwrap.dedent("""
    import importlib, json, os, pkgutil, sqlite3, sys
    import errno, fcntl, select, selectors, socket, stat, struct, time, uuid
    import {package}
    for _m in pkgutil.walk_packages({package}.__path__, "{package}."):
        importlib.import_module(_m.name)
    from snapshotd_client import Client, SnapshotdError
    from snapshotd_client.hook import main as hook_main
    if os.environ.pop("CHAOS_DROP", "") == "1":
        os.setgroups([]); os.setgid(65534); os.setuid(65534)
""")
_DAEMON = _DROP.format(package="snapshotd") + "from snapshotd.cli import main\nsys.argv = ['snapshotd', 'serve']\nmain()\n"
_HOOK = _DROP.format(package="snapshotd_client") + "hook_main()\n"
# One request per stdin line (JSON [op, fields]), one JSON reply per stdout line; op
# ``integrity`` and ``query`` read the SQLite ledger as the daemon's user (root would create
# WAL files the daemon then could not open).
_WORKER = _DROP.format(package="snapshotd_client") + textwrap.dedent("""
    for line in sys.stdin:
        op, fields = json.loads(line)
        try:
            if op in ("integrity", "query"):
                db = sqlite3.connect(f"file:{fields['db']}?mode=ro", uri=True)
                sql = fields.get("sql", "PRAGMA integrity_check")
                rows = db.execute(sql, fields.get("params", [])).fetchall()
                db.close()
                out = {"ok": rows[0][0] if op == "integrity" else rows}
            else:
                with Client(fields.pop("socket"), timeout=120) as c:
                    out = {"ok": c.request(op, **fields)}
        except SnapshotdError as exc:
            out = {"error": exc.code, "message": exc.message}
        except Exception as exc:
            out = {"error": "client", "message": repr(exc)}
        print(json.dumps(out, default=str), flush=True)
""")


@dataclass
class Stats:
    steps: int = 0
    captures: int = 0
    gaps: Counter = field(default_factory=Counter)
    restores: int = 0
    restore_errors: Counter = field(default_factory=Counter)
    gcs: int = 0
    kills: int = 0
    violations: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"steps": self.steps, "captures": self.captures,
                "gaps_by_reason": dict(self.gaps), "restores": self.restores,
                "restore_errors": dict(self.restore_errors), "gcs": self.gcs,
                "kills": self.kills, "violations": self.violations}


class Chaos:
    """One seeded world; ``run(seconds, max_steps)`` steps until either bound, then ``close``."""

    def __init__(self, seed: int, base: Path | None = None) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.base = Path(tempfile.mkdtemp(prefix=f"sdchaos{seed}-", dir=base or "/tmp"))
        os.chmod(self.base, 0o755)
        self.drop = os.geteuid() == 0
        self.home = self.base / "home"
        self.sockdir = Path(tempfile.mkdtemp(prefix="sdc", dir="/tmp"))
        self.socket = self.sockdir / "s.sock"
        self.fault_file = self.base / "faults"
        self.wt = self.base / "wt"
        self.oracle = self.base / "oracle.git"
        self.stats = Stats()
        self.locked: set[str] = set()  # worktree paths chmod 000
        self.trace: list[str] = []  # what each step did, for a violation's report
        self.calls = 0
        self._last: object = None  # the path the last edit touched
        self.attempt = 1
        self.daemon: subprocess.Popen | None = None
        self.worker: subprocess.Popen | None = None
        self._setup()

    # -- the run -------------------------------------------------------------------------------

    def run(self, seconds: float, max_steps: int | None = None) -> Stats:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (max_steps is None
                                               or self.stats.steps < max_steps):
            self.step()
        return self.stats

    def step(self) -> None:
        roll = self.rng.random()
        self.stats.steps += 1
        where = f"seed {self.seed} step {self.stats.steps}"
        self.trace.append(f"-- step {self.stats.steps}")
        self.trace.append(f"roll {roll:.3f}")
        if roll < 0.55:
            self._edit()
            self._tool_call(where)
        elif roll < 0.65:
            self._edit()
            self._tool_call(where, fault=self.rng.choice(["objects=ENOSPC", "objects=EIO",
                                                          "ledger=ENOSPC", "ledger=EIO"]))
        elif roll < 0.78:
            self._restore(where, in_place=self.rng.random() < 0.3)
        elif roll < 0.86:
            self._gc(where)
        elif roll < 0.91:
            self._new_attempt(where)
        else:
            self._kill_and_restart(where)
        self.check(where)

    def check(self, where: str) -> None:
        """The invariants that hold after any step."""
        with self._daemon_frozen():
            # fsck reads every object, then the refs: a capture landing in between names a
            # commit the scan never saw ("missing"), on a whole store. Frozen, the daemon shows
            # fsck one instant of the store, as a kill -9 there would leave it.
            fsck = subprocess.run([*GIT, "--git-dir", str(self.home / "store.git"), "fsck",
                                   "--strict", "--no-progress"], capture_output=True,
                                  env=self._git_env(), timeout=300)
            broken = self._broken_refs() if fsck.returncode != 0 else []
        if fsck.returncode != 0:
            self._violation(where, f"git fsck --strict: {fsck.stdout!r} {fsck.stderr!r}; refs "
                                   f"that do not reach all their objects: {broken}")
        integrity = self.call("integrity", db=str(self.home / "snapshotd.db"))
        if integrity.get("ok") != "ok":
            self._violation(where, f"ledger integrity: {integrity}")
        status = self.request("status")
        if "ok" not in status:
            self._violation(where, f"status did not answer: {status}")

    @contextlib.contextmanager
    def _daemon_frozen(self) -> Iterator[None]:
        """The daemon stopped (``SIGSTOP``, waited for) for the block, then continued. Only the
        daemon moves refs and writes the objects they name; the ``git`` it may be running
        meanwhile (a first capture's object copy) writes objects nothing names yet."""
        daemon = self.daemon
        if daemon is None or daemon.poll() is not None:
            yield
            return
        os.kill(daemon.pid, signal.SIGSTOP)
        try:
            # Until it has stopped (or died: WNOWAIT leaves that to ``Popen`` to reap).
            os.waitid(os.P_PID, daemon.pid, os.WSTOPPED | os.WEXITED | os.WNOWAIT)
            yield
        finally:
            os.kill(daemon.pid, signal.SIGCONT)

    def _broken_refs(self) -> list[str]:
        store = [*GIT, "--git-dir", str(self.home / "store.git")]
        refs = subprocess.run([*store, "for-each-ref", "--format=%(refname) %(objectname)"],
                              env=self._git_env(), capture_output=True, text=True,
                              timeout=60).stdout.split("\n")
        broken = []
        for line in filter(None, refs):
            name, oid = line.split(" ", 1)
            # Its stdout names every path, some not UTF-8 (only stderr is read).
            walk = subprocess.run([*store, "rev-list", "--objects", oid], env=self._git_env(),
                                  capture_output=True, text=True, errors="replace", timeout=120)
            if walk.returncode != 0:
                broken.append(f"{name} -> {oid}: {walk.stderr.strip()[-300:]}")
        return broken

    def close(self, keep: bool = False) -> None:
        """Stop the daemon and the worker; remove the world unless ``keep`` (to inspect it)."""
        self._stop_daemon()
        if self.worker is not None:
            self.worker.stdin.close()  # type: ignore[union-attr]
            self.worker.wait(timeout=30)
        for path in self.locked:
            _unlock(self.wt / path)
        shutil.rmtree(self.sockdir, ignore_errors=True)
        if not keep:
            shutil.rmtree(self.base, ignore_errors=True)

    # -- steps ---------------------------------------------------------------------------------

    def _tool_call(self, where: str, fault: str | None = None) -> None:
        self.calls += 1
        tool_use_id = f"toolu_chaos_{self.seed}_{self.calls}"
        if fault is not None:
            self.fault_file.write_text(fault + "\n")
        try:
            proc = self._hook(tool_use_id)
        finally:
            self.fault_file.unlink(missing_ok=True)
        if proc.returncode != 0 or proc.stdout:
            self._violation(where, f"hook exit {proc.returncode}, stdout {proc.stdout!r}, "
                                   f"stderr {proc.stderr[-2000:]!r}")
        oracle = self._oracle_tree(self.wt)
        self._expect_call(where, tool_use_id, oracle, fault)

    def _expect_call(self, where: str, tool_use_id: str, oracle: str,
                     fault: str | None) -> None:
        gaps = [g for g in self._gaps() if g.get("tool_use_id") == tool_use_id]
        if gaps:
            if not all(g.get("reason") for g in gaps):
                self._violation(where, f"a gap without a reason: {gaps}")
            self.stats.gaps.update(g["reason"] for g in gaps)
            return
        row = self._ledger("SELECT c.tree, t.deduped FROM tool_calls t JOIN checkpoints c "
                           "ON c.attempt_pk = t.attempt_pk AND c.seq = t.seq "
                           "WHERE t.tool_use_id = ?", (tool_use_id,))
        if not row:
            self._violation(where, f"tool call {tool_use_id} is neither a checkpoint nor a gap"
                                   f" (fault {fault})")
            return
        self.stats.captures += 1
        if fault is not None and not row[0][1]:
            # A deduplicated call writes no checkpoint (only its tool-call row, which the
            # ``ledger`` seam does not cover); a new checkpoint under a fault is a defect.
            self._violation(where, f"{tool_use_id} was acknowledged under fault {fault}")
        if not self._same_tree(row[0][0], oracle):
            self._violation(where, f"{tool_use_id}: checkpoint tree {row[0][0]} != oracle "
                                   f"{oracle}: {self._tree_diff(row[0][0], oracle)}")

    def _restore(self, where: str, in_place: bool) -> None:
        rows = self._ledger("SELECT c.seq, c.tree, a.attempt FROM checkpoints c JOIN attempts a "
                            "ON a.pk = c.attempt_pk WHERE c.run_id = ? AND c.pruned_at IS NULL",
                            (RUN,))
        if not rows:
            return
        seq, tree, attempt = self.rng.choice(rows)
        fields = {"run_id": RUN, "node_id": NODE, "seq": seq, "attempt": attempt}
        target = None
        if in_place:
            fields["force"] = True
        else:
            target = self.base / "restores" / f"to-{self.stats.steps}"
            fields["to"] = str(target)
        reply = self.request("restore", **fields)
        self.stats.restores += 1
        if "ok" not in reply:
            self.stats.restore_errors[reply.get("error", "?")] += 1
            if reply.get("error") in ("internal", "client"):
                self._violation(where, f"restore {fields}: {reply}")
            return
        if target is not None:
            got = self._oracle_tree(target)
            if not self._same_tree(tree, got):
                self._violation(where, f"restore --to of seq {seq}: {self._tree_diff(tree, got)}")
            _rmtree(target)

    def _gc(self, where: str) -> None:
        reply = self.request("gc", keep_last=1, safety_interval_s=0)
        self.stats.gcs += 1
        if "ok" not in reply:
            self._violation(where, f"gc: {reply}")

    def _new_attempt(self, where: str) -> None:
        self.request("attempt_end", run_id=RUN, node_id=NODE, attempt=self.attempt)
        self.attempt += 1
        reply = self.request("attempt_begin", run_id=RUN, node_id=NODE, cwd=str(self.wt),
                             attempt=self.attempt)
        if "ok" not in reply:
            self._violation(where, f"attempt_begin: {reply}")

    def _kill_and_restart(self, where: str) -> None:
        assert self.daemon is not None
        self.daemon.send_signal(signal.SIGKILL)
        self.daemon.wait()
        self.stats.kills += 1
        if self.rng.random() < 0.5:
            self._edit()
            self._tool_call(where)  # nobody answers: a daemon-unavailable gap
        self._start_daemon()

    # -- edits ---------------------------------------------------------------------------------

    def edit(self) -> None:
        """A few random edits of the worktree (the ones a tool call step makes)."""
        self._edit()

    def _edit(self) -> None:
        for _ in range(self.rng.randint(1, 4)):
            kind = self.rng.choices(
                ["write", "write", "write", "delete", "dir", "odd", "symlink", "fifo", "lock",
                 "unlock"], k=1)[0]
            getattr(self, f"_edit_{kind}")()
            self.trace.append(f"{kind} {self._last!r}")

    def _files(self) -> list[Path]:
        out = []
        for dirpath, dirnames, filenames in os.walk(self.wt):
            rel = os.path.relpath(dirpath, self.wt)
            dirnames[:] = [d for d in dirnames if d != ".git"
                           and _rel(rel, d) not in self.locked]
            out.extend(Path(dirpath, f) for f in filenames
                       if _rel(rel, f) not in self.locked and f != ".gitignore")
        return out

    def _dirs(self) -> list[Path]:
        dirs = [self.wt]
        for dirpath, dirnames, _ in os.walk(self.wt):
            rel = os.path.relpath(dirpath, self.wt)
            dirnames[:] = [d for d in dirnames if d != ".git"
                           and _rel(rel, d) not in self.locked]
            # A symlink to a directory is listed with the directories: never written through
            # (one points into the snapshotd home).
            dirs.extend(Path(dirpath, d) for d in dirnames
                        if not os.path.islink(os.path.join(dirpath, d)))
        return dirs

    def _edit_write(self) -> None:
        self._last = None
        files = [f for f in self._files() if not f.is_symlink() and f.is_file()]
        if files and self.rng.random() < 0.5:
            path = self.rng.choice(files)
        else:
            path = self.rng.choice(self._dirs()) / f"f{self.rng.randrange(1000)}.txt"
        path.write_bytes(self.rng.randbytes(self.rng.choice([0, 5, 300, 5000])))
        self._own(path)

    def _edit_delete(self) -> None:
        files = self._files()
        self._last = self.rng.choice(files) if files else None
        if self._last is not None:
            self._last.unlink()

    def _edit_dir(self) -> None:
        self._last = None
        path = self.rng.choice(self._dirs()) / f"d{self.rng.randrange(100)}"
        if not os.path.lexists(path):
            path.mkdir()
            (path / "in.txt").write_text(f"{self.rng.random()}\n")
            self._own(path)
            self._own(path / "in.txt")

    def _edit_odd(self) -> None:
        name = self.rng.choice([b"caf\xc3\xa9 \xe2\x98\x83.txt", b"latin1-\xe9\xff.bin",
                                b"with space.txt", b"new\nline.txt", b"-leading-dash",
                                b"--help", b"tab\there", "\u65e5\u672c\u8a9e.md".encode()])
        path = os.path.join(os.fsencode(self.rng.choice(self._dirs())), name)
        self._last = path
        with open(path, "wb") as f:
            f.write(self.rng.randbytes(40))
        if self.drop:
            os.lchown(path, NOBODY, NOBODY)

    def _edit_symlink(self) -> None:
        self._last = None
        target = self.rng.choice(["/etc/hostname", "../outside", "f1.txt", "/nonexistent",
                                  str(self.home)])
        path = self.rng.choice(self._dirs()) / f"link{self.rng.randrange(20)}"
        if not os.path.lexists(path):
            os.symlink(target, path)
            self._own(path)

    def _edit_fifo(self) -> None:
        self._last = None
        path = self.rng.choice(self._dirs()) / f"pipe{self.rng.randrange(10)}"
        if not os.path.lexists(path):
            os.mkfifo(path)
            self._own(path)

    def _edit_lock(self) -> None:
        candidates = [p for p in self._files() + self._dirs()[1:] if not p.is_symlink()
                      and not stat_is_fifo(p)]
        self._last = None
        if candidates:
            path = self._last = self.rng.choice(candidates)
            os.chmod(path, 0)
            self.locked.add(os.path.relpath(path, self.wt))

    def _edit_unlock(self) -> None:
        self._last = None
        if self.locked:
            rel = self._last = self.rng.choice(sorted(self.locked))
            _unlock(self.wt / rel)
            self.locked.discard(rel)

    # -- the oracle and the store --------------------------------------------------------------

    def _oracle_tree(self, root: Path) -> str:
        index = self.base / "oracle-index"
        index.unlink(missing_ok=True)
        env = self._git_env(GIT_INDEX_FILE=str(index))
        base = [*GIT, "--git-dir", str(self.oracle), "--work-tree", str(root)]
        subprocess.run([*base, "add", "-A"], env=env, check=True, capture_output=True,
                       timeout=300)
        return subprocess.run([*base, "write-tree"], env=env, check=True, capture_output=True,
                              text=True, timeout=300).stdout.strip()

    def _entries(self, git_dir: Path, tree: str) -> set[bytes]:
        """A tree's ``mode type id<TAB>path`` entries, minus paths at or under one the engine
        made unreadable (the daemon keeps their last captured content; root's oracle reads
        the new one)."""
        out = subprocess.run([*GIT, "--git-dir", str(git_dir), "ls-tree", "-r", "-z", tree],
                             env=self._git_env(), capture_output=True, check=True,
                             timeout=300).stdout
        locked = [os.fsencode(p) for p in self.locked]
        keep = set()
        for entry in out.split(b"\0"):
            if not entry:
                continue
            path = entry.split(b"\t", 1)[1]
            if not any(path == p or path.startswith(p + b"/") for p in locked):
                keep.add(entry)
        return keep

    def _same_tree(self, ours: str, oracle: str) -> bool:
        return ours == oracle or not self._tree_diff(ours, oracle)

    def _tree_diff(self, ours: str, oracle: str) -> str:
        mine = self._entries(self.home / "store.git", ours)
        want = self._entries(self.oracle, oracle)
        if mine == want:
            return ""
        return f"only in ours {sorted(mine - want)[:5]}, only in oracle {sorted(want - mine)[:5]}"

    # -- processes -----------------------------------------------------------------------------

    def _setup(self) -> None:
        for d in (self.home, self.base / "config", self.base / "userhome", self.wt,
                  self.base / "restores"):
            d.mkdir(parents=True)
        subprocess.run([*GIT, "init", "-q", "-b", "main", str(self.wt)], check=True,
                       env=self._git_env(), capture_output=True)
        subprocess.run([*GIT, "init", "-q", "--bare", str(self.oracle)], check=True,
                       env=self._git_env(), capture_output=True)
        (self.wt / ".gitignore").write_text("*.log\nbuild/\n")
        (self.wt / "f1.txt").write_text("one\n")
        if self.drop:
            for d in (self.home, self.sockdir, self.base / "config", self.base / "userhome",
                      self.base / "restores"):
                os.chown(d, NOBODY, NOBODY)
            for dirpath, dirnames, filenames in os.walk(self.wt):
                os.chown(dirpath, NOBODY, NOBODY)
                for name in dirnames + filenames:
                    os.lchown(os.path.join(dirpath, name), NOBODY, NOBODY)
        os.chmod(self.sockdir, 0o700)
        self._start_daemon()
        reply = self.request("attempt_begin", run_id=RUN, node_id=NODE, cwd=str(self.wt),
                             attempt=self.attempt)
        if "ok" not in reply:
            raise RuntimeError(f"attempt_begin: {reply}")

    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SNAPSHOTD_", "CLAUDE_", "GEMINI_", "GIT_"))}
        env.update(SNAPSHOTD_HOME=str(self.home), SNAPSHOTD_SOCKET=str(self.socket),
                   SNAPSHOTD_AUTOSTART="0", XDG_CONFIG_HOME=str(self.base / "config"),
                   HOME=str(self.base / "userhome"), SNAPSHOTD_SETTLE_MS="60000",
                   SNAPSHOTD_MAX_WAIT_MS="120000", SNAPSHOTD_FAULT_FILE=str(self.fault_file),
                   SNAPSHOTD_HOOK_TIMEOUT_MS="60000", SNAPSHOTD_RUN_ID=RUN,
                   SNAPSHOTD_NODE_ID=NODE, CHAOS_DROP="1" if self.drop else "0")
        return env

    def _start_daemon(self) -> None:
        log = open(self.base / "daemon.log", "ab")
        self.daemon = subprocess.Popen([sys.executable, "-c", _DAEMON], env=self.environ(),
                                       stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.daemon.poll() is not None:
                raise RuntimeError(f"daemon exited: {self.log_tail()}")
            if "ok" in self.request("ping"):
                return
            time.sleep(0.1)
        raise RuntimeError(f"daemon did not answer: {self.log_tail()}")

    def _stop_daemon(self) -> None:
        if self.daemon is not None and self.daemon.poll() is None:
            self.daemon.terminate()
            try:
                self.daemon.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()

    def log_tail(self) -> str:
        try:
            return (self.base / "daemon.log").read_text(errors="replace")[-3000:]
        except OSError:
            return ""

    def hook(self, tool_use_id: str) -> subprocess.CompletedProcess:
        """Run the real hook for one tool call, checking nothing (a test racing ``check``
        with it uses this from another thread: the worker is ``check``'s alone)."""
        return self._hook(tool_use_id)

    def _hook(self, tool_use_id: str) -> subprocess.CompletedProcess:
        payload = json.loads(FIXTURE.read_text().splitlines()[0])
        payload.update(session_id=f"chaos-{self.seed}", cwd=str(self.wt),
                       tool_use_id=tool_use_id)
        payload["tool_input"] = dict(payload["tool_input"], file_path=str(self.wt / "f1.txt"))
        return subprocess.run([sys.executable, "-c", _HOOK], input=json.dumps(payload).encode(),
                              env=self.environ(), capture_output=True, timeout=180)

    def request(self, op: str, **fields: object) -> dict:
        return self.call(op, socket=str(self.socket), **fields)

    def call(self, op: str, **fields: object) -> dict:
        if self.worker is None or self.worker.poll() is not None:
            self.worker = subprocess.Popen([sys.executable, "-c", _WORKER], env=self.environ(),
                                           stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           text=True)
        assert self.worker.stdin is not None and self.worker.stdout is not None
        self.worker.stdin.write(json.dumps([op, fields]) + "\n")
        self.worker.stdin.flush()
        line = self.worker.stdout.readline()
        return json.loads(line) if line else {"error": "client", "message": "worker died"}

    def _gaps(self) -> list[dict]:
        try:
            text = (self.home / "gaps.ndjson").read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def query(self, sql: str, params: tuple) -> list[list]:
        """Rows of a read-only query on the SQLite ledger (as the daemon's user)."""
        return self._ledger(sql, params)

    def _ledger(self, sql: str, params: tuple) -> list[list]:
        reply = self.call("query", db=str(self.home / "snapshotd.db"), sql=sql,
                          params=list(params))
        if "ok" not in reply:
            raise RuntimeError(f"ledger query failed: {reply}")
        return reply["ok"]

    def _git_env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(GIT_ENV, **extra)
        return env

    def _own(self, path: Path) -> None:
        if self._last is None:
            self._last = path
        if self.drop:
            os.lchown(path, NOBODY, NOBODY)

    def _violation(self, where: str, what: str) -> None:
        self.stats.violations.append(f"{where}: {what}")


def _rel(parent: str, name: str) -> str:
    return name if parent == "." else f"{parent}/{name}"


def _unlock(path: Path) -> None:
    try:
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    except OSError:
        pass  # gone with its directory: nothing left to unlock


def _rmtree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def stat_is_fifo(path: Path) -> bool:
    import stat

    try:
        return stat.S_ISFIFO(os.lstat(path).st_mode)
    except OSError:
        return False
