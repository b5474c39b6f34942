"""Helpers shared by test files (fixtures live in ``conftest.py``): the one ``wait_for``, git,
finding and stopping ``snapshotd serve`` processes by home, raw protocol frames, and the random
file-system workload the fast-path tests replay.

Promises: ``wait_for`` raises ``AssertionError`` naming what it waited for when the time is up;
``stop_processes`` never returns while a process it was given is still running (SIGTERM, then
SIGKILL after a bound, reaping our own children); ``daemons_under(root)`` finds every live
``snapshotd serve`` whose home lies under ``root``, whoever started it."""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from random import Random
from typing import TypeVar

import msgpack
import psutil
import pytest

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 20.0, what: str = "condition",
             every: float = 0.02) -> T:
    """The first truthy value of ``predicate()``, polled every ``every`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)



def wait_windows_recovered(home: Path, timeout: float = 30.0) -> None:
    """After a restart, wait until the settle windows a crash left open (their markers in
    ``<home>/watch``) have been captured. That capture runs on the new daemon's pool, so a write
    a test makes before it ends would be that capture's checkpoint, not the next tool call's."""
    wait_for(lambda: not open_markers(home), timeout=timeout,
             what="the windows a crash left open to be captured")


def open_markers(home: Path) -> list[dict]:
    """The records of the settle windows the watcher marks open in ``<home>/watch`` (a marker
    stays in place once its window closes, rewritten as closed; a half-written one is read as
    open, as start-up would)."""
    records = []
    for path in sorted((home / "watch").glob("*.json")):
        try:
            record = json.loads(path.read_text())
        except FileNotFoundError:
            continue
        except ValueError:
            record = {"unreadable": str(path)}
        if record.get("open", True):
            records.append(record)
    return records

# The variables that point git at the session's own configuration (conftest's ``_isolate_git``):
# they survive the ``GIT_*`` cleanup of ``git``, so the oracle never reads the machine's.
GIT_SESSION_CONFIG = ("GIT_CONFIG_GLOBAL", "GIT_CONFIG_NOSYSTEM")


def git(cwd: Path, *args: str, env: dict | None = None) -> str:
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith("GIT_") or k in GIT_SESSION_CONFIG}
    full_env.update({"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                     "GIT_COMMITTER_EMAIL": "t@t"})
    full_env.update(env or {})
    out = subprocess.run(["git", *args], cwd=cwd, env=full_env, capture_output=True, check=True)
    return out.stdout.decode()


# -- daemon processes ---------------------------------------------------------------------------


def daemons_under(root: Path) -> list[psutil.Process]:
    """Live (not zombie) ``snapshotd serve`` processes whose home is ``root`` or below it.

    The home is the ``--home`` argument, else ``SNAPSHOTD_HOME`` in the process's environment;
    a process that names neither is not ours to judge."""
    root = Path(os.path.realpath(root))
    found = []
    for pid in _serve_pids():
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            home = _home_of(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        if home is not None and Path(os.path.realpath(home)).is_relative_to(root):
            found.append(proc)
    return found


def daemon_of_home(home: Path) -> psutil.Process | None:
    """The live ``snapshotd serve`` that wrote its pid into ``<home>/daemon.lock``, if any
    (the pid is checked against the process's home: a stale file names nobody)."""
    try:
        pid = int((home / "daemon.lock").read_text().split()[0])
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or not _is_serve(proc.cmdline()):
            return None
        found = _home_of(proc)
    except (OSError, ValueError, IndexError, psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    if found is None or os.path.realpath(found) != os.path.realpath(home):
        return None
    return proc


def stop_processes(procs: Iterable[psutil.Process], term_timeout: float = 10.0) -> None:
    """SIGTERM each, SIGKILL whatever is left after ``term_timeout``; psutil's wait reaps the
    ones that are our children (the others are reaped by their own parent or by init)."""
    procs = list(procs)
    for proc in procs:
        try:
            proc.terminate()
        except psutil.NoSuchProcess:
            pass
    _gone, alive = psutil.wait_procs(procs, timeout=term_timeout)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=10)


def stop_daemons_under(root: Path, settle_s: float = 0.0) -> list[int]:
    """Stop every daemon with a home under ``root``, including one a hook is starting right
    now: keep looking until none has been seen for ``settle_s``. The pids stopped."""
    stopped: list[int] = []
    quiet_since = time.monotonic()
    give_up = quiet_since + 60
    while time.monotonic() < give_up:
        procs = daemons_under(root)
        if procs:
            stopped.extend(p.pid for p in procs)
            stop_processes(procs)
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since >= settle_s:
            break
        else:
            time.sleep(0.05)
    return stopped


def _serve_pids() -> list[int]:
    # /proc's cmdline first (cheap), psutil only for the few that look like a daemon.
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                argv = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if _is_serve(argv):
            pids.append(int(name))
    return pids


def _is_serve(argv: list[str]) -> bool:
    return "serve" in argv and any(a == "snapshotd" or a.endswith("/snapshotd") for a in argv)


def _home_of(proc: psutil.Process) -> str | None:
    argv = proc.cmdline()
    for i, arg in enumerate(argv):
        if arg == "--home" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--home="):
            return arg.split("=", 1)[1]
    return proc.environ().get("SNAPSHOTD_HOME")


# -- raw protocol frames ------------------------------------------------------------------------


def connect_raw(socket_path: Path) -> socket.socket:
    """A plain connection to the daemon's socket (10 s timeouts), for tests that speak frames
    themselves; retried for up to 10 s while the accept backlog is full."""
    deadline = time.monotonic() + 10
    while True:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        try:
            s.connect(str(socket_path))
            return s
        except BlockingIOError:
            # A full accept backlog answers EAGAIN on Unix sockets: wait like a client would.
            s.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def send_frame(s: socket.socket, obj: object) -> None:
    body = msgpack.packb(obj, use_bin_type=True)
    s.sendall(struct.pack(">I", len(body)) + body)


def recv_frame(s: socket.socket) -> dict | None:
    """One reply frame, or None when the daemon closed the connection first."""
    header = b""
    while len(header) < 4:
        chunk = s.recv(4 - len(header))
        if not chunk:
            return None
        header += chunk
    (n,) = struct.unpack(">I", header)
    body = b""
    while len(body) < n:
        chunk = s.recv(n - len(body))
        if not chunk:
            return None
        body += chunk
    return msgpack.unpackb(body, raw=False)


# -- a random file-system workload --------------------------------------------------------------


class Workload:
    """Random file-system operations; each returns the paths an inotify watcher reports."""

    def __init__(self, root: Path, rng: Random) -> None:
        self.root = root
        self.rng = rng

    def files(self) -> list[str]:
        out = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            if ".git" in dirnames:
                dirnames.remove(".git")
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                out.append(os.path.relpath(os.path.join(dirpath, name), self.root))
        return sorted(out)

    def dirs(self) -> list[str]:
        out = []
        for dirpath, dirnames, _ in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if d != ".git"
                           and not os.path.islink(os.path.join(dirpath, d))]
            out.extend(os.path.relpath(os.path.join(dirpath, d), self.root) for d in dirnames)
        return sorted(out)

    def step(self) -> set[str]:
        r = self.rng
        op = r.choice(["create", "create", "modify", "modify", "delete", "rename", "chmod",
                       "symlink", "nested", "rmdir", "ignored", "burst"])
        files = [f for f in self.files() if not f.startswith("ignored_dir")]
        if op == "create" or not files:
            base = r.choice(["", *self.dirs()])
            rel = os.path.join(base, f"f{r.randrange(10**6)}.txt")
            (self.root / rel).write_text(f"{r.random()}\n")
            return {rel}
        if op == "modify":
            rel = r.choice(files)
            if os.path.islink(self.root / rel):
                return set()
            (self.root / rel).write_text(f"changed {r.random()}\n")
            return {rel}
        if op == "delete":
            rel = r.choice(files)
            os.unlink(self.root / rel)
            return {rel}
        if op == "rename":
            rel = r.choice(files)
            dest = os.path.join(r.choice(["", *self.dirs()]), f"r{r.randrange(10**6)}")
            os.rename(self.root / rel, self.root / dest)
            return {rel, dest}
        if op == "chmod":
            rel = r.choice(files)
            if os.path.islink(self.root / rel):
                return set()
            os.chmod(self.root / rel, r.choice([0o644, 0o755]))
            return {rel}
        if op == "symlink":
            rel = f"l{r.randrange(10**6)}"
            os.symlink(r.choice(files), self.root / rel)
            return {rel}
        if op == "nested":
            top = f"n{r.randrange(10**6)}"
            deep = self.root / top / "a" / "b"
            deep.mkdir(parents=True)
            for i in range(r.randrange(1, 6)):
                (deep / f"x{i}").write_text(str(i))
            return {top}  # inotify reports the new top directory; its files may be missed
        if op == "rmdir":
            dirs = [d for d in self.dirs() if d.startswith("n") and "/" not in d]
            if not dirs:
                return set()
            d = r.choice(dirs)
            shutil.rmtree(self.root / d)
            return {d}
        if op == "ignored":
            (self.root / "ignored_dir").mkdir(exist_ok=True)
            (self.root / "ignored_dir" / "junk").write_text(str(r.random()))
            (self.root / "x.log").write_text("log")
            return {"ignored_dir/junk", "x.log"}
        out: set[str] = set()
        for _ in range(r.randrange(5, 30)):
            rel = f"burst{r.randrange(50)}.txt"
            (self.root / rel).write_text(str(r.random()))
            out.add(rel)
        return out


def full_tree(root: Path, scratch_index: Path) -> str:
    """The oracle: ``git add -A && git write-tree`` into a fresh private index."""
    scratch_index.unlink(missing_ok=True)
    env = {"GIT_INDEX_FILE": str(scratch_index)}
    git(root, "add", "-A", env=env)
    return git(root, "write-tree", env=env).strip()


# A stand-in for ``snapshot-hook`` that appends each payload it is given to ``$RECORD_TO``.
PLUGIN_RECORDER = """#!/bin/sh
cat >> "$RECORD_TO"
printf '\\n' >> "$RECORD_TO"
"""


def run_plugin(tmp_path: Path, plugin: Path, driver: str, *extra: str) -> list[dict]:
    """Run a JavaScript agent plugin (OpenCode, Amp) under node with ``driver`` (an ES module
    given the plugin's path and ``extra`` as arguments), the hook replaced by a recorder; the
    payloads the plugin sent, in order."""
    node = shutil.which("node")
    assert node is not None, "run_plugin needs node"
    recorder = tmp_path / "record.sh"
    recorder.write_text(PLUGIN_RECORDER)
    recorder.chmod(0o755)
    (tmp_path / "driver.mjs").write_text(driver)
    record = tmp_path / "recorded.ndjson"
    env = dict(os.environ, SNAPSHOT_HOOK=str(recorder), RECORD_TO=str(record))
    subprocess.run([node, str(tmp_path / "driver.mjs"), str(plugin), *extra], env=env,
                   check=True, timeout=60, capture_output=True)
    return [json.loads(line) for line in record.read_text().splitlines() if line.strip()]


class DriftRecorder:
    """A change source (``service.ChangeSource``) that records the drift a verification
    reports; it vouches for ``vouch`` as the changed paths (None: for nothing, so captures scan
    fully)."""

    def __init__(self, vouch: set[str] | None = None) -> None:
        self.vouch = vouch
        self.drifted: set[str] = set()

    def take(self, root: Path, mode: str) -> set[str] | None:
        return None if self.vouch is None else set(self.vouch)

    def failed(self, root: Path) -> None:
        pass

    def drift(self, root: Path, found: set[str], reported: set[str]) -> None:
        self.drifted |= found

    def scanned(self, root: Path, seconds: float) -> None:
        pass

    def late(self, root: Path) -> set[str] | None:
        return None  # watches nothing: a capture is read once


def release_fifo(target: Path) -> None:
    """Let whoever waits on the FIFO go (a reader gets end of file), so a failing test ends."""
    for _ in range(50):
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            return  # nobody is waiting on it


def in_time(call, target: Path, seconds: float = 30.0):
    """``call()``'s result, or a failure naming the FIFO when it has not returned in time."""
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(_result(call)), daemon=True)
    worker.start()
    worker.join(timeout=seconds)
    if not outcome:
        release_fifo(target)
        pytest.fail(f"stalled on a FIFO at {target}")
    [result] = outcome
    if isinstance(result, BaseException):
        raise result
    return result


def _result(call):
    try:
        return call()
    except BaseException as exc:  # handed to the test's thread
        return exc


# -- a throwaway copy of the suite's infrastructure ---------------------------------------------


def throwaway_suite(root: Path) -> Path:
    """``root/tests``: a package holding this suite's ``conftest.py`` and the support modules it
    imports, for a test that runs pytest on test files of its own. Run pytest with the returned
    directory as its working directory: node ids are then bare file names."""
    tests = Path(__file__).resolve().parents[1]
    suite = root / "tests"
    (suite / "support").mkdir(parents=True)
    for package in (suite, suite / "support"):
        (package / "__init__.py").write_text("")
    shutil.copy(tests / "conftest.py", suite / "conftest.py")
    for name in ("conftest_pg.py", "helpers.py", "slow_first.py"):
        shutil.copy(tests / "support" / name, suite / "support" / name)
    return suite
