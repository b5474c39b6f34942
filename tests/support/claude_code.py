"""The real Claude Code CLI against a scripted model: a fake Anthropic Messages API on
127.0.0.1 that answers each turn of the agent's loop with the next scripted tool call.

``claude_binary()`` finds the CLI (``SNAPSHOTD_CLAUDE_CODE``, else ``claude`` on the PATH; the
tests skip without it: ``npm install --prefix DIR @anthropic-ai/claude-code@2.1.197`` and set
``SNAPSHOTD_CLAUDE_CODE=DIR/node_modules/.bin/claude``). ``ScriptedModel`` serves the script: a
request that offers tools gets step N (N: the tool results in its conversation so far), each
step ``(tool name, input)`` or a callable run first (what another session does between two tool
calls: Claude Code runs its hooks before it asks the model again); every other request (a title,
a quota check) gets a short text. ``run_claude`` runs one ``-p`` prompt with the repository's
plugin hooks (hooks/hooks.json) as its settings, a private HOME and no network but loopback.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
import uuid
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
Step = tuple[str, dict[str, Any]] | Callable[[], None]


def claude_binary() -> str | None:
    found = os.environ.get("SNAPSHOTD_CLAUDE_CODE") or shutil.which("claude")
    return found if found and os.access(found, os.X_OK) else None


class ScriptedModel:
    """The fake model server (a context manager); ``requests`` keeps every body it got."""

    def __init__(self, script: list[Step]) -> None:
        self.script = script
        self.requests: list[dict] = []
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._done: set[int] = set()
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> ScriptedModel:
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, body: dict) -> dict:
        """The assistant message for one request (see the module docstring)."""
        with self._lock:
            self.requests.append(body)
            if not body.get("tools"):
                return _message([{"type": "text", "text": "ok"}], "end_turn")
            results = sum(1 for m in body.get("messages", []) if isinstance(m.get("content"), list)
                          for b in m["content"] if b.get("type") == "tool_result")
            steps = [s for s in self.script if not callable(s)]
            # The actions between tool calls run once, before the step they precede.
            position = 0
            for n, step in enumerate(self.script):
                if callable(step):
                    if position == results and n not in self._done:
                        self._done.add(n)
                        step()
                    continue
                position += 1
            if results >= len(steps):
                return _message([{"type": "text", "text": "Done."}], "end_turn")
            name, tool_input = steps[results]
            block = {"type": "tool_use", "id": f"toolu_scripted_{results}_{uuid.uuid4().hex[:8]}",
                     "name": name, "input": tool_input}
            return _message([block], "tool_use")


def run_claude(binary: str, project: Path, home: Path, model: ScriptedModel, env: dict[str, str],
               prompt: str = "Do as the tools say.", timeout: float = 180.0
               ) -> subprocess.CompletedProcess:
    """One ``claude -p`` run in ``project`` with the plugin's hooks, against ``model``."""
    home.mkdir(parents=True, exist_ok=True)
    hooks = json.loads((ROOT / "hooks" / "hooks.json").read_text())["hooks"]
    settings = home / "settings.json"
    settings.write_text(json.dumps({"hooks": hooks}))
    run_env = dict(env, HOME=str(home), ANTHROPIC_BASE_URL=model.url,
                   ANTHROPIC_API_KEY="sk-ant-fake-for-tests", DISABLE_AUTOUPDATER="1",
                   CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1", DISABLE_TELEMETRY="1",
                   DISABLE_ERROR_REPORTING="1", NO_PROXY="127.0.0.1", IS_SANDBOX="1")
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy"):
        run_env.pop(name, None)
    return subprocess.run([binary, "-p", prompt, "--settings", str(settings),
                           "--allowedTools", "Read,Write,Edit,Bash",
                           "--permission-mode", "acceptEdits", "--model", "claude-sonnet-4-5"],
                          cwd=project, env=run_env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def _message(content: list[dict], stop: str) -> dict:
    return {"id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": content, "stop_reason": stop,
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 10}}


def _handler(model: ScriptedModel) -> type:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self._json({"data": [], "has_more": False})

        def do_HEAD(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            try:
                body = json.loads(self.rfile.read(length) or b"{}")
            except ValueError as exc:
                model.errors.append(f"unreadable body: {exc}")
                self._json({"type": "error", "error": {"type": "invalid_request_error",
                                                       "message": str(exc)}}, 400)
                return
            if "count_tokens" in self.path:
                self._json({"input_tokens": 100})
                return
            if not self.path.split("?")[0].endswith("/v1/messages"):
                self._json({})
                return
            message = model.answer(body)
            if body.get("stream"):
                self._stream(message)
            else:
                self._json(message)

        def _json(self, doc: dict, status: int = 200) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, message: dict) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.end_headers()
            events = [("message_start", {"type": "message_start", "message": dict(
                message, content=[], stop_reason=None)})]
            for n, block in enumerate(message["content"]):
                if block["type"] == "text":
                    events += [("content_block_start", {"type": "content_block_start", "index": n,
                                "content_block": {"type": "text", "text": ""}}),
                               ("content_block_delta", {"type": "content_block_delta", "index": n,
                                "delta": {"type": "text_delta", "text": block["text"]}})]
                else:
                    events += [("content_block_start", {"type": "content_block_start", "index": n,
                                "content_block": dict(block, input={})}),
                               ("content_block_delta", {"type": "content_block_delta", "index": n,
                                "delta": {"type": "input_json_delta",
                                          "partial_json": json.dumps(block["input"])}})]
                events.append(("content_block_stop", {"type": "content_block_stop", "index": n}))
            events += [("message_delta", {"type": "message_delta", "delta": {
                "stop_reason": message["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": 10}}), ("message_stop", {"type": "message_stop"})]
            for name, data in events:
                self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
            self.wfile.flush()

    return Handler
