"""Shared fixtures: a private home and socket per test, the daemon as a real subprocess,
real git worktrees, and the real hook payload fixtures."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIXTURES_CANDIDATES = [REPO.parent / "shared" / "fixtures", REPO / "shared" / "fixtures"]


def fixtures_dir() -> Path:
    for candidate in FIXTURES_CANDIDATES:
        if candidate.is_dir():
            return candidate
    pytest.skip("shared/fixtures is not beside the repository")
    raise AssertionError


def load_payloads(relative: str) -> list[dict]:
    path = fixtures_dir() / relative
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class Env:
    """A private snapshotd world: home, socket, gap spool, config dir."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.home = root / "home"
        self.sockdir = Path(tempfile.mkdtemp(prefix="sd", dir="/tmp"))
        self.socket = self.sockdir / "s.sock"
        self.gaps = self.home / "gaps.ndjson"
        self.vars = {
            "SNAPSHOTD_HOME": str(self.home),
            "SNAPSHOTD_SOCKET": str(self.socket),
            "SNAPSHOTD_AUTOSTART": "0",
            "XDG_CONFIG_HOME": str(root / "config"),
        }

    def environ(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SNAPSHOTD_", "CLAUDE_", "GEMINI_", "GIT_"))}
        env.update(self.vars)
        env.update(extra)
        return env

    def read_gaps(self) -> list[dict]:
        if not self.gaps.exists():
            return []
        return [json.loads(line) for line in self.gaps.read_text().splitlines() if line]


# Tier-2 captures land whenever writes settle; tests that count tier-1 checkpoints exactly make
# the settle window longer than the test (the watcher's own tests set their windows).
QUIET_WATCHER = {"SNAPSHOTD_SETTLE_MS": "60000", "SNAPSHOTD_MAX_WAIT_MS": "120000"}


class Daemon:
    """``snapshotd serve`` as a real subprocess."""

    def __init__(self, env: Env, extra_env: dict[str, str] | None = None) -> None:
        self.env = env
        self.extra_env = extra_env or {}
        self.proc: subprocess.Popen | None = None
        self.log = env.root / "daemon.log"

    def start(self, timeout: float = 20.0) -> Daemon:
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "snapshotd", "serve"],
            env=self.env.environ(**self.extra_env), stdout=logf, stderr=logf,
            stdin=subprocess.DEVNULL)
        logf.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {self.log.read_text()}")
            if self.ping():
                return self
            time.sleep(0.05)
        raise RuntimeError("daemon did not answer ping: " + self.log.read_text())

    def ping(self) -> bool:
        from snapshotd_client import Client, SnapshotdError

        try:
            with Client(self.env.socket, timeout=2) as c:
                c.ping()
            return True
        except (SnapshotdError, OSError):
            return False

    def client(self, timeout: float = 30.0):
        from snapshotd_client import Client

        return Client(self.env.socket, timeout=timeout)

    def stop(self) -> int | None:
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@pytest.fixture
def sd_env(tmp_path: Path) -> Iterator[Env]:
    env = Env(tmp_path)
    yield env
    shutil.rmtree(env.sockdir, ignore_errors=True)


@pytest.fixture
def daemon(sd_env: Env) -> Iterator[Daemon]:
    d = Daemon(sd_env, extra_env=dict(QUIET_WATCHER)).start()
    yield d
    d.stop()


def run_hook(env: Env, payload: dict | str, timeout: float = 30.0,
             **extra_env: str) -> subprocess.CompletedProcess:
    """Run the real ``snapshot-hook`` entry point with a payload on stdin."""
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return subprocess.run(
        [sys.executable, "-c", "from snapshotd_client.hook import main; main()"],
        input=data.encode(), env=env.environ(**extra_env), capture_output=True,
        timeout=timeout)


def git(cwd: Path, *args: str, env: dict | None = None) -> str:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    full_env.update({"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                     "GIT_COMMITTER_EMAIL": "t@t"})
    full_env.update(env or {})
    out = subprocess.run(["git", *args], cwd=cwd, env=full_env, capture_output=True, check=True)
    return out.stdout.decode()


def make_git_worktree(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    return path


def claude_payload(worktree: Path, tool_use_id: str, *, file_path: str = "hello.txt",
                   session_id: str = "sess-1", event: str = "PostToolUse") -> dict:
    """A real Claude Code PostToolUse payload (from the fixtures) pointed at ``worktree``."""
    base = dict(load_payloads("claude-code/post-tool-use.ndjson")[0])
    base.update(session_id=session_id, cwd=str(worktree), tool_use_id=tool_use_id,
                hook_event_name=event)
    base["tool_input"] = dict(base["tool_input"], file_path=str(worktree / file_path))
    return base
