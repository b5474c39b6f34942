"""``python -m bench.agent_payloads``: capture real hook payloads from agent CLIs.

Owns the fixtures under ``tests/fixtures/<agent>/`` that are marked "captured" in
tests/fixtures/README.md: it installs an agent CLI from npm into a temporary directory (never
globally), points it at a fake OpenAI-compatible model server on 127.0.0.1 that answers with
scripted tool calls (a file write, a shell command, a shell command that fails), registers a
recorder as the agent's hook for every event the shipped config registers, runs one prompt
non-interactively, and writes what the recorder received, with the temporary paths replaced by
``<harness>``: the after-tool payloads to ``post-tool-use.ndjson``, the session's lifecycle events
(those ``snapshot-hook`` reads as such) to ``session-lifecycle.ndjson``.

Promises:
- network only to loopback: the model server listens on 127.0.0.1, the agent's base URL points
  there (Copilot CLI in its offline mode), and the agent runs with a private ``HOME``; npm is
  used only to install the CLI;
- the agent runs with the config shipped in contrib/<agent>/, only its ``snapshot-hook`` turned
  into the recorder, so a capture also checks that config;
- bounded: every agent run has a timeout (``--timeout``, default 180 s) and the server stops
  with the run;
- a CLI that cannot be installed or run, or that fires no hook, is reported and its fixture left
  as it was (exit status 1 when any agent asked for failed).

Usage: ``python -m bench.agent_payloads [--agents qwen,copilot,cline] [--out tests/fixtures]
[--npm-dir DIR] [--keep]``. To prove the runs use no network but loopback, install first
(``--npm-dir``), then run it as root in a network namespace of its own:
``unshare -n sh -c 'ip link set lo up; exec python -m bench.agent_payloads --npm-dir DIR'``.
OpenCode (``opencode-ai`` 1.18.33) is not here: started offline, it stopped after loading its
configuration and never called the model.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# The npm package and version each agent is captured from.
PACKAGES = {"qwen": ("@qwen-code/qwen-code", "0.24.4"), "copilot": ("@github/copilot", "1.0.102"),
            "cline": ("cline", "3.0.65")}
BINARIES = {"@qwen-code/qwen-code": "qwen", "@github/copilot": "copilot", "cline": "cline"}
PROMPT = "Create the files as instructed by the tools."
HARNESS = "<harness>"
CONTRIB = Path(__file__).resolve().parent.parent / "contrib"
# The recorder the agents run as their hook: appends its stdin, one JSON document a line.
RECORDER = """#!/usr/bin/env python3
import json, os, sys
data = sys.stdin.read()
try:
    line = json.dumps(json.loads(data), separators=(",", ":"))
except ValueError:
    line = json.dumps({"unparsed": data})
with open(os.environ["SNAPSHOTD_CAPTURE_OUT"], "a") as f:
    f.write(line + "\\n")
"""


def main(argv: list[str] | None = None) -> int:
    """Capture each agent asked for; 0 when every one fired its hooks."""
    parser = argparse.ArgumentParser(prog="python -m bench.agent_payloads")
    parser.add_argument("--agents", default=",".join(PACKAGES))
    parser.add_argument("--out", default=str(Path(__file__).resolve().parent.parent / "tests"
                                              / "fixtures"))
    parser.add_argument("--timeout", type=float, default=180.0)
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--npm-dir", help="install (or reuse) the CLIs under DIR/<agent>")
    args = parser.parse_args(argv)
    failed = []
    for agent in [a for a in args.agents.split(",") if a]:
        root = Path(tempfile.mkdtemp(prefix=f"agentcap-{agent}-"))
        try:
            npm = Path(args.npm_dir) / agent if args.npm_dir else root / "npm"
            payloads, version = capture(agent, root, npm, timeout=args.timeout)
            lifecycle = [p for p in payloads if is_lifecycle(p)]
            tools = [p for p in payloads if not is_lifecycle(p)]
            if not tools:
                raise RuntimeError("the agent fired no after-tool hook")
            for name, chosen in (("post-tool-use", tools), ("session-lifecycle", lifecycle)):
                if not chosen:
                    continue
                target = Path(args.out) / agent / f"{name}.ndjson"
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text("".join(_scrub(p, root) + "\n" for p in chosen))
                print(f"{agent} {version}: {len(chosen)} {name} payloads -> {target}")
        except Exception as exc:  # noqa: BLE001 - reported, and the exit status says so
            failed.append(agent)
            print(f"{agent}: not captured: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
            else:
                print(f"kept {root}", file=sys.stderr)
    return 1 if failed else 0


def capture(agent: str, root: Path, npm: Path, *,
            timeout: float) -> tuple[list[dict[str, Any]], str]:
    """Install ``agent``'s CLI under ``root``, run it against the fake model, return the hook
    payloads it sent and the CLI's version."""
    package, version = PACKAGES[agent]
    binary = install(package, version, npm)
    home, project = root / "home", root / "proj"
    home.mkdir()
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    recorder = root / "record.py"
    recorder.write_text(RECORDER)
    recorder.chmod(0o755)
    out = root / "payloads.ndjson"
    with FakeModel(script_for(project)) as model:
        env = _agent_env(home, out, model.base_url)
        argv = RUNNERS[agent](binary, home, project, recorder, env)
        try:
            proc = subprocess.run(argv, cwd=project, env=env, stdin=subprocess.DEVNULL,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            (root / "agent.log").write_text(f"{exc.stdout!r}\n---stderr---\n{exc.stderr!r}")
            raise
    (root / "agent.log").write_text(proc.stdout + "\n---stderr---\n" + proc.stderr)
    if not out.exists():
        tail = (proc.stdout + proc.stderr)[-2000:]
        raise RuntimeError(f"no hook payloads (exit {proc.returncode}); output ends: {tail}")
    payloads = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    return payloads, version


def is_lifecycle(payload: dict[str, Any]) -> bool:
    """Whether the hook reads ``payload`` as a session's lifecycle event (start, a prompt, a
    turn's end, end) rather than a tool call's."""
    from snapshotd_client.agents import normalize
    from snapshotd_client.hook import SESSION_EVENTS

    fields = normalize(payload) or payload
    return fields.get("hook_event_name") in SESSION_EVENTS


def install(package: str, version: str, prefix: Path) -> Path:
    """``npm install`` the package into ``prefix`` (not globally) unless that version is there;
    its executable's path."""
    binary = prefix / "node_modules" / ".bin" / BINARIES[package]
    manifest = prefix / "node_modules" / package / "package.json"
    if binary.exists() and manifest.exists() and json.loads(
            manifest.read_text()).get("version") == version:
        return binary
    prefix.mkdir(parents=True, exist_ok=True)
    subprocess.run(["npm", "install", "--prefix", str(prefix), "--no-audit", "--no-fund",
                    "--loglevel=error", f"{package}@{version}"], check=True, timeout=600,
                   stdout=subprocess.DEVNULL)
    return binary


def script_for(project: Path) -> list[tuple[str, dict[str, Any]]]:
    """The tool calls the fake model makes, in order, by kind: a write, a shell command, a shell
    command that writes a file and exits 3."""
    return [
        ("write", {"path": str(project / "hello.txt"), "content": "hello\n"}),
        ("shell", {"command": "echo from-shell > shell_out.txt"}),
        ("shell", {"command": "echo partial > failed.txt; exit 3"}),
    ]


# Per tool kind, the agent's tool names and how the arguments are spelled.
_WRITE_TOOLS = {
    "write_file": lambda a: {"file_path": a["path"], "content": a["content"]},
    "create": lambda a: {"path": a["path"], "file_text": a["content"]},
    "editor": lambda a: {"path": a["path"], "new_text": a["content"]},
}
_SHELL_TOOLS = {
    "run_shell_command": lambda a: {"command": a["command"], "description": "scripted"},
    "bash": lambda a: {"command": a["command"], "description": "scripted"},
    "run_commands": lambda a: {"commands": [a["command"]]},
}


class FakeModel:
    """An OpenAI-compatible chat-completions server on 127.0.0.1 that plays ``script``: the n-th
    request that carries n-1 tool results is answered with the n-th tool call, named as the
    request's own tool list names it; after the script, a plain "done"."""

    def __init__(self, script: list[tuple[str, dict[str, Any]]]) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.answer))
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeModel:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()

    def answer(self, body: dict[str, Any]) -> dict[str, Any]:
        """The assistant message for one chat-completions request."""
        self.requests.append(body)
        messages = body.get("messages") or []
        done = sum(1 for m in messages if m.get("role") == "tool")
        tools = {t.get("function", {}).get("name") for t in body.get("tools") or []}
        if done >= len(self.script) or not tools:
            return {"role": "assistant", "content": "done"}
        kind, args = self.script[done]
        table = _WRITE_TOOLS if kind == "write" else _SHELL_TOOLS
        name = next((n for n in table if n in tools), None)
        if name is None:
            return {"role": "assistant", "content": f"no {kind} tool among {sorted(tools)}"}
        call = {"id": f"call_{done}_{kind}", "type": "function",
                "function": {"name": name, "arguments": json.dumps(table[name](args))}}
        return {"role": "assistant", "content": None, "tool_calls": [call]}


def _handler(answer: Callable[[dict[str, Any]], dict[str, Any]]) -> type:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def do_GET(self) -> None:  # model listings
            self._json({"object": "list", "data": [{"id": "fake-model", "object": "model"}]})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"{}")
            if not self.path.rstrip("/").endswith("chat/completions"):
                self._json({"error": {"message": f"unsupported {self.path}"}}, status=404)
                return
            message = answer(body)
            if body.get("stream"):
                self._stream(message)
            else:
                reason = "tool_calls" if message.get("tool_calls") else "stop"
                self._json({"id": "cmpl-1", "object": "chat.completion", "created": 0,
                            "model": body.get("model", "fake-model"),
                            "choices": [{"index": 0, "message": message,
                                         "finish_reason": reason}],
                            "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                      "total_tokens": 2}})

        def _json(self, doc: dict[str, Any], status: int = 200) -> None:
            data = json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _stream(self, message: dict[str, Any]) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            delta: dict[str, Any] = {"role": "assistant"}
            if message.get("tool_calls"):
                delta["tool_calls"] = [dict(c, index=i)
                                       for i, c in enumerate(message["tool_calls"])]
                reason = "tool_calls"
            else:
                delta["content"] = message.get("content") or ""
                reason = "stop"
            for chunk in ({"delta": delta, "finish_reason": None},
                          {"delta": {}, "finish_reason": reason}):
                doc = {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 0,
                       "model": "fake-model", "choices": [dict(chunk, index=0)],
                       "usage": {"prompt_tokens": 1, "completion_tokens": 1,
                                 "total_tokens": 2}}
                self.wfile.write(f"data: {json.dumps(doc)}\n\n".encode())
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()

    return Handler


def _agent_env(home: Path, out: Path, base_url: str) -> dict[str, str]:
    keep = ("PATH", "LANG", "TERM", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               SNAPSHOTD_CAPTURE_OUT=str(out), NO_COLOR="1", CI="1",
               OPENAI_BASE_URL=base_url, OPENAI_API_KEY="fake-key", OPENAI_MODEL="fake-model",
               NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
    return env


def _run_qwen(binary: Path, home: Path, project: Path, recorder: Path,
              env: dict[str, str]) -> list[str]:
    # The shipped contrib/qwen/settings.json, its command pointed at the recorder.
    settings = _with_command(json.loads((CONTRIB / "qwen" / "settings.json").read_text()),
                             "command", str(recorder))
    settings.update({"security": {"auth": {"selectedType": "openai"}},
                     "model": {"name": "fake-model"},
                     "privacy": {"usageStatisticsEnabled": False}})
    (home / ".qwen").mkdir()
    (home / ".qwen" / "settings.json").write_text(json.dumps(settings, indent=2))
    return [str(binary), "--yolo", "--prompt", PROMPT]


def _run_copilot(binary: Path, home: Path, project: Path, recorder: Path,
                 env: dict[str, str]) -> list[str]:
    # The shipped contrib/copilot/snapshotd.json as .github/hooks/, pointed at the recorder.
    config = _with_command(json.loads((CONTRIB / "copilot" / "snapshotd.json").read_text()),
                           "bash", str(recorder))
    (project / ".github" / "hooks").mkdir(parents=True)
    (project / ".github" / "hooks" / "snapshotd.json").write_text(json.dumps(config, indent=2))
    # Offline mode with a local provider: no GitHub sign-in, telemetry or update check.
    # COPILOT_ALLOW_ALL=true also trusts the folder, which is what loads its hooks.
    env.update(COPILOT_OFFLINE="true", COPILOT_PROVIDER_BASE_URL=env["OPENAI_BASE_URL"],
               COPILOT_PROVIDER_TYPE="openai", COPILOT_PROVIDER_API_KEY="fake-key",
               COPILOT_MODEL="fake-model", COPILOT_ALLOW_ALL="true",
               COPILOT_AUTO_UPDATE="false", COPILOT_HOME=str(home / ".copilot"))
    return [str(binary), "--allow-all-tools", "--no-auto-update", "--prompt", PROMPT]


def _run_cline(binary: Path, home: Path, project: Path, recorder: Path,
               env: dict[str, str]) -> list[str]:
    # The shipped contrib/cline/ hook files, as they are: each runs `snapshot-hook` from PATH,
    # which here is the recorder.
    hooks, shims = home / ".cline" / "hooks", home / "bin"
    hooks.mkdir(parents=True)
    shims.mkdir()
    for script in (CONTRIB / "cline").iterdir():
        shutil.copy(script, hooks / script.name)
    (shims / "snapshot-hook").symlink_to(recorder)
    env["PATH"] = f"{shims}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run([str(binary), "auth", "-p", "openai", "-k", "fake-key", "-m", "fake-model",
                    "-b", env["OPENAI_BASE_URL"], "--config", str(home / ".cline")],
                   cwd=project, env=env, check=True, timeout=60, capture_output=True)
    return [str(binary), "--auto-approve", "true", "-P", "openai", "-m", "fake-model",
            "--config", str(home / ".cline"), "--hooks-dir", str(hooks), "-t", "120", PROMPT]


RUNNERS: dict[str, Callable[..., list[str]]] = {"qwen": _run_qwen, "copilot": _run_copilot,
                                                "cline": _run_cline}


def _with_command(doc: Any, key: str, command: str) -> Any:
    """``doc`` with every ``key: "snapshot-hook"`` replaced by ``command``."""
    if isinstance(doc, dict):
        return {k: command if k == key and v == "snapshot-hook" else _with_command(v, key, command)
                for k, v in doc.items()}
    if isinstance(doc, list):
        return [_with_command(v, key, command) for v in doc]
    return doc


def _scrub(payload: dict[str, Any], root: Path) -> str:
    # The temporary directory (and its resolved form) becomes <harness>, as in the other
    # captured fixtures, so the files do not depend on where the capture ran.
    text = json.dumps(payload, separators=(",", ":"), ensure_ascii=False)
    for prefix in {str(root.resolve()), str(root)}:
        text = text.replace(prefix, HARNESS)
        # Qwen Code also names the project by its path, every other character as "-".
        text = text.replace(re.sub(r"[^A-Za-z0-9]", "-", prefix), "-harness")
    return text


if __name__ == "__main__":
    sys.exit(main())
