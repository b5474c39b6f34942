"""Talking to the supervisor: sd_notify readiness, status, watchdog and stopping messages.

Owns the datagram socket named by ``$NOTIFY_SOCKET`` (a path, or an abstract name written
``@name``) and the watchdog thread; with no ``NOTIFY_SOCKET`` ``attach`` does nothing. Stdlib only.

Promises:
- ``READY=1`` is sent once, when the listener is accepting (``server.on_ready``), never before,
  so ``Type=notify`` units order clients after a daemon that can really serve them.
- ``WATCHDOG=1`` is sent every ``WATCHDOG_USEC/2`` while the main thread answers and the socket's
  accepting thread runs (a wedged main thread or a dead acceptor stops the pings and the
  supervisor restarts us), only when ``WATCHDOG_USEC`` is set and ``WATCHDOG_PID`` is unset or
  names this process.
- ``STATUS=…`` says what the daemon is doing (active attempts, captures, gaps) and is refreshed
  on the same tick when it changed; ``STOPPING=1`` is sent as soon as shutdown begins.
- A supervisor that went away never breaks the daemon: send errors are logged once at debug.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Mapping

log = logging.getLogger("snapshotd.sdnotify")

# STATUS is refreshed at least this often even without a watchdog.
STATUS_INTERVAL_S = 10.0


def attach(service, server, config) -> None:  # noqa: ARG001 - the attach signature is fixed
    notifier = Notifier.from_environment()
    if notifier is None:
        return
    supervisor = Supervision(notifier, service, server, watchdog_interval(os.environ))
    server.on_ready.append(supervisor.ready)
    server.on_stopping.append(supervisor.stopping)
    server.shutdown_hooks.append(supervisor.close)
    # Children (agents started by an engine, git helpers) must not talk to our supervisor.
    for name in ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID"):
        os.environ.pop(name, None)


class Notifier:
    """Sends sd_notify datagrams to one address."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._target: str | bytes = ("\0" + address[1:]).encode() if address.startswith("@") \
            else address
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
        self._lock = threading.Lock()
        self._warned = False

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> Notifier | None:
        env = os.environ if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if not address:
            return None
        if not (address.startswith("/") or address.startswith("@")):
            # e.g. vsock: addresses of VM supervisors; not ours to speak.
            log.warning("NOTIFY_SOCKET=%s is not a unix socket address; not notifying", address)
            return None
        return cls(address)

    def send(self, *lines: str) -> bool:
        message = "\n".join(lines).encode()
        with self._lock:
            try:
                self._sock.sendto(message, self._target)
                return True
            except OSError as exc:
                if not self._warned:
                    self._warned = True
                    log.debug("sd_notify to %s failed: %s", self.address, exc)
                return False

    def close(self) -> None:
        with self._lock:
            self._sock.close()


def watchdog_interval(environ: Mapping[str, str]) -> float | None:
    """Half the supervisor's watchdog timeout in seconds, or None when there is no watchdog
    for this process."""
    usec = environ.get("WATCHDOG_USEC", "")
    if not usec:
        return None
    pid = environ.get("WATCHDOG_PID", "")
    if pid:
        try:
            if int(pid) != os.getpid():
                return None
        except ValueError:
            return None
    try:
        value = int(usec)
    except ValueError:
        log.warning("ignoring malformed WATCHDOG_USEC=%r", usec)
        return None
    if value <= 0:
        return None
    return value / 2 / 1_000_000


class Supervision:
    """The daemon's side of the conversation: ready, status, watchdog, stopping."""

    def __init__(self, notifier: Notifier, service, server, watchdog_s: float | None) -> None:
        self._status_errors: set[str] = set()
        self.notifier = notifier
        self.service = service
        self.server = server
        self.watchdog_s = watchdog_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_status = ""

    def ready(self) -> None:
        """Called in the main thread once the listener accepts connections."""
        status = self._status_line()
        self._last_status = status
        self.notifier.send("READY=1", f"STATUS={status}")
        self._thread = threading.Thread(target=self._tick_loop, name="snapshotd-sd-notify",
                                        daemon=True)
        self._thread.start()

    def stopping(self) -> None:
        self.notifier.send("STOPPING=1", "STATUS=Stopping: finishing in-flight captures")

    def close(self) -> None:
        # Keep pinging the watchdog through slow shutdown hooks; this hook runs last.
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.notifier.close()

    # -- the thread ------------------------------------------------------------------------

    def _tick_loop(self) -> None:
        interval = min(self.watchdog_s or STATUS_INTERVAL_S, STATUS_INTERVAL_S)
        next_status = time.monotonic() + STATUS_INTERVAL_S
        while not self._stop.wait(interval):
            if self.watchdog_s is not None and self._loop_answers(timeout=interval / 2):
                self.notifier.send("WATCHDOG=1")
            if time.monotonic() >= next_status:
                next_status = time.monotonic() + STATUS_INTERVAL_S
                status = self._status_line()
                if status != self._last_status:
                    self._last_status = status
                    self.notifier.send(f"STATUS={status}")

    def _loop_answers(self, timeout: float) -> bool:
        """True when the socket's accepting thread runs and the main thread runs a call
        within ``timeout``: a daemon that stopped serving must stop feeding the watchdog."""
        if not self.server.accepting:
            return False  # the socket no longer takes connections: the daemon serves no one
        answered = threading.Event()
        try:
            self.server.call_in_main(answered.set)
        except RuntimeError:  # the main thread no longer serves: we are past serving
            return False
        return answered.wait(max(timeout, 0.05))

    def _status_line(self) -> str:
        try:
            attempts = len(self.service.ledger.active_attempts())
            counters = self.service.counters
            gaps = sum(self.service.gaps.counts.values())
        except Exception as exc:  # noqa: BLE001 - status text must never fail the tick
            # Logged (once per kind: the tick repeats every few seconds), and named in the text.
            kind = type(exc).__name__
            if kind not in self._status_errors:
                self._status_errors.add(kind)
                log.warning("the supervisor status line cannot be built: %s: %s", kind, exc)
            return f"Serving (status unavailable: {kind})"
        return (f"Serving: {attempts} active attempt{'s' if attempts != 1 else ''}, "
                f"{counters.get('captures_tier1', 0)} tier-1 and "
                f"{counters.get('captures_tier2', 0)} tier-2 captures, "
                f"{counters.get('dedups', 0)} deduplicated, {gaps} gaps since start")
