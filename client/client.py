"""The Python client of the snapshotd daemon: one Unix-socket connection, many requests.

Owns request/reply exchange over the v1 wire protocol (docs/protocol.md) and the mapping of every
way it can fail onto ``SnapshotdError`` codes: ``daemon-unavailable`` (``DaemonUnavailable``),
``timeout`` (``DaemonTimeout``), ``protocol-error``, ``frame-too-large`` (never sent),
``socket-untrusted`` (``SocketUntrusted``: not certainly the user's own daemon, by
``paths.socket_problem`` before connecting and ``SO_PEERCRED`` after; nothing is sent), and any
daemon code with ``remote=True``; what each means: docs/protocol.md, "Error codes".
``SnapshotdError.daemon_recorded`` tells whether the daemon wrote the gap for a failed snapshot.

Promises: talks only to a listener of the current user. Connects lazily, keeps the connection
across requests and reconnects once when the daemon closed it between calls; after a failure
mid-request the connection is dropped (the stream may be out of step), never reused. Safe to
share between threads (requests are serialized) and across ``fork`` (a child opens its own
connection). Imports only the stdlib and msgpack (on first use: see ``protocol``).
"""

from __future__ import annotations

import _socket  # the C module: ``socket.py`` costs the hook milliseconds of imports
import errno
import os
import sys
import time

# `_thread` rather than `threading`: a plain lock is all we need, and the hook saves the import.
from _thread import allocate_lock

from .paths import socket_path_str as _default_socket_path
from .paths import socket_problem
from .protocol import (
    DAEMON_UNAVAILABLE,
    FRAME_TOO_LARGE,
    PROTOCOL_ERROR,
    PROTOCOL_VERSION,
    SOCKET_UNTRUSTED,
    TIMEOUT,
    ProtocolError,
    daemon_records_gap,
    encode_frame,
    preload_codec,
    read_frame,
)

# Annotations are never evaluated (PEP 563); `typing` costs milliseconds on the hook's path.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class SnapshotdError(Exception):
    """A request that did not succeed; ``code`` is a protocol error code or a client-side one."""

    def __init__(self, code: str, message: str, *, remote: bool = False) -> None:
        super().__init__(code, message)
        self.code = code
        self.message = message
        # True when the daemon itself answered ok:false (as opposed to a client-side failure).
        self.remote = remote

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"

    @property
    def daemon_recorded(self) -> bool:
        """Whether the daemon has already written a gap for this failure (so callers must not)."""
        return self.remote and daemon_records_gap(self.code)


class DaemonUnavailable(SnapshotdError):
    """No daemon accepts on the socket (missing socket file, refused, gone mid-request)."""

    def __init__(self, message: str) -> None:
        super().__init__(DAEMON_UNAVAILABLE, message)


class DaemonTimeout(SnapshotdError):
    """The daemon did not reply within the allowed time."""

    def __init__(self, message: str) -> None:
        super().__init__(TIMEOUT, message)


class SocketUntrusted(SnapshotdError):
    """The socket, its directory or the process listening on it is not the current user's: the
    client refused to send anything to it (``paths.socket_problem``, ``SO_PEERCRED``)."""

    def __init__(self, message: str) -> None:
        super().__init__(SOCKET_UNTRUSTED, message)


class Client:
    """A connection to snapshotd.

    ``timeout`` bounds each request (connect + send + reply). ``deadline``, a
    ``time.monotonic()`` value, additionally bounds every request of this client's life: the hook
    uses it to keep one total budget across connect, retry and reply.
    """

    def __init__(self, socket: str | os.PathLike[str] | None = None, timeout: float = 30.0,
                 *, deadline: float | None = None) -> None:
        self.socket_path = str(_default_socket_path(socket))
        self.timeout = timeout
        self.deadline = deadline
        self._sock: _socket.socket | None = None
        self._pid = 0
        self._next_id = 0
        self._lock = allocate_lock()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._drop()

    def request(self, op: str, **fields: Any) -> dict:
        """Send one request (fields whose value is None are left out) and return its result."""
        with self._lock:
            self._next_id += 1
            request_id = self._next_id
            message: dict[str, Any] = {"v": PROTOCOL_VERSION, "op": op, "id": request_id}
            for key, value in fields.items():
                if value is not None:
                    message[key] = _plain(value)
            try:
                frame = encode_frame(message)
            except ValueError as exc:
                raise SnapshotdError(FRAME_TOO_LARGE, str(exc)) from None
            reply = self._exchange(frame, self._request_deadline())
            try:
                return _result(reply, request_id)
            except SnapshotdError as exc:
                if exc.code == PROTOCOL_ERROR:
                    self._drop()  # replies may be out of step with requests now
                raise

    # -- ops (docs/protocol.md, "Ops") ---------------------------------------------------------

    def ping(self) -> dict:
        return self.request("ping")

    def snapshot(self, cwd: str | os.PathLike[str], run_id: str | None = None,
                 node_id: str | None = None, iteration: int = 0, attempt: int | None = None,
                 tier: int = 1, source: str = "wrap", label: str | None = None,
                 tool_use_id: str | None = None, fallback: dict | None = None,
                 failed: bool | None = None, exit_code: int | None = None,
                 error: str | None = None, tool_aliases: list[str] | None = None) -> dict:
        return self.request("snapshot", cwd=_abs(cwd), run_id=run_id, node_id=node_id,
                            iteration=iteration, attempt=attempt, tier=tier, source=source,
                            label=label, tool_use_id=tool_use_id, fallback=fallback,
                            failed=failed, exit_code=exit_code, error=error,
                            tool_aliases=tool_aliases)

    def attempt_begin(self, run_id: str, node_id: str, cwd: str | os.PathLike[str],
                      iteration: int = 0, attempt: int | None = None,
                      owner_pid: int | None = None, settle_ms: int | None = None,
                      max_wait_ms: int | None = None, resume: bool = False) -> dict:
        return self.request("attempt_begin", run_id=run_id, node_id=node_id, cwd=_abs(cwd),
                            iteration=iteration, attempt=attempt, owner_pid=owner_pid,
                            settle_ms=settle_ms, max_wait_ms=max_wait_ms, resume=resume)

    def attempt_end(self, run_id: str, node_id: str, iteration: int = 0,
                    attempt: int | None = None, status: str = "finished") -> dict:
        return self.request("attempt_end", run_id=run_id, node_id=node_id, iteration=iteration,
                            attempt=attempt, status=status)

    def flush(self, cwd: str | os.PathLike[str]) -> dict:
        return self.request("flush", cwd=_abs(cwd))

    def status(self) -> dict:
        return self.request("status")

    def list(self, run_id: str, node_id: str | None = None, attempt: int | None = None) -> dict:
        """A run's checkpoints and gaps: every page of the ``list`` op, read and joined."""
        return self.pages("list", run_id=run_id, node_id=node_id, attempt=attempt)

    def pages(self, op: str, **fields: Any) -> dict:
        """Every page of a paged op (``list``): asked from ``offset`` 0 to the last page's
        ``next_offset``, each page's lists appended to the first's. A daemon that does not page
        answers once, whole."""
        result = self.request(op, **fields, offset=0)
        offset = 0
        while isinstance(result.get("next_offset"), int) and result["next_offset"] > offset:
            offset = result["next_offset"]
            page = self.request(op, **fields, offset=offset)
            for name, value in page.items():
                if isinstance(value, list) and isinstance(result.get(name), list):
                    result[name].extend(value)
            result["next_offset"] = page.get("next_offset")
        result.pop("next_offset", None)
        result.pop("offset", None)
        return result

    def restore(self, **fields: Any) -> dict:
        """``umask`` defaults to this process's: what the daemon creates gets git's modes less
        it (docs/restore.md, "Modes")."""
        umask = _umask()
        if umask is not None:
            fields.setdefault("umask", umask)
        return self.request("restore", **_abs_paths(fields))

    def diff(self, **fields: Any) -> dict:
        return self.request("diff", **_abs_paths(fields))

    # -- connection ----------------------------------------------------------------------------

    def _request_deadline(self) -> float:
        deadline = time.monotonic() + self.timeout
        return deadline if self.deadline is None else min(deadline, self.deadline)

    def _exchange(self, frame: bytes, deadline: float) -> dict:
        sock, reused = self._connection(deadline)
        refusal = self._send_request(sock, frame, deadline, reused=reused)
        if refusal is _RESEND:
            # The daemon closed the kept connection before reading anything of ours (idle
            # timeout, restart): nothing was processed, so one resend on a fresh one is safe.
            sock = self._connect(deadline)
            refusal = self._send_request(sock, frame, deadline, reused=False)
        if isinstance(refusal, dict):
            return refusal
        # A plain request went out without msgpack (protocol.pack_plain); importing it now
        # overlaps the daemon's work instead of preceding it (milliseconds of the hook).
        preload_codec()
        try:
            reply = read_frame(sock, deadline)
        except TimeoutError:
            self._drop()
            raise DaemonTimeout(self._timeout_message()) from None
        except ProtocolError as exc:
            self._drop()
            raise SnapshotdError(PROTOCOL_ERROR, f"bad reply from {self.socket_path}: {exc}") \
                from None
        except OSError as exc:
            self._drop()
            raise DaemonUnavailable(self._unavailable_message(exc)) from None
        if reply is None:
            # The request may or may not have been processed: not retried (attempt_begin is not
            # idempotent); the caller sees the daemon as gone.
            self._drop()
            raise DaemonUnavailable(
                f"snapshotd at {self.socket_path} closed the connection without replying")
        return reply

    def _send_request(self, sock: _socket.socket, frame: bytes, deadline: float, *,
                      reused: bool) -> dict | object | None:
        """Send ``frame``: None once sent; ``_RESEND`` when a kept connection turned out to be
        closed; the daemon's reply when it refused the connection before reading it (``busy``,
        ``forbidden``: it answers at once and hangs up, so our send fails with EPIPE while its
        refusal waits in our receive buffer)."""
        try:
            _send(sock, frame, deadline)
            return None
        except TimeoutError:
            self._drop()
            raise DaemonTimeout(self._timeout_message()) from None
        except OSError as exc:
            if reused:
                self._drop()
                return _RESEND
            refusal = _pending_refusal(sock)
            self._drop()
            if refusal is not None:
                return refusal
            raise DaemonUnavailable(self._unavailable_message(exc)) from None

    def _connection(self, deadline: float) -> tuple[_socket.socket, bool]:
        sock = self._sock
        if sock is not None and self._pid == os.getpid() and _still_open(sock):
            return sock, True
        self._drop()
        return self._connect(deadline), False

    def _connect(self, deadline: float) -> _socket.socket:
        problem = socket_problem(self.socket_path)
        if problem is not None:
            raise SocketUntrusted(self._untrusted_message(problem))
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise DaemonTimeout(
                    f"could not connect to snapshotd at {self.socket_path} in time")
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            sock.settimeout(remaining)
            try:
                sock.connect(self.socket_path)
            except TimeoutError:
                sock.close()
                raise DaemonTimeout(
                    f"could not connect to snapshotd at {self.socket_path} in time") from None
            except BlockingIOError:
                # EAGAIN: the daemon's accept backlog is full. It is alive, just busy: wait a
                # little within the deadline instead of calling it unavailable.
                sock.close()
                time.sleep(min(0.005, max(0.0, deadline - time.monotonic())))
                continue
            except OSError as exc:
                sock.close()
                raise DaemonUnavailable(self._unavailable_message(exc)) from None
            try:
                uid = _peer_uid(sock)
            except OSError as exc:  # not expected on a connected AF_UNIX socket: do not trust
                sock.close()
                raise SocketUntrusted(self._untrusted_message(
                    f"the uid of the process listening on it cannot be read ({exc})")) from None
            if uid is not None and uid != os.getuid():
                sock.close()
                raise SocketUntrusted(self._untrusted_message(
                    f"the process listening on it runs as uid {uid}, not as you "
                    f"(uid {os.getuid()})"))
            self._sock = sock
            self._pid = os.getpid()
            return sock

    def _drop(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            # In a forked child this only closes the child's copy of the descriptor: the
            # parent's connection is untouched (no shutdown()).
            try:
                sock.close()
            except OSError:
                pass

    def _unavailable_message(self, exc: OSError) -> str:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        name = errno.errorcode.get(exc.errno or 0, "")
        suffix = f" ({name})" if name else ""
        return f"cannot reach snapshotd at {self.socket_path}: {reason}{suffix}"

    def _untrusted_message(self, problem: str) -> str:
        return (f"refusing to talk to snapshotd at {self.socket_path}: {problem}; another local "
                "user may be impersonating the daemon. Remove it (or have its owner remove it) "
                "and start snapshotd again, or point XDG_RUNTIME_DIR or SNAPSHOTD_SOCKET at a "
                "directory only you can write to")

    def _timeout_message(self) -> str:
        return f"snapshotd at {self.socket_path} did not reply in time"


_RESEND = object()


def _peer_uid(sock: _socket.socket) -> int | None:
    # The uid the listening socket was created under (Linux SO_PEERCRED: pid, uid, gid as
    # native ints); None where the platform cannot tell, and the stat checks stand alone.
    option = getattr(_socket, "SO_PEERCRED", None)
    if option is None:
        return None
    creds = sock.getsockopt(_socket.SOL_SOCKET, option, 12)
    return int.from_bytes(creds[4:8], sys.byteorder)


def _pending_refusal(sock: _socket.socket) -> dict | None:
    # Only what is already in the receive buffer: the peer has hung up, nothing more will come.
    try:
        reply = read_frame(sock, time.monotonic() + 0.05)
    except (OSError, ProtocolError):
        return None
    if reply is None or reply.get("ok") is not False:
        return None
    return reply


def _send(sock: _socket.socket, frame: bytes, deadline: float) -> None:
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        raise TimeoutError("deadline passed before sending")
    # Since Python 3.5 a socket timeout bounds the whole sendall, not each chunk.
    sock.settimeout(remaining)
    sock.sendall(frame)


def _still_open(sock: _socket.socket) -> bool:
    # A peek that would block means the peer is alive and silent, which is the only healthy
    # state between requests. EOF, an error, or unsolicited bytes mean: do not reuse.
    try:
        # Non-blocking mode first: with a timeout set, Python would wait for readability
        # (up to that timeout) before even trying the peek.
        sock.setblocking(False)
        sock.recv(1, _socket.MSG_PEEK | _socket.MSG_DONTWAIT)
    except BlockingIOError:
        return True
    except OSError:
        return False
    return False  # b"" (EOF) or stray bytes


def _result(reply: dict, request_id: int) -> dict:
    ok = reply.get("ok")
    error = reply.get("error")
    # A daemon that could not parse our frame cannot echo its id; its error is still the most
    # useful thing to report.
    if reply.get("id") != request_id and not (ok is False and reply.get("id") is None):
        raise SnapshotdError(
            PROTOCOL_ERROR, f"reply id {reply.get('id')!r} does not echo request id {request_id}")
    if ok is True:
        result = reply.get("result")
        if not isinstance(result, dict):
            raise SnapshotdError(PROTOCOL_ERROR, "ok reply without a result map")
        return result
    if ok is False:
        if not isinstance(error, dict):
            error = {}
        code = error.get("code")
        message = error.get("message")
        raise SnapshotdError(str(code) if code else "internal", str(message or ""), remote=True)
    raise SnapshotdError(PROTOCOL_ERROR, f"reply has no boolean 'ok' (got {ok!r})")


def _plain(value: Any) -> Any:
    # msgpack cannot pack Path objects; callers naturally pass them (cwd, worktree, to).
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _abs(path: str | os.PathLike[str]) -> str:
    # The daemon has its own cwd: a relative path must be resolved here, where it was meant.
    return os.path.abspath(os.fspath(path))


def _abs_paths(fields: dict[str, Any]) -> dict[str, Any]:
    out = dict(fields)
    for key in ("cwd", "to"):
        if out.get(key) is not None:
            out[key] = _abs(out[key])
    return out


def _umask() -> int | None:
    """This process's umask from ``/proc/self/status`` (``os.umask`` would change it a moment
    for every thread), or None where the kernel does not say."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8) & 0o777
    except (OSError, ValueError, IndexError):
        pass
    return None
