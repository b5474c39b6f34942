"""The control socket: framed msgpack requests in, service calls out (docs/protocol.md).

Owns serving the listening socket (``listener`` makes it and holds the home's lock): the peer-uid
check, frame limits, idle timeouts, the cap on concurrent connections, graceful shutdown, and the
table of ops, each with one handler (``register``) and any number of wrappers (``wrap``; the
daemon's parts see a ``core.registry.Registry``). One thread accepts and hands each connection
to a thread (``workers``) that reads, runs and replies, blocking, with no event loop (why:
docs/performance.md); at most ``workers`` handlers run at once. The main thread keeps the
signals, the stop sequence and ``call_in_main``. Promises:
- The socket is 0600 in a 0700 directory; a peer of another uid is refused before any read. A bad
  frame, one over 1 MiB, an unknown op or an ill-typed field gets an error reply; others go on.
- Wrappers run in ``LAYERS`` order (first innermost); re-registering keeps a handler's wrappers.
- SIGTERM: stop accepting, finish in-flight requests, answer ``shutting-down`` to ones not begun
  (never a reset), run shutdown hooks, exit 0; what outlasts ``STOP_GRACE_S`` or ``STOP_HOOKS_S``
  is logged, named in ``abandoned`` and not waited for (in full: docs/protocol.md)."""

from __future__ import annotations

import errno
import logging
import os
import queue
import select
import signal
import socket
import struct
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import msgpack

from snapshotd.core import (
    BAD_FRAME,
    BAD_REQUEST,
    BUSY,
    FORBIDDEN,
    FRAME_TOO_LARGE,
    INTERNAL,
    LAYERS,
    SHUTTING_DOWN,
    UNKNOWN_OP,
    UNSUPPORTED_VERSION,
    Handler,
    ServiceError,
    Wrapper,
    check_fault,
    injected_delay,
)
from snapshotd.daemon.listener import peer_uid
from snapshotd.daemon.workers import Workers
from snapshotd.service import Service
from snapshotd_client import MAX_FRAME, PROTOCOL_VERSION, decode_body, encode_frame

log = logging.getLogger("snapshotd.server")

# How long SIGTERM waits for in-flight requests, then for the shutdown hooks (s). A capture of a
# very large tree can take seconds; one stuck for good (a thread blocked in a system call) must
# not keep the daemon from stopping.
STOP_GRACE_S = 10.0
STOP_HOOKS_S = 20.0
# How long the stop waits, once in-flight requests are done, for each connection to answer a
# request it had already been sent (``shutting-down``) and close.
STOP_CUT_S = 2.0
# Put on the main thread's queue to end the serving (a signal, ``stop``).
_STOP = None
# How often the main thread wakes while it serves. A signal the kernel hands to another thread
# (it may, when the main thread already has one pending) runs its Python handler only once the
# main thread runs again: this bounds that wait.
MAIN_WAKE_S = 1.0
# How long the acceptor waits before trying again when it cannot accept (no descriptors left).
ACCEPT_RETRY_S = 0.1
# How long a refusal (busy) may take to send before the connection is simply closed (s).
REFUSAL_SEND_S = 1.0
# accept(2) failures that leave the listener usable: the acceptor waits and tries again.
_ACCEPT_RETRY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class Server:
    """Serves the protocol on a listening socket until ``stop()``; to the parts attached to it,
    the daemon's ``Registry`` (``snapshotd.core.registry``)."""

    def __init__(self, service: Service, listener: socket.socket, *,
                 idle_timeout_s: float = 300.0, max_connections: int = 1024,
                 workers: int = 16) -> None:
        self.service = service
        self.listener = listener
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = max_connections
        # Each op's own handler; ``handler(op)`` is what a request runs (with the wrappers).
        self.handlers: dict[str, Handler] = {
            "ping": service.ping,
            "snapshot": service.snapshot,
            "attempt_begin": service.attempt_begin,
            "attempt_end": service.attempt_end,
            "list": service.list_run,
            "status": self._status,
            "flush": self._flush,
        }
        self._wrappers: dict[str, dict[str, Wrapper]] = {}
        self._chains: dict[str, Handler] = {}
        self.status_extras: list[Callable[[], dict]] = []
        self.flush_hook: Callable[[Path], None] | None = None
        self.shutdown_hooks: list[Callable[[], None]] = []
        # Run in the loop once the listener accepts (sd_notify READY=1) and as stopping begins.
        self.on_ready: list[Callable[[], None]] = []
        self.on_stopping: list[Callable[[], None]] = []
        # Runs the shutdown hooks (one at a time; a stuck one is abandoned, not waited for).
        self._executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="snapshotd")
        self._workers = Workers(workers, "snapshotd-connection")
        # Handlers running at once, at most: a burst of connections queues here, not in memory.
        self._slots = threading.BoundedSemaphore(workers)
        # Guards the connection set and the in-flight bookkeeping, shared by every thread.
        self._lock = threading.Lock()
        self._connections: set[socket.socket] = set()
        self._in_flight = 0
        # Set as the stop begins: the acceptor leaves, new requests are answered shutting-down.
        self._stop_flag = threading.Event()
        self._wake: tuple[int, int] | None = None  # a pipe: written to wake the acceptor
        self._acceptor: threading.Thread | None = None
        # What each in-flight request is (op and worktree), by a serial number, for the log of
        # a stop that has to abandon one.
        self._running: dict[int, str] = {}
        self._serial = 0
        # Requests and hooks a stop abandoned after its deadline (their threads still run).
        self.abandoned: list[str] = []
        # What the main thread runs while it serves (``call_in_main``), and ``_STOP`` once a
        # signal or ``stop`` asks for the stop: put from signal handlers too (reentrant).
        self._main_calls: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._serving = False
        self.refused_connections = 0
        self.accept_errors = 0
        self._accept_failing = False

    def register(self, op: str, handler: Handler) -> None:
        """Make ``handler`` the op's own handler (replacing any earlier one, keeping the op's
        wrappers). A handler takes the request's fields and returns the result map, or raises
        ``ServiceError``; it runs on the thread pool."""
        self.handlers[op] = handler
        self._chains.pop(op, None)

    def wrap(self, op: str, wrapper: Wrapper, *, layer: str) -> None:
        """Put ``wrapper`` around ``op`` at ``layer`` (one of ``LAYERS``). The op may be
        registered before or after; each layer holds at most one wrapper per op."""
        if layer not in LAYERS:
            raise ValueError(f"unknown layer {layer!r}; layers are {', '.join(LAYERS)}")
        layers = self._wrappers.setdefault(op, {})
        if layer in layers:
            raise ValueError(f"op {op!r} already has a wrapper at layer {layer!r}")
        layers[layer] = wrapper
        self._chains.pop(op, None)

    def handler(self, op: str) -> Handler | None:
        """What a request for ``op`` runs: its handler inside its wrappers; None if unknown."""
        chain = self._chains.get(op)
        if chain is None:
            base = self.handlers.get(op)
            if base is None:
                return None
            chain = base
            layers = self._wrappers.get(op, {})
            for layer in LAYERS:
                if layer in layers:
                    chain = _wrapped(layers[layer], chain)
            self._chains[op] = chain
        return chain

    def run(self, on_ready: Callable[[], None] | None = None) -> None:
        """Serve until SIGTERM/SIGINT (or ``stop``), then shut down gracefully. Runs in the
        main thread (signal handlers are installed there), which serves ``call_in_main``
        meanwhile; the signals' earlier handlers are put back before it returns."""
        previous = {sig: signal.signal(sig, self._on_signal)
                    for sig in (signal.SIGTERM, signal.SIGINT)}
        try:
            self._serve_main(on_ready)
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def stop(self) -> None:
        """Begin the graceful stop, as SIGTERM does (from any thread)."""
        self._main_calls.put(_STOP)

    @property
    def accepting(self) -> bool:
        """Whether the thread that accepts connections is running (the supervisor's watchdog
        is fed only while it is, and the loop answers)."""
        return (self._acceptor is not None and self._acceptor.is_alive()
                and not self._stop_flag.is_set())

    def call_in_main(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` in the main thread, which serves such calls until the stop begins (the
        supervisor's watchdog proves with one that the daemon still answers). Raises
        ``RuntimeError`` once it no longer does."""
        if not self._serving:
            raise RuntimeError("the daemon's main thread no longer serves calls")
        self._main_calls.put(fn)

    # -- helpers ---------------------------------------------------------------------------

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self._main_calls.put(_STOP)

    def _serve_main(self, on_ready: Callable[[], None] | None) -> None:
        self._serving = True
        self.listener.setblocking(False)
        self._wake = os.pipe()
        self._acceptor = threading.Thread(target=self._accept_loop, name="snapshotd-accept",
                                          daemon=True)
        self._acceptor.start()
        if on_ready is not None:
            on_ready()
        _call_each(self.on_ready, "ready")
        log.info("serving on %s", self.listener.getsockname())
        self._run_main_calls()
        log.info("stopping: finishing in-flight requests")
        self._stop_flag.set()
        _call_each(self.on_stopping, "stopping")
        self._stop_accepting()
        self._finish_in_flight()
        self._cut_connections()
        self._connections_answered()
        self._run_shutdown_hooks()
        self._workers.stop()
        # Threads still stuck are abandoned: waiting for them would never end.
        self._executor.shutdown(wait=not self.abandoned, cancel_futures=True)

    def _run_main_calls(self) -> None:
        """Run what ``call_in_main`` queued until the stop is asked for. A call that fails is
        logged; it never ends the serving."""
        while True:
            try:
                call = self._main_calls.get(timeout=MAIN_WAKE_S)
            except queue.Empty:
                continue  # any signal handler due has just run, in this thread
            if call is _STOP:
                self._serving = False
                return
            try:
                call()
            except Exception:  # noqa: BLE001 - one caller's trouble, logged
                log.exception("a call run in the main thread failed")

    def _finish_in_flight(self) -> None:
        """In-flight requests finish and their replies go out before connections are cut, for
        at most ``STOP_GRACE_S``; whatever still runs then is logged and abandoned."""
        deadline = time.monotonic() + STOP_GRACE_S
        while self._in_flight and time.monotonic() < deadline:
            time.sleep(0.01)
        if self._in_flight:
            with self._lock:
                running = sorted(self._running.values())
            self.abandoned.extend(running)
            log.error("stopping with %d request(s) still running after %gs, abandoned: %s",
                      len(running), STOP_GRACE_S, "; ".join(running))

    def _connections_answered(self) -> None:
        """Each connection thread answers what it had already been sent and closes, for at
        most ``STOP_CUT_S``; a connection whose request was abandoned is not waited for."""
        deadline = time.monotonic() + STOP_CUT_S
        while time.monotonic() < deadline:
            with self._lock:
                if len(self._connections) <= self._in_flight:
                    return
            time.sleep(0.01)
        log.warning("stopping with %d connection(s) still open after %gs",
                    len(self._connections), STOP_CUT_S)

    def _run_shutdown_hooks(self) -> None:
        """Each hook in turn, all of them within ``STOP_HOOKS_S``; one that overruns is logged
        and abandoned (it may wait on a worktree a stuck request holds)."""
        deadline = time.monotonic() + STOP_HOOKS_S
        for hook in self.shutdown_hooks:
            name = getattr(hook, "__qualname__", repr(hook))
            remaining = max(0.1, deadline - time.monotonic())
            future = self._executor.submit(hook)
            try:
                future.result(timeout=remaining)
            except FutureTimeout:
                self.abandoned.append(f"shutdown hook {name}")
                log.error("shutdown hook %s still running after %gs: abandoned", name,
                          STOP_HOOKS_S)
            except Exception:  # noqa: BLE001
                log.exception("shutdown hook %s failed", name)

    def _accept_loop(self) -> None:
        """Take connections in the order they came until the stop begins; each goes to a
        connection thread, or is refused here when the table is full. Should this thread
        fail, the daemon stops (a daemon that holds the home but takes no connection is
        worse than none: the next hook starts a new one)."""
        assert self._wake is not None
        try:
            poller = select.poll()
            poller.register(self.listener.fileno(), select.POLLIN)
            poller.register(self._wake[0], select.POLLIN)
            while not self._stop_flag.is_set():
                poller.poll()
                injected_delay("accept")
                check_fault("acceptor")
                self._accept_pending()
        except Exception:  # noqa: BLE001 - logged; the stop that follows is the handling
            log.critical("the socket's accepting thread failed: stopping the daemon",
                         exc_info=True)
            self.stop()

    def _accept_pending(self) -> None:
        while not self._stop_flag.is_set():
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in (errno.ECONNABORTED, errno.EPROTO):
                    continue  # the client gave up before it was taken: nobody to serve
                if exc.errno not in _ACCEPT_RETRY_ERRNOS:
                    raise
                # Out of descriptors or memory: the connection waits in the backlog; try again
                # shortly rather than spin on it. Logged once a spell, counted every time.
                self.accept_errors += 1
                if not self._accept_failing:
                    log.warning("cannot accept a connection (retrying every %gs): %s",
                                ACCEPT_RETRY_S, exc)
                self._accept_failing = True
                time.sleep(ACCEPT_RETRY_S)
                return
            self._accept_failing = False
            self._admit(conn)

    def _admit(self, conn: socket.socket) -> None:
        with self._lock:
            full = (len(self._connections) >= self.max_connections
                    and self._still_there() >= self.max_connections)
            if not full:
                self._connections.add(conn)
        if not full:
            try:
                self._workers.submit(lambda: self._serve(conn))
                return
            except Exception as exc:  # noqa: BLE001 - no thread to be had: refuse this one
                log.error("cannot start a thread for a connection (refused as busy): %s: %s",
                          type(exc).__name__, exc)
                with self._lock:
                    self._connections.discard(conn)
        self.refused_connections += 1
        # A fresh socket's send buffer takes the short reply without blocking.
        self._send_then_close(conn, _error(None, BUSY, "too many connections; retry"))

    def _still_there(self) -> int:
        """How many open connections still have their client (the caller holds ``_lock``):
        one the client already closed keeps its place until its thread reads the end, which
        may come after the next client connects. Asked only when the table looks full.
        Connections are closed only under ``_lock``, so every descriptor polled is theirs."""
        poller = select.poll()
        for conn in self._connections:
            poller.register(conn, select.POLLRDHUP)
        gone = sum(1 for _, events in poller.poll(0)
                   if events & (select.POLLRDHUP | select.POLLHUP | select.POLLERR))
        return len(self._connections) - gone

    def _serve(self, conn: socket.socket) -> None:
        """One connection, on its own thread: requests in turn until the peer leaves, sends
        something that is not a frame, stays idle past ``idle_timeout_s``, or the stop cuts
        it."""
        try:
            uid = peer_uid(conn)
            if uid is None or uid != os.getuid():
                log.warning("refused a connection from uid %s", uid)
                self._send(conn, _error(None, FORBIDDEN,
                                        "this daemon serves only its own user"))
                return
            conn.settimeout(self.idle_timeout_s)
            injected_delay("serve")
            while self._serve_request(conn):
                pass
        except OSError:
            pass  # the peer left, or the daemon stops: there is no one to answer
        finally:
            with self._lock:  # closed under the lock: see ``_still_there``, ``_cut_connections``
                self._connections.discard(conn)
                conn.close()

    def _serve_request(self, conn: socket.socket) -> bool:
        """Read one frame, answer it; False when the connection is done."""
        header = _recv_exactly(conn, 4, self.idle_timeout_s)
        if header is None:
            return False
        (length,) = struct.unpack(">I", header)
        if length > MAX_FRAME:
            self._send(conn, _error(None, FRAME_TOO_LARGE,
                                    f"frame of {length} bytes exceeds the "
                                    f"{MAX_FRAME}-byte limit"))
            return False
        body = _recv_exactly(conn, length, self.idle_timeout_s)
        if body is None:
            return False
        try:
            request = decode_body(body)
        except Exception as exc:  # noqa: BLE001 - hostile bytes of any kind
            self._send(conn, _error(None, BAD_FRAME, f"not a msgpack map: {exc}"))
            return False
        self._send(conn, self._dispatch(request))
        return True

    def _dispatch(self, request: dict) -> dict:
        req_id = request.get("id")
        if not isinstance(req_id, (int, str)) or isinstance(req_id, bool):
            return _error(None, BAD_REQUEST, "every request needs an id (int or str)")
        if request.get("v") != PROTOCOL_VERSION:
            return _error(req_id, UNSUPPORTED_VERSION,
                          f"protocol version {request.get('v')!r} is not supported; use 1")
        op = request.get("op")
        handler = self.handler(op) if isinstance(op, str) else None
        if handler is None:
            return _error(req_id, UNKNOWN_OP, f"unknown op {op!r}; known ops: "
                          + ", ".join(sorted(self.handlers)))
        fields = {k: v for k, v in request.items() if k not in ("v", "op", "id")}
        with self._lock:
            if self._stop_flag.is_set():
                return _error(req_id, SHUTTING_DOWN,
                              "the daemon is stopping; retry shortly")
            self._in_flight += 1
            self._serial += 1
            serial = self._serial
            self._running[serial] = (f"{op} {fields.get('cwd') or fields.get('worktree') or ''}"
                                     .strip())
        try:
            with self._slots:
                result = handler(fields)
        except ServiceError as exc:
            return _error(req_id, exc.code, exc.message)
        except Exception as exc:  # noqa: BLE001 - never let one request kill the daemon
            log.exception("op %s failed", op)
            return _error(req_id, INTERNAL, f"{type(exc).__name__}: {exc}")
        finally:
            with self._lock:
                self._in_flight -= 1
                self._running.pop(serial, None)
        return {"id": req_id, "ok": True, "result": result}

    def _send(self, conn: socket.socket, message: dict) -> None:
        try:
            frame = encode_frame(message)
        except (ValueError, TypeError, msgpack.PackException) as exc:
            # Whatever was done is done: an undo command the result carries must still reach
            # the caller (an applied restore), so the error message names it.
            result = message.get("result")
            undo = result.get("undo_command") if isinstance(result, dict) else None
            hint = f"; it was applied, undo with: {undo}" if isinstance(undo, str) else ""
            frame = encode_frame(_error(message.get("id"), INTERNAL,
                                                 f"reply could not be encoded: {exc}{hint}"))
        # Bounded by the connection's timeout: a peer that never reads is cut, not waited on.
        conn.sendall(frame)

    def _send_then_close(self, conn: socket.socket, message: dict) -> None:
        try:
            conn.settimeout(REFUSAL_SEND_S)
            self._send(conn, message)
        except OSError:
            pass  # the peer already left: the refusal has no one to reach
        finally:
            conn.close()

    def _stop_accepting(self) -> None:
        """The acceptor leaves and the socket stops listening: a client connecting from now on
        is refused by the kernel (its hook records the gap), not left waiting. One that had
        connected already, still in the backlog, is taken first: the request it may have sent
        is answered ``shutting-down`` rather than met by a reset."""
        assert self._wake is not None
        os.write(self._wake[1], b"x")
        if self._acceptor is not None:
            self._acceptor.join(timeout=5.0)
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                break  # the backlog is empty (or no descriptor is left to take it with)
            self._admit(conn)
        self.listener.close()
        for fd in self._wake:
            os.close(fd)

    def _cut_connections(self) -> None:
        """Wake every connection thread still waiting for a request: its read ends, it
        closes. Only the reading side is shut: a frame that had already arrived is still read
        and answered ``shutting-down``, and the client can send nothing more."""
        with self._lock:  # no connection is closed meanwhile: each descriptor is its own
            for conn in self._connections:
                try:
                    conn.shutdown(socket.SHUT_RD)
                except OSError:
                    pass  # its client already went: its thread is on the way out

    def _status(self, fields: dict) -> dict:
        out = self.service.status(fields)
        out["socket"] = str(self.listener.getsockname())
        with self._lock:
            out["connections"] = len(self._connections)
        out["connection_threads"] = {"started": self._workers.started,
                                     "idle": self._workers.idle()}
        out["refused_connections"] = self.refused_connections
        out["accept_errors"] = self.accept_errors
        for extra in self.status_extras:
            out.update(extra())
        return out

    def _flush(self, fields: dict) -> dict:
        cwd = fields.get("cwd")
        if not isinstance(cwd, str) or not os.path.isabs(cwd) or "\0" in cwd:
            raise ServiceError(BAD_REQUEST, "flush needs an absolute cwd")
        root = Path(cwd).resolve()
        if self.flush_hook is not None:
            self.flush_hook(root)
        return {"worktree": str(root), "flushed": True}


def _recv_exactly(conn: socket.socket, size: int, seconds: float) -> bytes | None:
    """``size`` bytes from ``conn`` within ``seconds`` in all, or None when the peer closes,
    the time runs out, or the stop cuts the connection. The connection's own timeout bounds
    the first read; only a frame that arrives in pieces sets a shorter one for the rest (a
    peer sending a byte at a time must not stretch its frame past the idle timeout)."""
    if size == 0:
        return b""  # an empty frame body: decoding it answers bad-frame
    deadline = time.monotonic() + seconds
    try:
        data = conn.recv(size)
        if len(data) == size or not data:
            return data or None
        parts = [data]
        got = len(data)
        try:
            while got < size:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return None
                conn.settimeout(remaining)
                data = conn.recv(size - got)
                if not data:
                    return None
                parts.append(data)
                got += len(data)
        finally:
            conn.settimeout(seconds)
        return b"".join(parts)
    except TimeoutError:
        return None


def _wrapped(wrapper: Wrapper, inner: Handler) -> Handler:
    return lambda fields: wrapper(fields, inner)


def _call_each(callbacks: list[Callable[[], None]], what: str) -> None:
    for callback in callbacks:
        try:
            callback()
        except Exception:  # noqa: BLE001 - a listener never takes the daemon down
            log.exception("%s callback failed", what)


def _error(req_id: object, code: str, message: str) -> dict:
    return {"id": req_id, "ok": False, "error": {"code": code, "message": message}}
