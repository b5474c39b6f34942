"""``snapshotd ui`` as a real subprocess for the web app's tests, and raw HTTP to it.

``UiServer.start(env)`` runs ``snapshotd ui --no-browser --port 0`` with the env's home and
socket and reads the URL it prints; ``request`` sends one request with exactly the headers
given (http.client, so Host and Cookie are under the test's control).
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys

from tests.conftest import Env

URL_RE = re.compile(r"(http://127\.0\.0\.1:(\d+)/\?token=(\S+))")


class UiServer:
    def __init__(self, proc: subprocess.Popen, url: str, port: int, token: str) -> None:
        self.proc = proc
        self.url = url
        self.port = port
        self.token = token
        self.host = f"127.0.0.1:{port}"

    @classmethod
    def start(cls, env: Env) -> UiServer:
        proc = subprocess.Popen([sys.executable, "-m", "snapshotd", "ui", "--no-browser",
                                 "--port", "0"], env=env.environ(), stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        # The URL is the first line; a failed start closes stdout, so readline returns.
        line = proc.stdout.readline()
        match = URL_RE.search(line)
        if not match:
            proc.kill()
            raise RuntimeError(f"snapshotd ui printed {line!r}: {proc.communicate()[1]}")
        return cls(proc, match.group(1), int(match.group(2)), match.group(3))

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

    def cookie(self) -> str:
        """The cookie the first request with the token sets."""
        status, headers, _ = self.request("GET", "/?token=" + self.token)
        assert status == 303, status
        return headers["set-cookie"].split(";")[0]

    def get_json(self, path: str, cookie: str) -> tuple[int, dict]:
        status, _, body = self.request("GET", path, headers={"Cookie": cookie})
        return status, json.loads(body)

