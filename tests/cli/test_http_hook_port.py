"""``snapshotd http-hook`` names the port the running daemon really listens on, and refuses to
print settings (no token sent anywhere) when no daemon owns the endpoint: not running, the
endpoint off, or its port taken by another listener when the daemon started (``status`` then
says why, and the daemon's log does)."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from tests.conftest import QUIET_WATCHER, Env, claude_payload, make_git_worktree

pytestmark = pytest.mark.one_ledger("the HTTP endpoint's port, not the ledger")

HTTP_ENV = {**QUIET_WATCHER, "SNAPSHOTD_HTTP_HOOK": "1", "SNAPSHOTD_HTTP_HOOK_PORT": "0"}


def _cli(env: Env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=60)


SQUAT = ("import socket, sys\n"
         "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(8)\n"
         "print(s.getsockname()[1], flush=True)\n"
         "sys.stdin.read()\n")


@pytest.fixture
def squatter() -> Iterator[int]:
    """Another user's listener on a loopback port (``runuser -u nobody`` when this runs as
    root, else this user's own process), there before the daemon starts; its port."""
    # The system's python3 for nobody: this checkout's venv may be out of its reach.
    system_python = "/usr/bin/python3"
    foreign = os.geteuid() == 0 and bool(shutil.which("runuser")) and \
        os.access(system_python, os.X_OK)
    prefix = ["runuser", "-u", "nobody", "--"] if foreign else []
    python = system_python if foreign else sys.executable
    proc = subprocess.Popen([*prefix, python, "-c", SQUAT], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        yield int(proc.stdout.readline())
    finally:
        proc.kill()
        proc.wait()


def test_port_zero_prints_the_port_the_daemon_listens_on(sd_env: Env, make_daemon,
                                                        tmp_path) -> None:
    daemon = make_daemon(sd_env, HTTP_ENV)
    with daemon.client() as c:
        status_url = c.status()["http_hook"]["url"]
    out = _cli(sd_env, "http-hook")
    assert out.returncode == 0, out.stderr
    entry = json.loads(out.stdout)["hooks"]["PostToolUse"][0]["hooks"][0]
    url = urlsplit(entry["url"])
    assert entry["url"] == status_url and url.port != 47681
    # The printed settings work: a POST with them is captured.
    worktree = make_git_worktree(tmp_path / "wt")
    (worktree / "hello.txt").write_text("hi\n")
    conn = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    conn.request("POST", url.path, body=json.dumps(claude_payload(worktree, "toolu_port")),
                 headers={"Authorization": entry["headers"]["Authorization"],
                          "Host": f"127.0.0.1:{url.port}"})
    reply = conn.getresponse()
    assert reply.status == 200
    conn.close()
    rows = sd_env.ledger_query("SELECT seq FROM checkpoints WHERE tool_use_id = ?",
                               ("toolu_port",))
    assert len(rows) == 1


def test_a_taken_port_refuses_and_status_says_why(sd_env: Env, make_daemon,
                                                  squatter: int) -> None:
    port = squatter
    daemon = make_daemon(sd_env, {**HTTP_ENV, "SNAPSHOTD_HTTP_HOOK_PORT": str(port)})
    out = _cli(sd_env, "http-hook")
    assert out.returncode != 0
    assert out.stdout == "" and "Bearer" not in out.stderr
    assert str(port) in out.stderr and "in use" in out.stderr
    with daemon.client() as c:
        info = c.status()["http_hook"]
    assert info["enabled"] is False and info["reason"] == "port-in-use"
    assert info["port"] == port
    text = _cli(sd_env, "status")
    assert text.returncode == 0
    line = [x for x in text.stdout.splitlines() if x.startswith("http hook")]
    assert line and "OFF" in line[0] and str(port) in line[0], text.stdout
    assert f"port {port}" in daemon.log.read_text()


def test_no_daemon_or_endpoint_off_refuses(sd_env: Env, make_daemon) -> None:
    out = _cli(sd_env, "http-hook")
    assert out.returncode == 3 and out.stdout == ""
    assert "no daemon" in out.stderr
    make_daemon(sd_env, QUIET_WATCHER)  # the endpoint is not configured
    out = _cli(sd_env, "http-hook")
    assert out.returncode != 0 and out.stdout == ""
    assert "http_hook = true" in out.stderr
    # The token alone needs no daemon.
    token = _cli(sd_env, "http-hook", "--token")
    assert token.returncode == 0 and len(token.stdout.strip()) >= 32
