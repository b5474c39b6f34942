"""snapshot-hook's reading of real agent payloads (tests/fixtures): agent, tool_use_id, label,
attribution."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from snapshotd_client.hook import (
    detect_agent,
    label_for,
    snapshot_fields,
    tool_use_id_for,
)
from tests.conftest import fixtures_dir

FIXTURES = fixtures_dir()

FILES = {
    "claude": ["claude-code/post-tool-use.ndjson", "claude-code/post-tool-use-failure.ndjson"],
    "codex": ["codex/post-tool-use.ndjson"],
    "gemini": ["gemini/after-tool.ndjson"],
}


def _load(agent: str) -> list[dict]:
    out = []
    for name in FILES[agent]:
        for line in (FIXTURES / name).read_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
    return out


PAYLOADS = [(agent, p) for agent in FILES for p in _load(agent)]
IDS = [f"{agent}-{i}-{p.get('tool_name')}" for i, (agent, p) in enumerate(PAYLOADS)]

# Expected labels, written out by hand from the contract (not computed by the code under test).
CLAUDE_LABELS = {
    "toolu_fake_00_01_8ba9594d": "Write <harness>/runs/canonical/proj/hello.txt",
    # exactly 60 characters: kept whole
    "toolu_fake_01_00_c7fba9ac":
        "Bash echo more >> hello.txt && mkdir -p sub && echo x > sub/y.txt",
    "toolu_fake_02_00_6736560b": "Edit <harness>/runs/canonical/proj/hello.txt",
    "toolu_fake_00_00_5fd6da92": "Bash echo z > z.txt; exit 3",  # PostToolUseFailure
    "toolu_fake_01_00_3ada5eed": "Write <harness>/runs/failures/proj/w.txt",
}
CODEX_LABELS = {
    "call_shell_ok": "Bash echo hi > hello.txt",
    "call_patch": "apply_patch hello.txt, added.txt",
    # 69 characters: sent whole (the daemon redacts, then cuts at 100)
    "call_shell_fail": "Bash echo to-stdout; echo to-stderr >&2; echo partial > failed.txt; exit 3",
    "call_par_a": "Bash echo a > a.txt",
    "call_par_b": "Bash echo b > b.txt",
    "call_bg": "Bash echo started; sleep 2; echo late > late.txt; echo finished",
}
GEMINI_LABELS = {  # keyed by timestamp: Gemini sends no call id
    "2026-11-29T11:51:49.435Z": "write_file hello.txt",  # relative path kept as given
    "2026-11-29T11:51:49.507Z": "replace hello.txt",
    "2026-11-29T11:51:49.615Z":
        "run_shell_command echo from-shell > shell_out.txt; echo to-stderr 1>&2; exit 3",
    "2026-11-29T11:51:52.625Z": "write_file a.txt",
    "2026-11-29T11:51:52.722Z": "write_file sub/b.txt",
    "2026-11-29T11:51:52.831Z": "replace a.txt",  # a failed replace still gets its hook
    "2026-11-29T11:51:53.035Z": "run_shell_command touch ok_shell.txt && echo fine",
}


def test_fixtures_hold_every_case_the_readme_describes():
    assert [len(_load(a)) for a in ("claude", "codex", "gemini")] == [5, 6, 7]


@pytest.mark.parametrize("agent,payload", PAYLOADS, ids=IDS)
def test_agent_is_detected(agent, payload):
    assert detect_agent(payload) == agent


@pytest.mark.parametrize("agent,payload", PAYLOADS, ids=IDS)
def test_label(agent, payload):
    if agent == "gemini":
        expected = GEMINI_LABELS[payload["timestamp"]]
    else:
        expected = {**CLAUDE_LABELS, **CODEX_LABELS}[payload["tool_use_id"]]
    assert label_for(payload) == expected


@pytest.mark.parametrize("agent,payload", [(a, p) for a, p in PAYLOADS if a != "gemini"],
                         ids=[i for i, (a, _) in zip(IDS, PAYLOADS, strict=True) if a != "gemini"])
def test_tool_use_id_is_the_payloads_own(agent, payload):
    assert tool_use_id_for(payload, agent) == payload["tool_use_id"]


@pytest.mark.parametrize("payload", _load("gemini"), ids=lambda p: p["timestamp"])
def test_gemini_tool_use_id_is_derived_and_stable(payload):
    first = tool_use_id_for(payload, "gemini")
    assert re.fullmatch(r"gemini-[0-9a-f]{24}", first)
    # stable across calls, across a re-parse of the same bytes, and across key order
    assert tool_use_id_for(payload, "gemini") == first
    reparsed = json.loads(json.dumps(payload))
    reparsed["tool_input"] = dict(reversed(list(reparsed["tool_input"].items())))
    assert tool_use_id_for(reparsed, "gemini") == first
    # the contract's formula: session, timestamp, tool name, tool_input (sorted keys)
    material = "\0".join([payload["session_id"], payload["timestamp"], payload["tool_name"],
                          json.dumps(payload["tool_input"], sort_keys=True, ensure_ascii=False,
                                     separators=(",", ":"))])
    assert first == "gemini-" + hashlib.sha256(material.encode()).hexdigest()[:24]


def test_tool_use_ids_are_distinct_across_all_payloads():
    ids = [tool_use_id_for(p, agent) for agent, p in PAYLOADS]
    assert None not in ids
    assert len(set(ids)) == len(ids)


def test_gemini_retry_of_the_same_call_has_the_same_id_but_a_later_call_does_not():
    payload = _load("gemini")[0]
    later = dict(payload, timestamp="2026-11-29T11:51:59.000Z")
    assert tool_use_id_for(dict(payload), "gemini") == tool_use_id_for(payload, "gemini")
    assert tool_use_id_for(later, "gemini") != tool_use_id_for(payload, "gemini")


@pytest.mark.parametrize("tool_input,expected", [
    ({}, "Bash"),
    ({"command": "   "}, "Bash"),
    ({"command": "line one\nline two\r\nthree"}, "Bash line one line two three"),
    ({"command": ["bash", "-lc", "ls"]}, "Bash bash -lc ls"),
    ({"notebook_path": "/nb.ipynb", "command": "x"}, "Bash /nb.ipynb"),
    ({"path": "src", "command": "x"}, "Bash src"),
    ({"file_path": "/f", "notebook_path": "/nb", "path": "p"}, "Bash /f"),
])
def test_label_rules(tool_input, expected):
    assert label_for({"tool_name": "Bash", "tool_input": tool_input}) == expected


def test_label_of_apply_patch_sends_every_path():
    names = [f"src/module_{i:02d}/implementation.py" for i in range(5)]
    patch = "*** Begin Patch\n" + "".join(
        f"*** Update File: {n}\n@@\n-a\n+b\n" for n in names[:3]) + (
        f"*** Delete File: {names[3]}\n*** Add File: {names[4]}\n+x\n*** End Patch\n")
    label = label_for({"tool_name": "apply_patch", "tool_input": {"command": patch}})
    assert label == "apply_patch " + ", ".join(names)


def test_a_long_command_is_bounded_without_splitting_a_word():
    token = "ghp_" + "Qm3xT8vR2kLp9Wz4Yb7Nc1Hd6Fg0Js5AxYz9"
    command = "echo " + "x" * 780 + " " + token + " done"
    label = label_for({"tool_name": "Bash", "tool_input": {"command": command}})
    assert len(label.encode()) <= 5 + 800
    assert label == "Bash echo " + "x" * 780 + "…"  # the token the bound met is dropped whole


def test_label_without_tool_name_or_input():
    assert label_for({}) is None
    assert label_for({"tool_name": "mcp__x__y", "tool_input": "not a map"}) == "mcp__x__y"


# -- attribution (docs/protocol.md) ----------------------------------------------------------------


@pytest.mark.parametrize("agent,payload", PAYLOADS, ids=IDS)
def test_zero_setup_attribution_uses_the_session(agent, payload):
    fields = snapshot_fields(payload, {})
    assert fields["cwd"] == payload["cwd"]
    assert (fields["source"], fields["tier"]) == ("hook", 1)
    assert "run_id" not in fields and "node_id" not in fields
    assert fields["iteration"] is None  # names no attempt, so claims no iteration either
    assert fields["fallback"] == {
        "run_id": f"{agent}-{payload['session_id']}", "node_id": "session",
        "iteration": 0, "attempt": 1, "worktree": payload["cwd"],
    }
    assert fields["tool_use_id"] == tool_use_id_for(payload, agent)
    assert fields["label"] == label_for(payload)


@pytest.mark.parametrize("agent,env,worktree", [
    ("claude", {"CLAUDE_PROJECT_DIR": "/c"}, "/c"),
    ("claude", {"CLAUDE_PROJECT_DIR": "/c", "GEMINI_PROJECT_DIR": "/g"}, "/c"),
    ("codex", {"CLAUDE_PROJECT_DIR": "/c", "GEMINI_PROJECT_DIR": "/g"}, "/c"),
    ("gemini", {"CLAUDE_PROJECT_DIR": "/c", "GEMINI_PROJECT_DIR": "/g"}, "/g"),
    ("gemini", {"CLAUDE_PROJECT_DIR": "/c"}, "/c"),
])
def test_zero_setup_worktree_prefers_the_agents_project_dir(agent, env, worktree):
    payload = _load(agent)[0]
    assert snapshot_fields(payload, env)["fallback"]["worktree"] == worktree


@pytest.mark.parametrize("agent", ["claude", "codex", "gemini"])
def test_explicit_attribution_from_env(agent):
    payload = _load(agent)[0]
    env = {"SNAPSHOTD_RUN_ID": "run-7", "SNAPSHOTD_NODE_ID": "build", "SNAPSHOTD_ITERATION": "2",
           "SNAPSHOTD_ATTEMPT": "3", "CLAUDE_PROJECT_DIR": "/c"}
    fields = snapshot_fields(payload, env)
    assert (fields["run_id"], fields["node_id"], fields["iteration"], fields["attempt"]) == (
        "run-7", "build", 2, 3)
    assert "fallback" not in fields


def test_explicit_attribution_defaults_iteration_and_leaves_attempt_to_the_daemon():
    fields = snapshot_fields(_load("claude")[0], {"SNAPSHOTD_RUN_ID": "r",
                                                   "SNAPSHOTD_NODE_ID": "n"})
    assert (fields["iteration"], fields["attempt"]) == (0, None)


def test_run_id_without_node_id_is_not_explicit():
    fields = snapshot_fields(_load("claude")[0], {"SNAPSHOTD_RUN_ID": "r"})
    assert "run_id" not in fields and fields["fallback"]["node_id"] == "session"


def test_the_last_resort_report_takes_any_message() -> None:
    # Python's syslog refuses a NUL and an unencodable character; the hook's last report
    # (nothing is left to catch it) must take them, escaped, without raising.
    from snapshotd_client.hook import last_resort

    assert last_resort("snapshot-hook failed: b'\x00' and \udcff in a path") is None
