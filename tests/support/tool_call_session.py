"""A session whose long shell tool calls write while they run (issue 43, "No tool call is
invisible"), through the real ``snapshot-hook`` and daemon, in Claude Code's payload shapes:

- ``t1``: a Write of ``a.txt`` (its own tier-1 checkpoint, seq 0);
- ``t2``: a Bash call that writes ``b.txt``, runs on, writes ``c.txt``: the watcher takes a
  tier-2 checkpoint after each write (``flush``: no settle window to wait for), then its
  PostToolUse arrives and deduplicates onto the second one;
- ``t3``: a Bash call that writes ``z.txt`` and exits 3 (PostToolUseFailure), captured by the
  watcher first, so its failure deduplicates too.

Each call's start event (PreToolUse) comes first, so the daemon makes the watcher's checkpoints
the running call's ("in-flight"); with ``start=False`` none is sent and the daemon infers the
owner at the call's end ("inferred").
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import Daemon, Env, run_hook

SESSION = "5e55f00d-0000-4000-8000-00000000b0b0"
RUN = f"claude-{SESSION}"
T1, T2, T3 = "toolu_fake_write_t1", "toolu_fake_bash_t2", "toolu_fake_fail_t3"
T2_COMMAND = "echo two > b.txt; sleep 1.2; echo three > c.txt"
T3_COMMAND = "echo z > z.txt; exit 3"


@dataclass
class Session:
    env: Env
    wt: Path
    run: str = RUN
    # seq of each tier-2 checkpoint, by the tool call that was running
    tier2: dict[str, list[int]] = field(default_factory=dict)


def payload(wt: Path, event: str, tool: str, tool_input: dict, tool_use_id: str,
            **extra: object) -> dict:
    return {"session_id": SESSION, "transcript_path": str(wt / ".t.jsonl"), "cwd": str(wt),
            "hook_event_name": event, "tool_name": tool, "tool_input": tool_input,
            "tool_use_id": tool_use_id, **extra}


def hook(env: Env, wt: Path, body: dict) -> None:
    result = run_hook(env, body, CLAUDE_PROJECT_DIR=str(wt))
    assert (result.returncode, result.stderr) == (0, b""), result


def cli(env: Env, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, check=check)


def cli_json(env: Env, *args: str) -> dict:
    return json.loads(cli(env, *args, "--json").stdout)


def run_session(env: Env, daemon: Daemon, wt: Path, *, start: bool = True,
                b_text: str = "two\n") -> Session:
    """Replay t1, t2 and t3 against ``daemon`` (settle windows longer than the test: tier-2
    captures happen on ``flush`` only); t2 writes ``b_text`` into ``b.txt``."""
    s = Session(env, wt)
    (wt / "a.txt").write_text("one\n")
    hook(env, wt, payload(wt, "PostToolUse", "Write", {"file_path": str(wt / "a.txt"),
                                                        "content": "one\n"}, T1,
                          tool_response={"type": "create", "filePath": str(wt / "a.txt")}))
    with daemon.client() as c:
        for call, writes in ((T2, [("b.txt", b_text), ("c.txt", "three\n")]),
                             (T3, [("z.txt", "z\n")])):
            command = T2_COMMAND if call == T2 else T3_COMMAND
            if start:
                hook(env, wt, payload(wt, "PreToolUse", "Bash", {"command": command}, call))
            for name, text in writes:
                (wt / name).write_text(text)
                before = len(c.list(RUN)["checkpoints"])
                c.flush(str(wt))
                rows = c.list(RUN)["checkpoints"]
                assert len(rows) == before + 1 and rows[-1]["tier"] == 2, rows
                s.tier2.setdefault(call, []).append(rows[-1]["seq"])
            if call == T2:
                hook(env, wt, payload(wt, "PostToolUse", "Bash", {"command": T2_COMMAND,
                                                                   "description": "long"}, T2,
                                      tool_response={"stdout": "", "stderr": "",
                                                     "interrupted": False}))
            else:
                hook(env, wt, payload(wt, "PostToolUseFailure", "Bash",
                                      {"command": T3_COMMAND, "description": "fail"}, T3,
                                      error="Exit code 3", is_interrupt=False))
    return s


def unique_id() -> str:
    return uuid.uuid4().hex[:8]
