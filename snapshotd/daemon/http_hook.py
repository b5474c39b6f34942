"""The HTTP hook endpoint: an agent's after-tool payload POSTed on loopback, no process start.

Owns the optional loopback listener (``http_hook = true``; ``http_hook_port``, default 47681,
``0`` picks a free port), the per-user token file ``<home>/http-hook.token`` (``ensure_token``,
``read_token``), the checks every request passes before its body is read, and the mapping of
``X-Snapshotd-*`` headers onto the environment ``snapshot-hook`` would have read; the payload is
handled by the very functions ``snapshot-hook`` uses, so both transports make the same request.
Promises:
- Bound to 127.0.0.1 only; a ``Host`` other than ``127.0.0.1:<port>`` or ``localhost:<port>`` gets
  403 (no DNS rebinding), a missing or wrong ``Authorization: Bearer <token>`` 401, both before
  the body is read and without a capture or a gap (another user cannot fill the spool).
- An authenticated POST to ``/hook`` is answered 200 with an empty body within
  ``hook_timeout_ms`` whatever happens (a capture still running goes on, its outcome recorded);
  every outcome that is not a checkpoint is a gap, exactly once.
- The Unix socket stays the default transport: nothing listens unless configured.
"""

from __future__ import annotations

import errno
import heapq
import hmac
import logging
import os
import secrets
import stat
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from snapshotd.daemon.hook_relay import HookRunner, absolute_path
from snapshotd.daemon.workers import Workers
from snapshotd_client import BAD_PAYLOAD, INTERNAL, parse_json, route

if TYPE_CHECKING:
    from snapshotd.core import Config, Registry
    from snapshotd.service import Service

log = logging.getLogger("snapshotd.http_hook")

TOKEN_FILE = "http-hook.token"
HOOK_PATH = "/hook"
# Claude Code's payloads carry the tool's input and response: a large file read is megabytes.
MAX_BODY = 16 << 20
# What the reply leaves of the hook budget for the answer itself to reach the agent.
_REPLY_MARGIN_S = 0.05
# How long shutdown waits for HTTP hook captures still running before closing the service.
_CLOSE_WAIT_S = 60.0
# Connection threads kept waiting for the next connection: one per agent of a busy host.
_IDLE_WORKERS = 64
# Headers a hook configuration fills from the agent's environment (Claude Code's
# ``allowedEnvVars`` interpolation) and the variable ``snapshot-hook`` would have read instead.
HEADER_ENV = {
    "X-Snapshotd-Run-Id": "SNAPSHOTD_RUN_ID",
    "X-Snapshotd-Node-Id": "SNAPSHOTD_NODE_ID",
    "X-Snapshotd-Iteration": "SNAPSHOTD_ITERATION",
    "X-Snapshotd-Attempt": "SNAPSHOTD_ATTEMPT",
    "X-Snapshotd-Project-Dir": "CLAUDE_PROJECT_DIR",
}


def attach(service: Service, server: Registry, config: Config) -> None:
    """Start the endpoint when ``http_hook`` is on; stop it with the daemon."""
    if not config.http_hook:
        return
    port = config.http_hook_port
    try:
        endpoint = HttpHook(service, server, config, ensure_token(service.home))
    except (OSError, TokenError) as exc:
        # The daemon still serves its socket: the process hook keeps working. `snapshotd
        # http-hook` reads this entry and prints no settings: an agent must not send the token
        # to a port another process holds.
        off = off_status(exc, port)
        log.error("the HTTP hook endpoint is off (%s): %s", off["reason"], off["error"])
        server.status_extras.append(lambda: {"http_hook": off})
        return
    endpoint.start()
    server.status_extras.append(lambda: {"http_hook": endpoint.status()})
    server.on_stopping.append(endpoint.stop_accepting)
    server.shutdown_hooks.append(endpoint.close)


def off_status(exc: Exception, port: int) -> dict:
    """The ``status`` entry of an endpoint that could not start: ``reason`` is ``port-in-use``
    (another listener held the port when the daemon started), ``token`` (an unsafe token
    file) or ``listen-failed``; ``error`` says it in a sentence."""
    if isinstance(exc, TokenError):
        reason, error = "token", str(exc)
    elif isinstance(exc, OSError) and exc.errno == errno.EADDRINUSE:
        reason = "port-in-use"
        error = (f"port {port} on 127.0.0.1 is in use by another process; set "
                 f"http_hook_port to a free port (0 picks one) and restart the daemon")
    else:
        reason, error = "listen-failed", f"cannot listen on 127.0.0.1 port {port}: {exc}"
    return {"enabled": False, "reason": reason, "error": error, "port": port}


class TokenError(Exception):
    """The token file exists but is not safe to use (owner, mode, content)."""


def ensure_token(home: Path) -> str:
    """The token in ``<home>/http-hook.token``, created (0600, 32 random bytes) when missing."""
    path = home / TOKEN_FILE
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except FileExistsError:
        return read_token(home)
    try:
        os.write(fd, (secrets.token_urlsafe(32) + "\n").encode())
    finally:
        os.close(fd)
    return read_token(home)


def read_token(home: Path) -> str:
    """The token, refusing a file another user owns or can read or write."""
    path = home / TOKEN_FILE
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        info = os.fstat(fd)
        if info.st_uid != os.getuid() or stat.S_IMODE(info.st_mode) & 0o077:
            raise TokenError(f"{path} must be owned by uid {os.getuid()} with mode 0600 "
                             f"(it is uid {info.st_uid}, {stat.S_IMODE(info.st_mode):04o})")
        token = os.read(fd, 4096).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if len(token) < 32:
        raise TokenError(f"{path} holds no usable token; delete it and restart the daemon")
    return token


class HttpHook:
    """The listener, its request counters and the pool its captures run on."""

    path = HOOK_PATH
    max_body = MAX_BODY

    def __init__(self, service: Service, server: Registry, config: Config, token: str) -> None:
        self.service = service
        self.server = server
        self.runner = HookRunner(service, server, on_gap=lambda: self.count("gaps"))
        self.token = token
        self.budget_s = max(0.1, config.hook_timeout_ms / 1000.0 - _REPLY_MARGIN_S)
        # http.server is loaded only when the endpoint is on (about 20 ms of every daemon
        # start otherwise).
        from snapshotd.daemon.http_endpoint import Listener, RequestHandler

        self.httpd = Listener(("127.0.0.1", config.http_hook_port), RequestHandler)
        self.httpd.hook = self
        self.workers = self.httpd.workers = Workers(_IDLE_WORKERS, "http-hook-worker")
        self.port = self.httpd.server_address[1]
        self.hosts = {f"127.0.0.1:{self.port}", f"localhost:{self.port}"}
        self.counts = {"accepted": 0, "refused_host": 0, "refused_token": 0,
                       "bad_request": 0, "late": 0, "gaps": 0}
        self._counts_lock = threading.Lock()
        # Captures run on the request's own thread (no hand-off to wait for: on a loaded host
        # each one costs a scheduler slice); ``close`` waits for those still running.
        self._in_flight = 0
        self._idle = threading.Condition()
        self._thread: threading.Thread | None = None
        self.deadlines = Deadlines()

    def start(self) -> None:
        self.deadlines.start()
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="http-hook",
                                        daemon=True)
        self._thread.start()
        log.info("HTTP hook endpoint on http://127.0.0.1:%d%s", self.port, HOOK_PATH)

    def stop_accepting(self) -> None:
        # Runs in the main thread's stop: ``shutdown`` waits for ``serve_forever`` to notice.
        threading.Thread(target=self.httpd.shutdown, daemon=True).start()

    def close(self) -> None:
        """Let captures still running finish before the service closes."""
        with self._idle:
            self._idle.wait_for(lambda: self._in_flight == 0, timeout=_CLOSE_WAIT_S)
        self.deadlines.stop()
        self.workers.stop()
        self.httpd.server_close()

    def begin(self) -> None:
        with self._idle:
            self._in_flight += 1

    def end(self) -> None:
        with self._idle:
            self._in_flight -= 1
            self._idle.notify_all()

    def status(self) -> dict:
        with self._counts_lock:
            counts = dict(self.counts)
        return {"enabled": True, "url": f"http://127.0.0.1:{self.port}{HOOK_PATH}",
                "port": self.port, **counts,
                "threads_started": self.workers.started, "threads_idle": self.workers.idle()}

    def count(self, name: str) -> None:
        with self._counts_lock:
            self.counts[name] += 1

    def authorized(self, authorization: str | None) -> bool:
        scheme, _, given = (authorization or "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(
            given.strip().encode(), self.token.encode())

    def handle_payload(self, body: bytes, headers: Mapping[str, str]) -> None:
        """Capture for one authenticated payload, waiting at most the budget; never raises.
        ``headers`` is looked up case-insensitively (an ``email.message.Message``)."""
        env = {var: str(headers.get(h)) for h, var in HEADER_ENV.items() if headers.get(h)}
        try:
            self._handle(body, env)
        except Exception as exc:  # noqa: BLE001 - a bug here must still leave a gap
            log.exception("HTTP hook request failed")
            self.gap({}, env, INTERNAL, f"HTTP hook failed: {type(exc).__name__}: {exc}")

    def _handle(self, body: bytes, env: dict[str, str]) -> None:
        try:
            payload = parse_json(body)
        except Exception:  # noqa: BLE001 - ValueError, RecursionError: not a payload
            payload = None
        kind = ""
        if isinstance(payload, dict):
            # Qwen Code POSTs its own shape: read as snapshot-hook reads it (one session, one
            # run, whichever transport). A session event here is captured as a tool call: the
            # settings `snapshotd http-hook` prints send only after-tool events.
            payload, kind = route(payload)
        if not isinstance(payload, dict) or not absolute_path(payload.get("cwd")):
            self.count("bad_request")
            self.gap({}, env, BAD_PAYLOAD,
                     f"the HTTP hook's body is not a hook payload with an absolute cwd "
                     f"({len(body)} bytes)")
            return
        self.runner.run_routed(payload, kind, env)

    def gap(self, fields: dict, env: dict[str, str], reason: str, detail: str) -> None:
        """The gap ``snapshot-hook`` would have written for this request."""
        self.runner.gap(fields, env, reason, detail)


class Deadlines:
    """One thread that runs each request's late reply at its deadline, for every request at
    once: a timer thread per request cost a thread start (and the wait for it to run) on every
    tool call, on a host whose cores the agents keep busy."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._cancelled: set[int] = set()
        self._serial = 0
        self._stopped = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="http-hook-deadlines",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def add(self, delay_s: float, callback: Callable[[], None]) -> int:
        """Run ``callback`` in ``delay_s`` unless ``cancel`` is called first; its handle."""
        with self._cond:
            self._serial += 1
            heapq.heappush(self._heap, (time.monotonic() + delay_s, self._serial, callback))
            if self._heap[0][1] == self._serial:
                self._cond.notify()  # the new deadline is the nearest: wake the thread for it
            return self._serial

    def cancel(self, handle: int) -> None:
        with self._cond:
            self._cancelled.add(handle)

    def pending(self) -> int:
        with self._cond:
            return len(self._heap) - len(self._cancelled)

    def _run(self) -> None:
        while True:
            with self._cond:
                due = self._next_due()
            if due is None:
                return
            try:
                due()
            except Exception:  # noqa: BLE001 - one late reply failing must not stop the rest
                log.exception("HTTP hook late reply failed")

    def _next_due(self) -> Callable[[], None] | None:
        """Wait (holding the condition) for the nearest deadline not cancelled; None once
        stopped."""
        while not self._stopped:
            if not self._heap:
                self._cond.wait()
                continue
            when, serial, callback = self._heap[0]
            wait = when - time.monotonic()
            if wait > 0 and serial not in self._cancelled:
                self._cond.wait(wait)
                continue
            heapq.heappop(self._heap)
            if serial in self._cancelled:
                self._cancelled.discard(serial)
                continue
            return callback
        return None
