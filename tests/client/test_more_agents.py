"""The agents of ``snapshotd_client.agents`` (Copilot CLI, Qwen Code, Cline, OpenCode, Cursor,
Goose, Amp, Kiro): their payloads (tests/fixtures/<agent>/, captured or from their docs) parse to
the right agent, run, tool call id, cwd and label; the real ``snapshot-hook`` turns each one into
a checkpoint of run ``<agent>-<session>``; the payloads of Claude Code, Codex and Gemini are left
to the hook's own reading."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from snapshotd_client.agents import AGENTS, detect, normalize
from snapshotd_client.hook import detect_agent, label_for, snapshot_fields
from tests.conftest import Daemon, Env, fixtures_dir, load_payloads, make_git_worktree, run_hook

pytestmark = pytest.mark.one_ledger("hook payload parsing of each agent")

H = "<harness>/proj"
FILES = {
    "copilot": ["copilot/post-tool-use.ndjson"],
    "qwen": ["qwen/post-tool-use.ndjson"],
    "cline": ["cline/post-tool-use.ndjson", "cline/post-tool-use-vscode.ndjson"],
    "opencode": ["opencode/tool-execute-after.ndjson"],
    "cursor": ["cursor/post-tool-use.ndjson"],
    "goose": ["goose/post-tool-use.ndjson"],
    "amp": ["amp/tool-result.ndjson"],
    "kiro": ["kiro/post-tool-use.ndjson"],
}
KIRO_SESSION = "cwd-" + hashlib.sha256(H.encode()).hexdigest()[:12]
# Per agent, per payload in fixture order: (session, tool call id, label), written out by hand
# from each agent's contract. A derived id is given as "derived" (checked by shape below).
EXPECTED = {
    "copilot": [("@sessionId", "derived", f"create {H}/hello.txt"),
                (None, "derived", "bash echo from-shell > shell_out.txt"),
                (None, "derived", "bash echo partial > failed.txt; exit 3")],
    "qwen": [("@session_id", "toolu_", f"write_file {H}/hello.txt"),
             (None, "toolu_", "run_shell_command echo from-shell > shell_out.txt"),
             (None, "toolu_", "run_shell_command echo partial > failed.txt; exit 3")],
    "cline": [("@taskId", "call_0_write", f"editor {H}/hello.txt"),
              (None, "call_1_shell", "run_commands echo from-shell > shell_out.txt"),
              (None, "call_2_shell", "run_commands echo partial > failed.txt; exit 3"),
              ("1796124290000", "derived", "write_to_file notes.txt")],  # VS Code's hooks
    "opencode": [("ses_7f3a9c", "call_0_write", f"write {H}/hello.txt"),
                 ("ses_7f3a9c", "call_1_shell", "bash echo from-shell > shell_out.txt"),
                 ("ses_7f3a9c", "call_2_shell", "bash echo partial > failed.txt; exit 3")],
    "cursor": [("c0ffee00-1111-2222-3333-444455556666", "tool_0_write", f"Write {H}/hello.txt"),
               (None, "tool_1_shell", "Shell echo from-shell > shell_out.txt"),
               (None, "tool_2_shell", "Shell echo partial > failed.txt; exit 3"),
               (None, "derived", f"afterFileEdit {H}/hello.txt")],
    "goose": [("20261201_7", "call_0_write", f"developer__text_editor {H}/hello.txt"),
              (None, "call_1_shell", "developer__shell echo from-shell > shell_out.txt"),
              (None, "call_2_shell", "developer__shell echo partial > failed.txt; exit 3"),
              (None, None, f"AfterFileEdit {H}/hello.txt")],
    "amp": [("T-5e1f0a2b", "toolu_0_write", f"create_file {H}/hello.txt"),
            (None, "toolu_1_shell", "Bash echo from-shell > shell_out.txt"),
            (None, "toolu_2_shell", "Bash echo partial > failed.txt; exit 3")],
    "kiro": [(KIRO_SESSION, None, f"fs_write {H}/hello.txt"),
             (KIRO_SESSION, None, "execute_bash echo from-shell > shell_out.txt"),
             (KIRO_SESSION, None, "execute_bash echo partial > failed.txt; exit 3")],
}
def _load(agent: str) -> list[dict]:
    return [p for rel in FILES[agent] for p in load_payloads(rel)]


CASES = [(agent, i, p) for agent in FILES for i, p in enumerate(_load(agent))]
IDS = [f"{agent}-{i}" for agent, i, _ in CASES]


def _session(agent: str, index: int, payload: dict) -> str:
    # Written once per agent (None: as the payload before); "@field": the captured payload's own
    # session field (a new capture has a new session).
    for session, _, _ in reversed(EXPECTED[agent][:index + 1]):
        if session is not None:
            return payload[session[1:]] if session.startswith("@") else session
    raise AssertionError(agent)


def test_every_agent_has_fixtures_for_a_write_a_command_and_a_failing_command() -> None:
    assert set(FILES) == set(AGENTS)
    for agent in FILES:
        assert len(_load(agent)) == len(EXPECTED[agent]), agent


@pytest.mark.parametrize("agent,index,payload", CASES, ids=IDS)
def test_payload_parses_to_run_tool_id_and_label(agent: str, index: int, payload: dict) -> None:
    assert detect(payload) == agent
    normalized = normalize(payload)
    assert normalized is not None
    assert normalized["hook_event_name"] in ("PostToolUse", "PostToolUseFailure")
    assert detect_agent(normalized) == agent
    _, call_id, label = EXPECTED[agent][index]
    fields = snapshot_fields(normalized, {})
    assert fields["fallback"]["run_id"] == f"{agent}-{_session(agent, index, payload)}"
    assert fields["cwd"] == H and fields["fallback"]["worktree"] == H
    assert label_for(normalized) == fields["label"] == label
    if call_id == "derived":
        assert re.fullmatch(rf"{agent}-[0-9a-f]{{24}}", fields["tool_use_id"])
    elif call_id == "toolu_":  # Qwen's own ids change with every capture
        assert fields["tool_use_id"] == payload["tool_use_id"]
        assert fields["tool_use_id"].startswith("toolu_")
    else:
        assert fields["tool_use_id"] == call_id


def test_derived_ids_are_stable_and_distinct() -> None:
    for agent in FILES:  # distinct within one agent
        ids = [normalize(p)["tool_use_id"] for p in _load(agent)]
        given = [i for i in ids if i is not None]
        assert len(set(given)) == len(given), agent
    for _, _, payload in CASES:
        again = json.loads(json.dumps(payload))  # a retried hook: same bytes, same id
        assert normalize(again)["tool_use_id"] == normalize(payload)["tool_use_id"]
    copilot = _load("copilot")[0]
    later = dict(copilot, timestamp=copilot["timestamp"] + 1)
    assert normalize(later)["tool_use_id"] != normalize(copilot)["tool_use_id"]


@pytest.mark.parametrize("relative", [
    "claude-code/post-tool-use.ndjson", "claude-code/post-tool-use-failure.ndjson",
    "claude-code/session-lifecycle.ndjson", "codex/post-tool-use.ndjson",
    "codex/session-lifecycle.ndjson", "gemini/after-tool.ndjson",
    "gemini/session-lifecycle.ndjson"])
def test_claude_codex_and_gemini_payloads_are_not_taken(relative: str) -> None:
    for payload in load_payloads(relative):
        assert detect(payload) is None and normalize(payload) is None


def test_odd_fields_do_not_raise() -> None:
    for payload in ({"hookName": "tool_result", "taskId": 3, "tool_result": "x",
                     "workspaceRoots": "nope"},
                    {"sessionId": None, "toolName": 5, "toolArgs": "{broken"},
                    {"snapshotd_plugin": "amp", "event": []},
                    {"snapshotd_plugin": "opencode"},
                    {"conversation_id": 1, "workspace_roots": [], "hook_event_name": "postToolUse",
                     "tool_input": "{\"a\": 1}"},
                    {"event": "AfterFileEdit", "session_id": "s"},
                    {"hook_event_name": "postToolUse"},
                    # Lifecycle event names of a type no agent sends (unhashable ones too).
                    {"snapshotd_plugin": "opencode", "event": ["session.idle"]},
                    {"snapshotd_plugin": "amp", "hook": {"session.start": 1}},
                    {"conversation_id": "c", "workspace_roots": ["/p"],
                     "hook_event_name": ["stop"]},
                    {"hookName": ["TaskStart"], "taskId": "t"},
                    {"event": {"SessionStart": 1}, "session_id": "s"},
                    {"sessionId": "s", "stopReason": None, "prompt": 3}):
        fields = snapshot_fields(normalize(payload), {})
        assert fields["fallback"]["run_id"].startswith(f"{detect(payload)}-")


def test_an_already_normalized_payload_is_taken_as_it_is() -> None:
    payload = {"snapshotd_agent": "myagent", "hook_event_name": "PostToolUse",
               "session_id": "s1", "tool_name": "write", "tool_input": {"path": "a"},
               "tool_use_id": "c1", "cwd": "/w"}
    assert normalize(payload) == payload and detect_agent(payload) == "myagent"


@pytest.mark.parametrize("agent", sorted(FILES))
def test_the_hook_checkpoints_each_agents_tool_calls(agent: str, sd_env: Env, daemon: Daemon,
                                                     tmp_path: Path) -> None:
    # The real snapshot-hook, with each of the agent's payloads pointed at a worktree, a new file
    # written before each (the tool call's effect): one checkpoint per call, in order, in run
    # <agent>-<session>, labelled and identified as the parser says.
    wt = make_git_worktree(tmp_path / "proj")
    texts = [line for rel in FILES[agent] for line in
             (fixtures_dir() / rel).read_text().splitlines() if line.strip()]
    runs: dict[str, list[tuple[str, str | None]]] = {}
    for i, text in enumerate(texts):
        (wt / f"effect{i}.txt").write_text(f"{i}\n")
        payload = json.loads(text.replace("<harness>/proj", str(wt)))
        result = run_hook(sd_env, payload)
        assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
        session = _session(agent, i, payload)
        if agent == "kiro":  # no session of its own: one derived from the working directory
            session = "cwd-" + hashlib.sha256(str(wt).encode()).hexdigest()[:12]
        fields = snapshot_fields(normalize(payload), {})
        runs.setdefault(f"{agent}-{session}", []).append(
            (EXPECTED[agent][i][2].replace(H + "/", ""), fields["tool_use_id"]))
    for run, expected in runs.items():
        out = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", run, "--json"],
                             env=sd_env.environ(), capture_output=True, check=True)
        checkpoints = json.loads(out.stdout)["checkpoints"]
        assert [(cp["label"], cp["tool_use_id"]) for cp in checkpoints] == expected
        assert {cp["worktree"] for cp in checkpoints} == {str(wt)}
    assert sd_env.read_gaps() == []


def test_telling_agents_apart_costs_no_import_for_claude_or_for_an_agents_own_id() -> None:
    # The hook runs after every tool call: only a derived id may import json and hashlib.
    qwen = (fixtures_dir() / FILES["qwen"][0]).read_text().splitlines()[0]
    claude = (fixtures_dir() / "claude-code/post-tool-use.ndjson").read_text().splitlines()[0]
    code = ("import sys\n"
            "from snapshotd_client.hook import parse_json\n"
            "from snapshotd_client.agents import normalize\n"
            f"assert normalize(parse_json({claude.encode()!r})) is None\n"
            f"assert normalize(parse_json({qwen.encode()!r}))['snapshotd_agent'] == 'qwen'\n"
            "print(sorted(m for m in ('json', 'hashlib') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
