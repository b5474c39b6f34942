"""A git smart-HTTP server on loopback for the remote-credential tests: ``git http-backend`` run
CGI-style behind ``http.server``, every request refused with 401 unless it carries the one
user and password it was made with (HTTP basic auth), and ``stalled_server`` (accepts a
connection and never answers: the timeout case).

Promises: ``GitHttpServer.gate`` is a ``threading.Event`` an authorised request waits on before
it is served (set from the start unless ``hold=True``), so a test can look at the processes
of a git command while it is mid-request; ``authorised`` counts the requests served; both
servers listen on 127.0.0.1 only and stop with ``close()``.
"""

from __future__ import annotations

import base64
import socket
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path


class GitHttpServer:
    """``http://127.0.0.1:<port>/<name>.git`` serving the bare repositories under ``root``."""

    def __init__(self, root: Path, user: str, password: str, *, hold: bool = False) -> None:
        self.root, self.expected = root, "Basic " + base64.b64encode(
            f"{user}:{password}".encode()).decode()
        self.gate = threading.Event()
        if not hold:
            self.gate.set()
        self.authorised = 0
        self.refused = 0
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def url(self, name: str, userinfo: str = "") -> str:
        return f"http://{userinfo + '@' if userinfo else ''}127.0.0.1:{self.port}/{name}"

    def close(self) -> None:
        self.gate.set()
        self._httpd.shutdown()
        self._httpd.server_close()


def _handler(server: GitHttpServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet: pytest shows stderr on failure
            pass

        def do_GET(self) -> None:
            self._serve()

        def do_POST(self) -> None:
            self._serve()

        def _serve(self) -> None:
            if self.headers.get("Authorization") != server.expected:
                server.refused += 1
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="test"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            server.gate.wait()
            server.authorised += 1
            self._cgi(self._body())

        def _body(self) -> bytes:
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                body = b""
                while True:
                    size = int(self.rfile.readline().strip().split(b";")[0], 16)
                    if size == 0:
                        self.rfile.readline()
                        return body
                    body += self.rfile.read(size)
                    self.rfile.readline()
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _cgi(self, body: bytes) -> None:
            path, _, query = self.path.partition("?")
            env = {"GIT_PROJECT_ROOT": str(server.root), "GIT_HTTP_EXPORT_ALL": "1",
                   "PATH_INFO": path, "QUERY_STRING": query, "REQUEST_METHOD": self.command,
                   "CONTENT_TYPE": self.headers.get("Content-Type", ""),
                   "CONTENT_LENGTH": str(len(body)), "REMOTE_USER": "tester",
                   "REMOTE_ADDR": "127.0.0.1", "PATH": "/usr/bin:/bin",
                   "HTTP_CONTENT_ENCODING": self.headers.get("Content-Encoding", ""),
                   "GIT_CONFIG_NOSYSTEM": "1", "HOME": str(server.root)}
            out = subprocess.run(["git", "http-backend"], input=body, env=env,
                                 capture_output=True, timeout=120).stdout
            head, _, payload = out.partition(b"\r\n\r\n")
            if not _ and b"\n\n" in out:
                head, _, payload = out.partition(b"\n\n")
            status, headers = 200, []
            for line in head.decode("latin-1").splitlines():
                name, _, value = line.partition(":")
                if name.lower() == "status":
                    status = int(value.split()[0])
                elif name:
                    headers.append((name, value.strip()))
            self.send_response(status)
            for name, value in headers:
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    return Handler


class StalledServer:
    """Accepts connections on 127.0.0.1 and never answers (nor closes) until ``close()``."""

    def __init__(self) -> None:
        self._sock = socket.socket()
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(16)
        self.port = self._sock.getsockname()[1]
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            self._held.append(conn)

    def close(self) -> None:
        self._sock.close()
        for conn in self._held:
            conn.close()
