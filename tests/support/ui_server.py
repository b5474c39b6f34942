"""``snapshotd ui`` as a real subprocess for the web app's tests, and raw HTTP to it.

``UiServer.start(env)`` runs ``snapshotd ui --no-browser --port 0`` with the env's home and
socket and reads the sign-in URL it prints and the API token from the file it names;
``login_url`` mints a fresh one-time code (``POST /login/code`` with the token as a bearer);
``request`` sends one request with exactly the headers given (http.client, so Host and Cookie
are under the test's control).
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
from urllib.parse import quote

from tests.conftest import Env

URL_RE = re.compile(r"(http://127\.0\.0\.1:(\d+)/login\?code=(\S+))")
TOKEN_FILE_RE = re.compile(r"is in (/\S+\.token)\)")


class UiServer:
    def __init__(self, proc: subprocess.Popen, url: str, port: int, token: str) -> None:
        self.proc = proc
        self.printed_url = url  # its code works once: use login_url() for each sign-in
        self.port = port
        self.token = token
        self.host = f"127.0.0.1:{port}"
        self.base = f"http://127.0.0.1:{port}/"

    @classmethod
    def start(cls, env: Env) -> UiServer:
        proc = subprocess.Popen([sys.executable, "-m", "snapshotd", "ui", "--no-browser",
                                 "--port", "0"], env=env.environ(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        # The URL is the first line; a failed start closes stdout, so readline returns.
        line = proc.stdout.readline()
        match = URL_RE.search(line)
        second = proc.stdout.readline()
        token_file = TOKEN_FILE_RE.search(second)
        if not match or not token_file:
            proc.kill()
            raise RuntimeError(f"snapshotd ui printed {line + second!r}: {proc.communicate()[1]}")
        token = open(token_file.group(1)).read().strip()
        return cls(proc, match.group(1), int(match.group(2)), token)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()

    def request(self, method: str, path: str, *, headers: dict[str, str] | None = None,
                body: object = None) -> tuple[int, dict[str, str], bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        data = json.dumps(body).encode() if body is not None else None
        sent = {"Host": self.host}
        sent.update(headers or {})
        conn.putrequest(method, path, skip_host=True)
        for name, value in sent.items():
            conn.putheader(name, value)
        if data is not None:
            conn.putheader("Content-Length", str(len(data)))
        conn.endheaders(data)
        resp = conn.getresponse()
        out = resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
        conn.close()
        return out

    def login_code(self) -> str:
        status, _, body = self.request("POST", "/login/code",
                                       headers={"Authorization": f"Bearer {self.token}"})
        assert status == 200, (status, body)
        return json.loads(body)["code"]

    def login_url(self, next_path: str = "") -> str:
        """A fresh sign-in URL (its code works once), going on to ``next_path``."""
        extra = f"&next={quote(next_path, safe='')}" if next_path else ""
        return f"{self.base}login?code={self.login_code()}{extra}"

    def login(self) -> tuple[str, str]:
        """A new session: its cookie (``name=value``) and its CSRF value (from the page)."""
        status, headers, _ = self.request("GET", "/login?code=" + self.login_code())
        assert status == 303, status
        cookie = headers["set-cookie"].split(";")[0]
        status, _, page = self.request("GET", "/", headers={"Cookie": cookie})
        found = re.search(rb'name="csrf-token" content="([^"]+)"', page)
        assert status == 200 and found, (status, page[:200])
        return cookie, found.group(1).decode()

    def cookie(self) -> str:
        """The cookie of a new session."""
        return self.login()[0]

    def get_json(self, path: str, cookie: str) -> tuple[int, dict]:
        status, _, body = self.request("GET", path, headers={"Cookie": cookie})
        return status, json.loads(body)

