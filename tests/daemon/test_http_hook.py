"""The loopback HTTP hook endpoint (snapshotd.daemon.http_hook), driven with real Claude Code payloads
against a real daemon: accepted with the token, refused without it, with a wrong one or with a
foreign Host header, a failed capture still answered 2xx with its gap, a slow capture answered
within the hook budget, and a stopped daemon refusing the connection at once."""

from __future__ import annotations

import http.client
import json
import os
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import psutil
import pytest

from tests.conftest import QUIET_WATCHER, Env, claude_payload, load_payloads, make_git_worktree
from tests.support.helpers import wait_for

pytestmark = pytest.mark.one_ledger("the HTTP front end's guards")

HTTP_ENV = {**QUIET_WATCHER, "SNAPSHOTD_HTTP_HOOK": "1", "SNAPSHOTD_HTTP_HOOK_PORT": "0"}


def _endpoint(daemon) -> tuple[str, int]:
    with daemon.client() as c:
        url = c.status()["http_hook"]["url"]
    parts = urlsplit(url)
    assert parts.hostname == "127.0.0.1" and parts.path == "/hook"
    return parts.hostname, int(parts.port)


def _token(env: Env) -> str:
    path = env.home / "http-hook.token"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    return path.read_text().strip()


def _post(addr: tuple[str, int], body: bytes, headers: dict[str, str],
          timeout: float = 30.0) -> tuple[int, bytes, float]:
    started = time.monotonic()
    conn = http.client.HTTPConnection(*addr, timeout=timeout)
    try:
        conn.request("POST", "/hook", body=body,
                     headers={"Content-Type": "application/json", **headers})
        reply = conn.getresponse()
        return reply.status, reply.read(), time.monotonic() - started
    finally:
        conn.close()


def _auth(env: Env, addr: tuple[str, int]) -> dict[str, str]:
    return {"Authorization": f"Bearer {_token(env)}", "Host": f"127.0.0.1:{addr[1]}"}


def _checkpoints(env: Env, tool_use_id: str) -> list[dict]:
    return env.ledger_query("SELECT seq, source FROM checkpoints WHERE tool_use_id = ?",
                            (tool_use_id,))


def _real_payloads(worktree: Path) -> list[dict]:
    payloads = (load_payloads("claude-code/post-tool-use.ndjson")
                + load_payloads("claude-code/post-tool-use-failure.ndjson"))
    out = []
    for i, payload in enumerate(payloads):
        payload = dict(payload, cwd=str(worktree), tool_use_id=f"toolu_http_{i}")
        out.append(payload)
    return out


def test_real_payloads_accepted_with_the_token(sd_env: Env, make_daemon, tmp_path: Path) -> None:
    daemon = make_daemon(sd_env, HTTP_ENV)
    addr = _endpoint(daemon)
    worktree = make_git_worktree(tmp_path / "wt")
    for i, payload in enumerate(_real_payloads(worktree)):
        (worktree / f"f{i}.txt").write_text(f"change {i}\n")
        status, body, _ = _post(addr, json.dumps(payload).encode(), _auth(sd_env, addr))
        assert (status, body) == (200, b"")
        rows = _checkpoints(sd_env, payload["tool_use_id"])
        assert [r["source"] for r in rows] == ["hook"], payload["hook_event_name"]
    assert sd_env.read_gaps() == []
    with daemon.client() as c:
        counts = c.status()["http_hook"]
    assert counts["accepted"] == len(_real_payloads(worktree)) and counts["gaps"] == 0


@pytest.mark.parametrize("case", ["no-token", "wrong-token", "basic", "foreign-host",
                                  "no-host"])
def test_refused_without_credentials_or_with_a_foreign_host(sd_env: Env, make_daemon,
                                                           tmp_path: Path, case: str) -> None:
    daemon = make_daemon(sd_env, HTTP_ENV)
    addr = _endpoint(daemon)
    worktree = make_git_worktree(tmp_path / "wt")
    (worktree / "a.txt").write_text("a\n")
    payload = claude_payload(worktree, "toolu_refused")
    token = _token(sd_env)
    headers = {
        "no-token": {"Host": f"127.0.0.1:{addr[1]}"},
        "wrong-token": {"Host": f"127.0.0.1:{addr[1]}", "Authorization": "Bearer " + "x" * 43},
        "basic": {"Host": f"127.0.0.1:{addr[1]}", "Authorization": f"Basic {token}"},
        "foreign-host": {"Host": f"evil.example:{addr[1]}", "Authorization": f"Bearer {token}"},
        "no-host": {"Host": "", "Authorization": f"Bearer {token}"},
    }[case]
    status, _, _ = _post(addr, json.dumps(payload).encode(), headers)
    assert status == (403 if "host" in case else 401)
    assert _checkpoints(sd_env, "toolu_refused") == []
    assert sd_env.read_gaps() == []  # a stranger cannot fill the spool
    # The same request with the right credentials goes through.
    status, _, _ = _post(addr, json.dumps(payload).encode(), _auth(sd_env, addr))
    assert status == 200 and len(_checkpoints(sd_env, "toolu_refused")) == 1


def test_failed_captures_answer_2xx_with_one_gap(sd_env: Env, make_daemon,
                                                 tmp_path: Path) -> None:
    daemon = make_daemon(sd_env, HTTP_ENV)
    addr = _endpoint(daemon)
    status, body, _ = _post(addr, b"{not json", _auth(sd_env, addr))
    assert (status, body) == (200, b"")
    gaps = sd_env.read_gaps()
    assert [g["reason"] for g in gaps] == ["bad-payload"]
    assert gaps[0]["source"] == "hook" and gaps[0]["tier"] == 1
    # A worktree that does not exist: the daemon's own gap, and only that one.
    missing = claude_payload(tmp_path / "gone", "toolu_missing")
    status, body, _ = _post(addr, json.dumps(missing).encode(), _auth(sd_env, addr))
    assert (status, body) == (200, b"")
    gaps = wait_for(lambda: [g for g in sd_env.read_gaps()
                             if g.get("tool_use_id") == "toolu_missing"] or None,
                    what="the missing worktree's gap")
    assert len(gaps) == 1
    time.sleep(0.3)
    assert len([g for g in sd_env.read_gaps() if g.get("tool_use_id") == "toolu_missing"]) == 1


def test_a_slow_capture_is_answered_within_the_budget(sd_env: Env, make_daemon,
                                                      tmp_path: Path) -> None:
    daemon = make_daemon(sd_env, {**HTTP_ENV, "SNAPSHOTD_HOOK_TIMEOUT_MS": "400",
                                  "SNAPSHOTD_DELAY_AT": "before-row:3000"})
    addr = _endpoint(daemon)
    worktree = make_git_worktree(tmp_path / "wt")
    (worktree / "slow.txt").write_text("slow\n")
    payload = claude_payload(worktree, "toolu_slow")
    status, body, _ = _post(addr, json.dumps(payload).encode(), _auth(sd_env, addr))
    assert (status, body) == (200, b"")
    # Answered at the budget, not after the 3 s capture: ``late`` counts the replies its timer
    # sent while the capture still ran (checked below), no stopwatch needed.
    # The capture was not abandoned: it lands, and no gap was written for it.
    wait_for(lambda: _checkpoints(sd_env, "toolu_slow"), what="the late checkpoint")
    assert sd_env.read_gaps() == []
    with daemon.client() as c:
        assert c.status()["http_hook"]["late"] == 1


def test_a_stopped_daemon_refuses_the_connection_at_once(sd_env: Env, make_daemon) -> None:
    daemon = make_daemon(sd_env, HTTP_ENV)
    addr = _endpoint(daemon)
    assert daemon.stop() == 0
    with pytest.raises(ConnectionRefusedError):  # refused, not left to time out
        socket.create_connection(addr, timeout=5).close()


def test_the_endpoint_is_off_by_default_and_loopback_only(sd_env: Env, make_daemon) -> None:
    daemon = make_daemon(sd_env, QUIET_WATCHER)
    with daemon.client() as c:
        assert "http_hook" not in c.status()
    assert not (sd_env.home / "http-hook.token").exists()
    daemon.stop()
    on = make_daemon(sd_env, HTTP_ENV)
    host, port = _endpoint(on)
    bound = [c for c in psutil.Process(on.proc.pid).net_connections("tcp")
             if c.status == "LISTEN"]
    assert [(c.laddr.ip, c.laddr.port) for c in bound] == [("127.0.0.1", port)]


def test_an_unsafe_token_file_keeps_the_endpoint_off(sd_env: Env, make_daemon) -> None:
    """A token file another user owns (who could have read or chosen it) is never trusted. (A
    mode that is too open is repaired at start-up with the rest of the home: docs/secrets.md.)"""
    if os.getuid() != 0:
        pytest.skip("giving the token file to another user needs root")
    sd_env.home.mkdir(parents=True, exist_ok=True)
    token = sd_env.home / "http-hook.token"
    token.write_text("y" * 43 + "\n")
    os.chmod(token, 0o600)
    os.chown(token, 65534, 65534)
    daemon = make_daemon(sd_env, HTTP_ENV)
    with daemon.client() as c:
        block = c.status()["http_hook"]
    assert block["enabled"] is False and "0600" in block["error"]


def test_the_cli_prints_the_settings_with_the_token(sd_env: Env, make_daemon) -> None:
    """The entry names the running daemon's endpoint (tests/cli/test_http_hook_port.py covers
    the refusals: no daemon, the endpoint off, its port taken)."""
    env = sd_env
    daemon = make_daemon(env, HTTP_ENV)
    addr = _endpoint(daemon)
    run = subprocess.run([sys.executable, "-m", "snapshotd", "http-hook"], env=env.environ(),
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    settings = json.loads(run.stdout)
    token = _token(env)
    for event in ("PostToolUse", "PostToolUseFailure"):
        (entry,) = settings["hooks"][event][0]["hooks"]
        assert entry["type"] == "http" and entry["url"] == f"http://127.0.0.1:{addr[1]}/hook"
        assert entry["headers"]["Authorization"] == f"Bearer {token}"
        assert set(entry["allowedEnvVars"]) >= {"SNAPSHOTD_RUN_ID", "CLAUDE_PROJECT_DIR"}
    only = subprocess.run([sys.executable, "-m", "snapshotd", "http-hook", "--token"],
                          env=env.environ(), capture_output=True, text=True, timeout=60)
    assert only.stdout.strip() == token


def test_a_qwen_code_payload_lands_in_the_run_its_command_hook_would_name(
        sd_env: Env, make_daemon, tmp_path: Path) -> None:
    """Qwen Code's ``http`` hooks POST its own payload: the session is ``qwen-<id>`` on both
    transports (the endpoint once parsed it as Claude Code's, splitting one session in two)."""
    daemon = make_daemon(sd_env, HTTP_ENV)
    addr = _endpoint(daemon)
    worktree = make_git_worktree(tmp_path / "wt")
    (worktree / "hello.txt").write_text("hello\n")
    payload = dict(load_payloads("qwen/post-tool-use.ndjson")[0], cwd=str(worktree),
                   tool_use_id="toolu_qwen_http")
    status, _, _ = _post(addr, json.dumps(payload).encode(), _auth(sd_env, addr))
    assert status == 200
    rows = sd_env.ledger_query("SELECT run_id FROM checkpoints WHERE tool_use_id = ?",
                               ("toolu_qwen_http",))
    assert [r["run_id"] for r in rows] == [f"qwen-{payload['session_id']}"]
