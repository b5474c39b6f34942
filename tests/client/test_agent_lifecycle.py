"""The session lifecycle of the agents beyond Claude Code, Codex and Gemini CLI, end to end.

Each agent's lifecycle payloads (tests/fixtures/<agent>/session-lifecycle.ndjson: captured from
the real CLI or written from its documentation, tests/fixtures/README.md says which) and one of its
tool calls go through the real ``snapshot-hook``, a process per event run in the project as the
agents run it, to one real daemon (one for the module): start registers the session's attempt
with an owner process, a tool call checkpoints into the same run, a restore while it works is
refused, a turn's end makes it idle, the end finishes it, and the finished or idle attempt
restores without ``--force``. An agent with no end event (Kiro) is ``abandoned`` once its
process is gone. The OpenCode and Amp plugins, run under node, forward the lifecycle events the
parser reads (each agent module's ``LIFECYCLE``, ``snapshotd_client.agents``); the OpenCode
plugin, running the real hook, owns the sessions it starts, abandoned when its process is killed.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshotd_client.agents import AGENTS, NAMES, context_shape, lifecycle, normalize
from snapshotd_client.hook import SESSION_EVENTS
from tests.conftest import REPO, Daemon, Env, load_payloads, make_git_worktree
from tests.support.helpers import run_plugin

pytestmark = pytest.mark.one_ledger(
    "the agents' events mapped to session states (test_sessions.py runs the states on each "
    "backend)")

H = "<harness>/proj"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")
# Per agent: its first after-tool payload (a write of hello.txt), and where that payload names
# its session (a path of keys; Kiro names none: its session is derived from the directory).
TOOL_CALL = {
    "copilot": ("copilot/post-tool-use.ndjson", ("sessionId",)),
    "qwen": ("qwen/post-tool-use.ndjson", ("session_id",)),
    "cline": ("cline/post-tool-use.ndjson", ("taskId",)),
    "opencode": ("opencode/tool-execute-after.ndjson", ("input", "sessionID")),
    "cursor": ("cursor/post-tool-use.ndjson", ("conversation_id",)),
    "goose": ("goose/post-tool-use.ndjson", ("session_id",)),
    "amp": ("amp/tool-result.ndjson", ("event", "thread", "id")),
    "kiro": ("kiro/post-tool-use.ndjson", ()),
}
# What each agent's lifecycle payloads tell the daemon, in fixture order, written out by hand from
# its documentation (the captured runs: Qwen Code fires UserPromptSubmit again before each model
# request after a tool's result; Cline CLI's one-shot run fired only agent_start and agent_end).
EXPECTED_EVENTS = {
    "copilot": ["start", "working", "idle", "end"],
    "qwen": ["start", "working", "working", "working", "working", "idle", "end"],
    "cline": ["start", "idle", "end"],
    "opencode": ["start", "working", "idle", "end"],
    "cursor": ["start", "working", "idle", "end"],
    "goose": ["start", "working", "idle", "end"],
    "amp": ["start", "working", "idle"],
    "kiro": ["start", "working", "idle"],
}
# Cline's VS Code extension: TaskStart, UserPromptSubmit, TaskComplete, TaskResume, TaskCancel.
CLINE_VSCODE_EVENTS = ["start", "working", "idle", "start", "idle"]
# End events the captured run did not fire (a one-shot `--prompt` run ends without them), written
# from the agent's documentation or source (tests/fixtures/README.md).
END_FROM_DOCS = {"qwen": "qwen/session-end.ndjson", "cline": "cline/session-end.ndjson"}


def localized(payload: dict, worktree: Path) -> dict:
    return json.loads(json.dumps(payload).replace(H, str(worktree)))


def lifecycle_payloads(agent: str, worktree: Path) -> list[dict]:
    payloads = load_payloads(f"{agent}/session-lifecycle.ndjson")
    if agent in END_FROM_DOCS:
        payloads += load_payloads(END_FROM_DOCS[agent])
    return [localized(p, worktree) for p in payloads]


def tool_call(agent: str, worktree: Path, session: str) -> dict:
    relative, path = TOOL_CALL[agent]
    payload = localized(load_payloads(relative)[0], worktree)
    if path:
        holder = payload
        for key in path[:-1]:
            holder = holder[key]
        holder[path[-1]] = session
    return payload


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Env, Daemon]]:
    """One daemon for the module (SQLite ledger): each test works in its own worktree."""
    env = Env(tmp_path_factory.mktemp("agentlife"))
    daemon = Daemon(env, {"SNAPSHOTD_SETTLE_MS": "60000", "SNAPSHOTD_MAX_WAIT_MS": "120000"})
    daemon.start()
    yield env, daemon
    daemon.stop()
    shutil.rmtree(env.sockdir, ignore_errors=True)


def hook(env: Env, worktree: Path, payload: dict) -> bytes:
    """The hook as an agent runs it (in the project); exit 0 and nothing on stderr. Its stdout."""
    proc = subprocess.run(
        [sys.executable, "-c", "from snapshotd_client.hook import main; main()"],
        input=json.dumps(payload).encode(), env=env.environ(), cwd=worktree,
        capture_output=True, timeout=30)
    assert (proc.returncode, proc.stderr) == (0, b"")
    return proc.stdout


def cli(env: Env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120)


def attempts(env: Env, run_id: str) -> list[dict]:
    return env.ledger_query("SELECT * FROM attempts WHERE run_id = ? ORDER BY attempt", (run_id,))


def context_of(agent: str, stdout: bytes) -> str | None:
    """The context line a session start printed, read as ``agent`` reads it."""
    shape = context_shape(agent)
    if shape is None:
        assert stdout == b""
        return None
    if shape == "text":
        return stdout.decode()
    doc = json.loads(stdout)
    if shape == "copilot":
        return doc["additionalContext"]
    if shape == "cursor":
        return doc["additional_context"]
    assert doc["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    return doc["hookSpecificOutput"]["additionalContext"]


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_lifecycle_payloads_map_to_the_hooks_events(agent: str) -> None:
    extra = ["cline/session-lifecycle-vscode.ndjson"] if agent == "cline" else []
    relatives = [f"{agent}/session-lifecycle.ndjson", *extra]
    if agent in END_FROM_DOCS:
        relatives.append(END_FROM_DOCS[agent])
    told = []
    for payload in [p for rel in relatives for p in load_payloads(rel)]:
        fields = normalize(payload)
        assert fields is not None and fields["snapshotd_agent"] == agent
        assert fields["session_id"] and fields["tool_use_id"] is None
        told.append(SESSION_EVENTS[fields["hook_event_name"]])
    expected = EXPECTED_EVENTS[agent][:-1] if agent in END_FROM_DOCS else EXPECTED_EVENTS[agent]
    expected = expected + (CLINE_VSCODE_EVENTS if agent == "cline" else [])
    assert told == expected + (["end"] if agent in END_FROM_DOCS else [])
    # Every kind of event the agent has is in its payloads (Amp and Kiro have no end event).
    assert set(told) == {SESSION_EVENTS[e] for e in lifecycle(agent).values()}
    tool = normalize(tool_call(agent, Path("/p"), fields["session_id"]))
    assert tool is not None and tool["hook_event_name"] == "PostToolUse"


@pytest.mark.parametrize("agent", NAMES)
def test_every_agent_module_names_the_hooks_events_and_a_context_shape(agent: str) -> None:
    # Each agent's module (snapshotd_client.agents.<agent>) renames its lifecycle events only to
    # names the hook reads, and says how the agent reads a start's context.
    table = lifecycle(agent)
    assert table and set(table.values()) <= set(SESSION_EVENTS)
    assert context_shape(agent) in ("claude", "copilot", "cursor", "text", None)


def test_an_agent_without_a_module_gets_claude_codes_shape_and_loads_nothing() -> None:
    # A plugin's snapshotd_agent may name anything: no module outside the registry is loaded.
    for name in ("other", "common", "os", "__init__", "", ["claude"]):
        assert context_shape(name) == "claude" and lifecycle(name) == {}


def test_copilot_events_are_told_apart_by_their_fields() -> None:
    start, prompt, stop, end = load_payloads("copilot/session-lifecycle.ndjson")
    assert [normalize(p)["hook_event_name"] for p in (start, prompt, stop, end)] == [
        "SessionStart", "UserPromptSubmit", "Stop", "SessionEnd"]
    # An event contrib/copilot does not register, and odd fields, name no lifecycle event.
    assert normalize({"sessionId": "s", "cwd": "/p", "timestamp": 1})["hook_event_name"] is None
    assert normalize({"sessionId": 7, "prompt": None})["session_id"]


@pytest.mark.parametrize("agent", sorted(AGENTS))
def test_start_tool_call_idle_end(agent: str, world: tuple[Env, Daemon], tmp_path: Path) -> None:
    env, _ = world
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "hello.txt").write_text("before the session\n")
    payloads = lifecycle_payloads(agent, wt)
    session = normalize(payloads[0])["session_id"]
    run_id = f"{agent}-{session}"
    events = [SESSION_EVENTS[normalize(p)["hook_event_name"]] for p in payloads]
    assert events == EXPECTED_EVENTS[agent]

    out = hook(env, wt, payloads[0])
    context = context_of(agent, out)
    assert context is None or run_id in context
    [row] = attempts(env, run_id)
    assert (row["state"], row["idle_since"]) == ("active", None)
    assert row["owner_pid"] is not None  # the hook's parent: this test, the "agent"
    # The tool call lands in the session's run, and the session works: restore refuses.
    (wt / "hello.txt").write_text("written by the tool call\n")
    assert hook(env, wt, tool_call(agent, wt, session)) == b""
    refused = cli(env, "restore", run_id, "--node", "session", "--seq", "0")
    assert refused.returncode != 0 and "working agent" in refused.stderr
    assert (wt / "hello.txt").read_text() == "written by the tool call\n"

    for payload, event in zip(payloads[1:], events[1:], strict=True):
        assert hook(env, wt, payload) == b""
        row = attempts(env, run_id)[-1]
        if event == "working":
            assert (row["state"], row["idle_since"]) == ("active", None)
        elif event == "idle":
            assert row["state"] == "active" and row["idle_since"] is not None
        else:
            assert row["state"] == "finished"
    final = "finished" if "end" in events else "active"
    assert [a["state"] for a in attempts(env, run_id)] == [final]
    listing = json.loads(cli(env, "snapshots", run_id, "--json").stdout)
    assert [c["label"] for c in listing["checkpoints"]][0] == "session start"
    assert len(listing["checkpoints"]) == 2  # the baseline and the tool call's
    restored = cli(env, "restore", run_id, "--node", "session", "--seq", "0")
    assert restored.returncode == 0, restored.stderr
    assert (wt / "hello.txt").read_text() == "before the session\n"
    assert [g for g in env.read_gaps() if g.get("run_id") == run_id] == []


def test_kiro_session_is_abandoned_when_its_agent_dies(world: tuple[Env, Daemon],
                                                       tmp_path: Path) -> None:
    # Kiro has no end event: its process going away is what ends the session. The "agent" runs
    # the hook through a shell, as Kiro does, then becomes `sleep` (same pid).
    env, _ = world
    wt = make_git_worktree(tmp_path / "proj")
    spawn, prompt, _ = lifecycle_payloads("kiro", wt)
    run_id = f"kiro-{normalize(spawn)['session_id']}"
    agent = textwrap.dedent("""
        import os, subprocess, sys
        hook = '"$0" -c "from snapshotd_client.hook import main; main()"; true'
        for line in sys.stdin.buffer.read().splitlines():
            subprocess.run(["sh", "-c", hook, sys.executable], input=line,
                           stdout=subprocess.DEVNULL, check=True)
        print("hooks done", flush=True)
        os.execvp("sleep", ["sleep", "300"])
    """)
    proc = subprocess.Popen([sys.executable, "-c", agent], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, env=env.environ(), cwd=wt)
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(b"\n".join(json.dumps(p).encode() for p in (spawn, prompt)))
        proc.stdin.close()
        # Both hooks have returned before the agent dies: a hook still running then would be an
        # orphan's, whose start names no owner (snapshotd.features.sessions.agent_process).
        assert proc.stdout.readline() == b"hooks done\n"
        [row] = attempts(env, run_id)
        assert (row["state"], row["owner_pid"]) == ("active", proc.pid)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 20
    while attempts(env, run_id)[-1]["state"] != "abandoned":
        assert time.monotonic() < deadline, attempts(env, run_id)
        time.sleep(0.2)


# -- the plugins forward the lifecycle ------------------------------------------------------------

OPENCODE_DRIVER = """
const { Snapshotd } = await import(process.argv[2]);
const hooks = await Snapshotd({ directory: "<harness>/proj", worktree: "<harness>/proj" });
const info = { id: "ses_7f3a9c", directory: "<harness>/proj", title: "t" };
await hooks.event({ event: { type: "session.created", properties: { info } } });
await hooks.event({ event: { type: "session.created",  // a subagent's: not forwarded
  properties: { info: { id: "ses_child", parentID: "ses_7f3a9c" } } } });
await hooks.event({ event: { type: "message.updated", properties: {} } });  // not a lifecycle one
await hooks["chat.message"]({ sessionID: "ses_7f3a9c", agent: "build" }, { message: {}, parts: [] });
await hooks.event({ event: { type: "session.idle", properties: { sessionID: "ses_7f3a9c" } } });
await hooks.event({ event: { type: "session.deleted", properties: { info } } });
"""

AMP_DRIVER = """
const plugin = (await import(process.argv[2])).default;
const handlers = {};
plugin({ on: (name, handler) => { handlers[name] = handler; } });
process.chdir(process.argv[3]);
const thread = { id: "T-5e1f0a2b" };
await handlers["session.start"]({ thread }, { thread });
await handlers["agent.start"]({ message: "Create the files" }, { thread });  // thread from ctx
await handlers["agent.end"]({ thread }, { thread });
"""


@needs_node
def test_opencode_plugin_forwards_the_session_lifecycle(tmp_path: Path) -> None:
    sent = run_plugin(tmp_path, REPO / "contrib" / "opencode" / "snapshotd.js", OPENCODE_DRIVER)
    assert sent == load_payloads("opencode/session-lifecycle.ndjson")


@needs_node
def test_amp_plugin_forwards_the_thread_lifecycle(tmp_path: Path) -> None:
    # Node runs the plugin once its TypeScript annotations are taken out (Amp loads the .ts).
    source = (REPO / "contrib" / "amp" / "snapshotd.ts").read_text()
    stripped = re.sub(r"^import type .*\n", "", source, flags=re.M)
    stripped = stripped.replace("(amp: PluginAPI)", "(amp)").replace(
        " as Record<string, unknown>", "").replace("(payload: unknown): Promise<boolean>",
                                                   "(payload)")
    plugin = tmp_path / "snapshotd.mjs"
    plugin.write_text(stripped)
    cwd = tmp_path / "proj"
    cwd.mkdir()
    sent = run_plugin(tmp_path, plugin, AMP_DRIVER, str(cwd))
    for payload in sent:  # the plugin's real cwd, as <harness>/proj in the fixture
        assert payload["cwd"] == str(cwd)
        payload["cwd"] = H
    assert sent == load_payloads("amp/session-lifecycle.ndjson")


OPENCODE_SESSION_DRIVER = """
import fs from "node:fs";
const { Snapshotd } = await import(process.argv[2]);
const wt = process.argv[3];
const hooks = await Snapshotd({ directory: wt, worktree: wt });
const created = (id) => hooks.event({ event: { type: "session.created", properties: { info: { id } } } });
await created("ses_life_a");
await hooks["chat.message"]({ sessionID: "ses_life_a", agent: "build" }, { message: {}, parts: [] });
const input = { tool: "write", sessionID: "ses_life_a", callID: "call_life_a" };
await hooks["tool.execute.before"](input, { args: { filePath: wt + "/hello.txt", content: "x" } });
fs.writeFileSync(wt + "/hello.txt", "written by the tool call\\n");
await hooks["tool.execute.after"](input, { title: "write", output: "", metadata: {} });
await hooks.event({ event: { type: "session.idle", properties: { sessionID: "ses_life_a" } } });
await hooks.event({ event: { type: "session.deleted", properties: { info: { id: "ses_life_a" } } } });
await created("ses_life_b");
console.log("ready");
setInterval(() => {}, 1000);
"""


@needs_node
def test_opencode_plugin_runs_the_real_hook_and_owns_its_sessions(
        world: tuple[Env, Daemon], tmp_path: Path) -> None:
    # The shipped plugin under node, standing in for OpenCode's process: it runs the real
    # snapshot-hook, whose parent it is, so it owns the sessions it starts.
    env, _ = world
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "hello.txt").write_text("before the session\n")
    (tmp_path / "driver.mjs").write_text(OPENCODE_SESSION_DRIVER)
    assert NODE is not None
    hook_script = Path(sys.executable).parent / "snapshot-hook"
    proc = subprocess.Popen(
        [NODE, str(tmp_path / "driver.mjs"), str(REPO / "contrib" / "opencode" / "snapshotd.js"),
         str(wt)], env=env.environ(SNAPSHOT_HOOK=str(hook_script)), stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == b"ready\n"
        [first] = attempts(env, "opencode-ses_life_a")
        assert (first["state"], first["owner_pid"]) == ("finished", proc.pid)
        listing = json.loads(cli(env, "snapshots", "opencode-ses_life_a", "--json").stdout)
        assert [c["tool_use_id"] for c in listing["checkpoints"]] == [None, "call_life_a"]
        [second] = attempts(env, "opencode-ses_life_b")
        assert (second["state"], second["owner_pid"]) == ("active", proc.pid)
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 20
    while attempts(env, "opencode-ses_life_b")[-1]["state"] != "abandoned":
        assert time.monotonic() < deadline, attempts(env, "opencode-ses_life_b")
        time.sleep(0.2)
    restored = cli(env, "restore", "opencode-ses_life_a", "--node", "session", "--seq", "0")
    assert restored.returncode == 0, restored.stderr
    assert (wt / "hello.txt").read_text() == "before the session\n"

