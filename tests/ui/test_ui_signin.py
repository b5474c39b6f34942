"""Signing in to the web app on a shared machine: what another local user sees of the browser's
command line is useless, ``next`` never leads off-site, and CSRF values are per session.

``snapshotd ui`` runs as a real subprocess beside a real daemon; the other user is ``nobody``
(``runuser``), reading ``ps`` and ``/proc/PID/cmdline`` and replaying what it read with curl.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from snapshotd.ui.security import safe_next
from tests.conftest import Daemon, Env
from tests.support.helpers import wait_for
from tests.support.ui_server import TOKEN_FILE_RE, UiServer

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
URL_IN_ARGS = re.compile(r"http://127\.0\.0\.1:\d+/\S+")


def as_nobody(*cmd: str) -> str:
    done = subprocess.run(["runuser", "-u", "nobody", "--", *cmd], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, (cmd, done.stderr)
    return done.stdout


@pytest.fixture
def browser_script(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A BROWSER command that writes the URL it got and then waits, URL still in its argv."""
    seen, stop = tmp_path / "seen-url", tmp_path / "stop"
    script = tmp_path / "fake-browser"
    script.write_text(f'#!/bin/sh\necho "$1" > {seen}\n'
                      f'while [ ! -e {stop} ]; do sleep 0.2; done\n')
    script.chmod(0o755)
    yield script, stop
    stop.touch()


@pytest.mark.skipif(sys.platform != "linux", reason="ps and /proc as another user")
def test_browser_command_line_is_useless_to_another_user(
        sd_env: Env, daemon: Daemon, browser_script: tuple[Path, Path]) -> None:
    script, stop = browser_script
    seen = script.parent / "seen-url"
    env = dict(sd_env.environ(), BROWSER=str(script))
    proc = subprocess.Popen([sys.executable, "-m", "snapshotd", "ui", "--port", "0"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = int(re.search(r"127\.0\.0\.1:(\d+)", proc.stdout.readline()).group(1))
        server = UiServer(proc, "", port, "")
        wait_for(lambda: seen.exists() and seen.read_text().strip(), what="the browser's URL")
        url = seen.read_text().strip()
        # What any local user reads: ps, and the browser's /proc/PID/cmdline.
        table = as_nobody("ps", "-ww", "-eo", "args")
        listed = [line for line in table.splitlines() if str(script) in line]
        assert listed and URL_IN_ARGS.search(listed[0]).group(0) == url, table
        pid = next(p.pid for p in psutil.process_iter(["cmdline"])
                   if str(script) in (p.info["cmdline"] or []))
        cmdline = as_nobody("cat", f"/proc/{pid}/cmdline").split("\0")
        assert url in cmdline
        # The browser signs in with it ...
        path = url.split(str(port), 1)[1]
        status, headers, _ = server.request("GET", path)
        assert status == 303, status
        cookie = headers["set-cookie"].split(";")[0]
        assert server.request("GET", "/api/runs", headers={"Cookie": cookie})[0] == 200
        # ... and the other user, replaying it, gets nothing.
        replayed = as_nobody("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", url)
        assert replayed in ("401", "403"), f"the URL from ps signed nobody in ({replayed})"
        # A replay means the code was seen: the session it opened is closed too.
        assert server.request("GET", "/api/runs", headers={"Cookie": cookie})[0] == 403
        # The long-lived token is in none of it.
        token_file = TOKEN_FILE_RE.search(proc.stdout.readline()).group(1)
        assert (Path(token_file).stat().st_mode & 0o777) == 0o600
        token = Path(token_file).read_text().strip()
        assert len(token) >= 32
        everything = as_nobody("ps", "-ww", "-eo", "args") + "\n".join(cmdline)
        assert token not in everything and token not in url
        assert as_nobody("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}",
                         f"http://127.0.0.1:{port}/?token={token}") == "403"
        assert server.request("GET", "/api/runs",
                              headers={"Authorization": f"Bearer {token}"})[0] == 200
    finally:
        stop.touch()  # the fake browser holds the server's stdout open
        proc.terminate()
        proc.communicate(timeout=20)


@pytest.fixture
def ui(sd_env: Env, daemon: Daemon) -> Iterator[UiServer]:
    server = UiServer.start(sd_env)
    yield server
    server.stop()


OFF_SITE = ["//evil.example/x", "/\\evil.example/x", "\\\\evil.example", "http://evil.example/",
            "https:evil.example", "%2F%2Fevil.example", "/%2F%2Fevil.example", "/%5Cevil.example",
            "/%252F%252Fevil.example", "/\t/evil.example", "\t//evil.example", " //evil.example",
            "javascript:alert(1)", "//evil.example%2F@x", "///evil.example", "/\u3002/evil"]


def test_login_never_redirects_off_site(ui: UiServer) -> None:
    from urllib.parse import quote

    for target in OFF_SITE:
        status, headers, _ = ui.request(
            "GET", f"/login?code={ui.login_code()}&next={quote(target, safe='')}")
        assert status == 303 and headers["location"] == "/", (target, headers["location"])
    status, headers, _ = ui.request("GET", f"/login?code={ui.login_code()}&next=/%23/run/r")
    assert status == 303 and headers["location"] == "/#/run/r"
    # The path itself is no redirect either (it was: "//evil.example/x?token=T" answered
    # "Location: //evil.example/x").
    status, headers, _ = ui.request("GET", "//evil.example/x?token=" + ui.token)
    assert status == 403 and "location" not in headers
    status, headers, _ = ui.request("GET", "//evil.example/x", headers={"Cookie": ui.cookie()})
    assert not headers.get("location", "").startswith("//")


@pytest.mark.parametrize("value", [*OFF_SITE, "", "evil", None])
def test_safe_next_sends_anything_else_home(value: str | None) -> None:
    assert safe_next(value) == "/"


@pytest.mark.parametrize("value", ["/", "/#/run/r", "/static/app.js?x=1", "/a%20b"])
def test_safe_next_keeps_a_path_on_this_app(value: str) -> None:
    assert safe_next(value) == value


def test_a_code_works_once_and_csrf_is_per_session(ui: UiServer) -> None:
    code = ui.login_code()
    first = ui.request("GET", "/login?code=" + code)
    assert first[0] == 303
    status, _, body = ui.request("GET", "/login?code=" + code)
    assert status == 403 and b"already used" in body
    status, _, body = ui.request("GET", "/login?code=not-a-code")
    assert status == 403 and b"not valid" in body
    (cookie_a, csrf_a), (cookie_b, csrf_b) = ui.login(), ui.login()
    assert cookie_a != cookie_b and csrf_a != csrf_b
    derived = hmac.new(ui.token.encode(), b"snapshotd-ui-csrf", hashlib.sha256).hexdigest()
    assert derived not in (csrf_a, csrf_b) and ui.token not in (csrf_a, csrf_b)
    assert ui.token not in cookie_a and ui.token not in cookie_b
    plan = {"run": "r", "node": "n", "seq": 0, "iteration": 0, "attempt": 1}
    # Another session's CSRF value is refused; the session's own passes the guard (the run
    # does not exist: 404 from the app, not 403 from the guard).
    status, _, body = ui.request("POST", "/api/restore", body=plan,
                                 headers={"Cookie": cookie_a, "X-CSRF-Token": csrf_b})
    assert status == 403 and b"CSRF" in body
    status, _, body = ui.request("POST", "/api/restore", body=plan,
                                 headers={"Cookie": cookie_a, "X-CSRF-Token": derived})
    assert status == 403 and b"CSRF" in body
    status, _, body = ui.request("POST", "/api/restore", body=plan,
                                 headers={"Cookie": cookie_a, "X-CSRF-Token": csrf_a})
    assert status != 403, body
