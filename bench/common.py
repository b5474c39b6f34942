"""Shared bench helpers: generated trees, a daemon subprocess, the git-CLI peer, medians."""

from __future__ import annotations

import atexit
import http.client
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from snapshotd_client import Client


def make_tree(root: Path, files: int, *, git_init: bool = True, per_dir: int = 100) -> Path:
    """``files`` small text files in directories of ``per_dir`` (``tree_file``'s layout),
    optionally a committed repository packed like a clone: the commit is written by
    ``git fast-import`` (one pack, no loose objects, nothing for ``git gc`` to prune) from the
    same bytes as the files, and the index is built by ``read-tree`` and a stat refresh."""
    root.mkdir(parents=True, exist_ok=True)
    importer = _Importer(root) if git_init else None
    for i in range(files):
        path = tree_file(root, i, per_dir)
        if i % 10 == 0:
            path.parent.mkdir(parents=True, exist_ok=True)
        body = f"file {i}\n{'x' * (i % 200)}\n".encode()
        path.write_bytes(body)
        if importer is not None:
            rel = path.relative_to(root).as_posix()
            importer.write(b"M 100644 inline %s\ndata %d\n%s\n" % (rel.encode(), len(body), body))
    if importer is not None:
        importer.write(b"done\n")
        importer.close()
        env = git_env()
        subprocess.run(["git", "read-tree", "HEAD"], cwd=root, check=True, env=env)
        # read-tree leaves no stat data: the refresh hashes each file once and records it, so
        # the repository's index is as fresh as a clone's checkout leaves it.
        subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=root, check=True,
                       env=env)
    return root


def tree_file(root: Path, i: int, per_dir: int = 100) -> Path:
    """File ``i`` of a ``make_tree`` tree: ``d{i // per_dir}/s{(i // 10) % 10}/f{i}.txt``."""
    return root / f"d{i // per_dir:04d}" / f"s{(i // 10) % 10}" / f"f{i}.txt"


class _Importer:
    """A ``git fast-import`` process fed one commit on the repository's ``main``."""

    def __init__(self, root: Path) -> None:
        env = git_env()
        subprocess.run(["git", "init", "-q", "--initial-branch=main"], cwd=root, check=True,
                       env=env)
        self.proc = subprocess.Popen(["git", "fast-import", "--quiet", "--done"], cwd=root,
                                     env=env, stdin=subprocess.PIPE)
        assert self.proc.stdin is not None
        self.stdin = self.proc.stdin
        self.write(b"commit refs/heads/main\ncommitter b <b@b> 0 +0000\ndata 4\ninit\n")

    def write(self, data: bytes) -> None:
        self.stdin.write(data)

    def close(self) -> None:
        self.stdin.close()
        if self.proc.wait() != 0:
            raise RuntimeError(f"git fast-import exited {self.proc.returncode}")


def git_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b", GIT_COMMITTER_NAME="b",
               GIT_COMMITTER_EMAIL="b@b")
    env.update(extra)
    return env


class GitPeer:
    """The Cline/Roo Code shadow-index approach: git add -A, write-tree, commit-tree,
    update-ref, with a private index and a separate git dir."""

    def __init__(self, worktree: Path, gitdir: Path) -> None:
        self.worktree = worktree
        self.gitdir = gitdir
        self.index = gitdir / "peer-index"
        subprocess.run(["git", "init", "-q", "--bare", str(gitdir)], check=True, env=git_env())
        self.parent: str | None = None

    def _git(self, *args: str, stdin: bytes | None = None) -> str:
        env = git_env(GIT_DIR=str(self.gitdir), GIT_WORK_TREE=str(self.worktree),
                      GIT_INDEX_FILE=str(self.index))
        out = subprocess.run(["git", *args], cwd=self.worktree, env=env, input=stdin,
                             capture_output=True, check=True)
        return out.stdout.decode().strip()

    def capture(self) -> float:
        started = time.perf_counter()
        self._git("add", "-A", ".")
        tree = self._git("write-tree")
        args = ["commit-tree", tree, "-m", "checkpoint"]
        if self.parent:
            args += ["-p", self.parent]
        commit = self._git(*args)
        self._git("update-ref", "refs/heads/shadow", commit)
        self.parent = commit
        return (time.perf_counter() - started) * 1000


class DaemonProc:
    """A snapshotd daemon in a private home and socket; ``python`` and ``cwd`` run another
    install of it (``bench.compare``: an older commit's worktree and its virtualenv).

    The daemon gets a session of its own (``own_session``), as the hook's autostart and the
    systemd and launchd user services start it. That matters for CPU: with Linux's autogroup
    scheduling (``kernel.sched_autogroup_enabled``) a session is one scheduling group, so hooks
    started from the bench's session share one group's CPU against the daemon's instead of
    each taking a share as large as the daemon's. ``own_session=False`` leaves it in the
    bench's session: a daemon run by hand (``snapshotd serve``) in the agents' own terminal."""

    def __init__(self, extra_env: dict[str, str] | None = None, *,
                 python: str = sys.executable, cwd: Path | None = None,
                 own_session: bool = True, parent: str = "/tmp") -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="sdb", dir=parent))
        self.home = self.dir / "home"
        self.socket = self.dir / "s.sock"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SNAPSHOTD_")}
        self.env.update(SNAPSHOTD_HOME=str(self.home), SNAPSHOTD_SOCKET=str(self.socket),
                        SNAPSHOTD_AUTOSTART="0", XDG_CONFIG_HOME=str(self.dir / "config"))
        self.env.update(extra_env or {})
        # Its log, for a bench to quote what went wrong (``error_lines``) before ``stop``.
        self.log = self.dir / "daemon.log"
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([python, "-m", "snapshotd", "serve"], env=self.env,
                                         cwd=cwd, stdout=subprocess.DEVNULL, stderr=log,
                                         start_new_session=own_session)
        # In a session of its own it no longer gets the terminal's Ctrl-C: a bench that ends on
        # an exception or an interrupt stops it on the way out.
        atexit.register(self.stop)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                with Client(self.socket, timeout=2) as c:
                    c.ping()
                return
            except (OSError, Exception):
                time.sleep(0.05)
        raise RuntimeError("daemon did not start")

    def client(self) -> Client:
        return Client(self.socket, timeout=600)

    def error_lines(self, limit: int = 10) -> list[str]:
        """The first lines of its log at ERROR or CRITICAL, and of any traceback, shortened."""
        try:
            lines = self.log.read_text(errors="replace").splitlines()
        except OSError as exc:
            return [f"log unreadable: {exc}"]
        picked = [line for line in lines
                  if " ERROR " in line or " CRITICAL " in line or "Error:" in line]
        return [line[:300] for line in picked[:limit]]

    def stop(self, remove: bool = True) -> None:
        """Stop the daemon; remove its directory unless ``remove`` is False (the caller
        removes it later)."""
        atexit.unregister(self.stop)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if remove:
            shutil.rmtree(self.dir, ignore_errors=True)


@contextmanager
def bench_daemon(prefix: str, where: str = "/tmp",
                 extra_env: dict[str, str] | None = None, *, daemon_where: str = "/tmp"
                 ) -> Iterator[tuple[Path, DaemonProc]]:
    """A new scratch directory under ``where`` and a daemon with a home of its own under
    ``daemon_where``; the daemon is stopped and the directory removed on exit, also when the
    bench fails."""
    base = Path(tempfile.mkdtemp(prefix=prefix, dir=where))
    daemon = DaemonProc(extra_env=extra_env, parent=daemon_where)
    try:
        yield base, daemon
    finally:
        daemon.stop()
        shutil.rmtree(base, ignore_errors=True)


def write_payload(session: str, cwd: Path, path: Path, tool_use_id: str) -> bytes:
    """The JSON body Claude Code's after-tool hook gets for a ``Write`` of ``path`` in ``cwd``
    (what ``snapshot-hook`` reads on stdin and the HTTP endpoint takes as a POST)."""
    return json.dumps({"session_id": session, "cwd": str(cwd), "hook_event_name": "PostToolUse",
                       "tool_name": "Write", "tool_input": {"file_path": str(path)},
                       "tool_use_id": tool_use_id}).encode()


def http_poster(daemon: DaemonProc, path: str = "/hook", **headers: str
                ) -> Callable[[bytes], int]:
    """A POST of one hook payload to the daemon's HTTP hook endpoint (it must run with
    ``SNAPSHOTD_HTTP_HOOK=1``) at ``path``, as an agent's http hook makes it: a new connection
    each time, the token, and ``headers``. Returns the status."""
    with daemon.client() as c:
        url = c.status()["http_hook"]["url"]
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    token = (daemon.home / "http-hook.token").read_text().strip()
    sent = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
            "Host": f"127.0.0.1:{port}", **headers}

    def post(body: bytes) -> int:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            conn.request("POST", path, body=body, headers=sent)
            reply = conn.getresponse()
            reply.read()
            return reply.status
        finally:
            conn.close()

    return post


def file_create_ms(directory: Path, files: int = 200) -> float:
    """The median cost of creating (and closing) one empty file in ``directory``, each in a
    scratch directory of its own, removed after. Every checkpoint creates files in the store
    (objects, the ref's lock file, the cookie); on some filesystems that cost moves by 30x
    for tens of seconds after thousands of files were created and deleted (ext4 on this
    development machine: 0.01 ms quiet, 0.3-0.9 ms after a bench tree was made or removed), so
    the benches print it beside the figures it moves."""
    scratch = Path(tempfile.mkdtemp(prefix="fscost", dir=directory))
    costs = []
    try:
        for i in range(files):
            started = time.perf_counter()
            os.close(os.open(scratch / f"f{i}", os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o600))
            costs.append((time.perf_counter() - started) * 1000)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return round(statistics.median(costs), 4)


def cpu_speed_ms(rounds: int = 5) -> float:
    """The median CPU time of a fixed piece of interpreter work (sorting and hashing 20,000
    short strings), in this process. This VM's cores change speed by half for minutes at a
    time (the same code's daemon CPU a hook went from 3.2 to 4.7 ms between two runs), so the
    benches print it beside the figures it moves: compare runs of similar speed only."""
    words = [f"w{i * 7919 % 20000:05d}" for i in range(20000)]
    costs = []
    for _ in range(rounds):
        started = time.thread_time()
        hash(tuple(sorted(words)))
        for word in words:
            hash(word + "x")
        costs.append((time.thread_time() - started) * 1000)
    return round(statistics.median(costs), 2)


def parse_side(spec: str) -> tuple[str, str, Path | None]:
    """A bench's ``--side``: ``NAME`` (this interpreter and checkout) or ``NAME:PYTHON:CWD``
    (another install's interpreter, run from its checkout)."""
    name, _, rest = spec.partition(":")
    if not rest:
        return name, sys.executable, None
    python, _, cwd = rest.partition(":")
    return name, python, Path(cwd) if cwd else None


def median(values: list[float]) -> float:
    return round(statistics.median(values), 3) if values else float("nan")
