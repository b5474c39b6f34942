"""The HTTP hook endpoint's listener and request handler (``snapshotd.daemon.http_hook`` owns the
endpoint, its token and its promises).

It keeps the promises ``snapshotd.daemon.http_hook`` states (checks before the body is read, an empty
200 by the deadline). Imported only when the endpoint is on: ``http.server`` and what it pulls
in (``http.client``, ``email``) cost about 20 ms of a daemon's start.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from snapshotd.daemon.workers import Workers
from snapshotd_client import BAD_PAYLOAD

log = logging.getLogger("snapshotd.http_hook")


class Timers(Protocol):
    """Runs a callback at a deadline unless cancelled first (``http_hook.Deadlines``)."""

    def add(self, delay_s: float, callback: Callable[[], None]) -> int: ...

    def cancel(self, handle: int) -> None: ...


class Hook(Protocol):
    """What a request needs of the endpoint that owns it (``http_hook.HttpHook``): declared
    here so that this module, which ``http_hook`` imports, imports nothing of it."""

    path: str  # the one path served
    max_body: int  # the largest body read (bytes)
    budget_s: float  # how long before the agent must have its empty 200
    hosts: set[str]  # the ``Host`` headers accepted
    deadlines: Timers

    def count(self, name: str) -> None: ...

    def authorized(self, authorization: str | None) -> bool: ...

    def gap(self, fields: dict, env: dict[str, str], reason: str, detail: str) -> None: ...

    def begin(self) -> None: ...

    def end(self) -> None: ...

    def handle_payload(self, body: bytes, headers: Mapping[str, str]) -> None: ...


class Listener(ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog (5) overflows when a burst of agents connect at once
    # while the accept thread waits for the CPU; the kernel then drops or resets connections.
    request_queue_size = 256
    hook: Hook
    workers: Workers

    def process_request(self, request: Any, client_address: Any) -> None:
        self.workers.submit(lambda: self.process_request_thread(request, client_address))


class RequestHandler(BaseHTTPRequestHandler):
    """One request: checks first, then the capture, then an empty 200."""

    server: Listener
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 - the name http.server dispatches to
        hook = self.server.hook
        self.connection.settimeout(hook.budget_s)
        if self.headers.get("Host", "") not in hook.hosts:
            hook.count("refused_host")
            self._reply(403)
            return
        if not hook.authorized(self.headers.get("Authorization")):
            hook.count("refused_token")
            self._reply(401)
            return
        if self.path.split("?", 1)[0] != hook.path:
            self._reply(404)
            return
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > hook.max_body:
            hook.count("bad_request")
            hook.gap({}, {}, BAD_PAYLOAD,
                     f"the HTTP hook's body has no usable Content-Length ({length[:20]!r}, "
                     f"at most {hook.max_body} bytes)")
            self._reply(200)
            return
        try:
            body = self.rfile.read(int(length))
        except OSError as exc:
            hook.gap({}, {}, BAD_PAYLOAD, f"the HTTP hook's body was not received: "
                     f"{exc}")
            self._reply(200)
            return
        hook.count("accepted")
        # The agent has its answer by the deadline: past it a timer replies while the capture
        # goes on here and records its own outcome.
        replied = threading.Lock()

        def reply_late() -> None:
            if replied.acquire(blocking=False):
                hook.count("late")
                self._reply(200, close=True)

        deadline = hook.deadlines.add(hook.budget_s, reply_late)
        hook.begin()
        try:
            hook.handle_payload(body, self.headers)
        finally:
            hook.end()
            hook.deadlines.cancel(deadline)
        if replied.acquire(blocking=False):
            self._reply(200)
        else:
            self.close_connection = True

    def do_GET(self) -> None:  # noqa: N802
        self._reply(405)

    def _reply(self, code: int, *, close: bool = False) -> None:
        try:
            self.send_response(code)
            self.send_header("Content-Length", "0")
            if code != 200 or close:
                self.send_header("Connection", "close")
            self.end_headers()
        except OSError:
            self.close_connection = True  # the agent gave up (its own timeout): nothing to say

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        log.debug("%s " + format, self.address_string(), *args)
