"""A daemon stand-in and the hook run as the agent runs it, for the tests of the client side
(``snapshot-hook``, ``Client``, ``wrap``) that need exact replies or no daemon at all.

``FakeDaemon`` listens on a real Unix socket in a thread and speaks the real framing; ``ok`` and
``fail`` are its usual answers. ``run_hook_timed`` runs the real ``snapshot-hook`` entry point
with raw stdin and says how long it took; ``hook_stdin`` is a Claude Code PostToolUse payload
for it. The fixtures these tests share (``short_dir``, ``hook_env``) are in ``conftest.py``."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

from snapshotd_client.protocol import encode_frame, read_frame

HOOK = [sys.executable, "-c", "from snapshotd_client.hook import main; main()"]
SESSION = "121f3d32-3ec5-4127-ae30-79f10d3c7cee"


def hook_stdin(cwd: str, tool_use_id: str = "toolu_test_1") -> bytes:
    """A Claude Code PostToolUse payload of session ``SESSION``, as the hook reads it."""
    return json.dumps({
        "session_id": SESSION, "cwd": cwd, "hook_event_name": "PostToolUse",
        "tool_name": "Write", "tool_input": {"file_path": f"{cwd}/hello.txt", "content": "hi\n"},
        "tool_response": {"type": "create"}, "tool_use_id": tool_use_id,
    }).encode()


# A budget (the maximum, 120 s) far past ``run_hook_timed``'s 20 s guard: a hook that waited on
# its budget instead of giving up at once fails with ``TimeoutExpired``, with no bound on how
# long a Python start-up takes on a loaded machine.
WAIT_WOULD_HANG = {"SNAPSHOTD_HOOK_TIMEOUT_MS": "120000"}


def run_hook_timed(env: dict, stdin: bytes,
                   timeout: float = 20) -> tuple[subprocess.CompletedProcess, float]:
    """Run the real ``snapshot-hook`` with ``stdin``: its result and how long it took (s)."""
    start = time.monotonic()
    proc = subprocess.run(HOOK, input=stdin, env=env, capture_output=True, timeout=timeout)
    return proc, time.monotonic() - start


def assert_silent_success(proc: subprocess.CompletedProcess) -> None:
    """What the agent must see from the hook whatever happened: exit 0, nothing printed."""
    assert proc.returncode == 0
    assert proc.stdout == b""
    assert proc.stderr == b""


def ok(result: dict | None = None) -> Callable[[dict], dict]:
    """A ``FakeDaemon`` answer: success with ``result`` (default ``{"seq": 0}``)."""
    return lambda req: {"id": req["id"], "ok": True, "result": result or {"seq": 0}}


def fail(code: str) -> Callable[[dict], dict]:
    """A ``FakeDaemon`` answer: the error ``code``, with the message ``refused: <code>``."""
    return lambda req: {"id": req["id"], "ok": False,
                        "error": {"code": code, "message": f"refused: {code}"}}


class FakeDaemon:
    """A daemon stand-in in a thread: real listening socket, real frames.

    ``respond(request)`` returns the reply map, ``"silent"`` (read it, never answer) or
    ``"close"`` (close the connection without a reply).
    """

    def __init__(self, path: Path, respond: Callable[[dict], dict | str]) -> None:
        self.path = str(path)
        self.respond = respond
        self.requests: list[dict] = []
        self.connections = 0
        self._stop = threading.Event()
        self._conns: list[socket.socket] = []
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.path)
        self._listener.listen(16)
        self._listener.settimeout(0.05)
        self._threads = [threading.Thread(target=self._accept_loop, daemon=True)]
        self._threads[0].start()

    def hang_up(self) -> None:
        """Shut every connection it accepted down, the way an idle timeout or a restart between
        two calls does."""
        for conn in list(self._conns):
            conn.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        for conn in self._conns:
            conn.close()
        self._listener.close()
        Path(self.path).unlink(missing_ok=True)

    def __enter__(self) -> FakeDaemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.connections += 1
            self._conns.append(conn)
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                request = read_frame(conn, deadline=time.monotonic() + 0.1)
            except TimeoutError:
                continue
            except OSError:
                return
            if request is None:
                return
            self.requests.append(request)
            reply = self.respond(request)
            if reply == "silent":
                continue
            if reply == "close":
                conn.close()
                return
            conn.sendall(encode_frame(reply))
