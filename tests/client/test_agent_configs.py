"""The configurations shipped for the agents of ``snapshotd_client.agents`` (contrib/<agent>/):
each runs ``snapshot-hook`` on the agent's after-tool events, synchronously where the agent lets it
choose, with a timeout above the hook's own budget; Cline's hook script really checkpoints and
answers Cline; the OpenCode and Amp plugins, run under node, send ``snapshot-hook`` the payloads
the parser reads (tests/fixtures/opencode, tests/fixtures/amp)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from snapshotd_client.agents import normalize
from tests.conftest import REPO, Daemon, Env, fixtures_dir, load_payloads, make_git_worktree
from tests.support.helpers import run_plugin

pytestmark = pytest.mark.one_ledger("the shipped agent configurations run the hook")

HOOK_BUDGET_S = 5.0  # snapshot-hook's own default budget
CONTRIB = REPO / "contrib"
NODE = shutil.which("node")
needs_node = pytest.mark.skipif(NODE is None, reason="node is not installed")


def _json(relative: str) -> dict:
    data = json.loads((CONTRIB / relative).read_text())
    assert isinstance(data, dict)
    return data


def test_copilot_hooks_file() -> None:
    doc = _json("copilot/snapshotd.json")
    assert doc["version"] == 1
    assert set(doc["hooks"]) >= {"postToolUse", "postToolUseFailure"}
    for entries in doc["hooks"].values():
        [hook] = entries
        assert hook == {"type": "command", "bash": "snapshot-hook", "timeoutSec": 10}


def test_qwen_settings() -> None:
    hooks = _json("qwen/settings.json")["hooks"]
    assert set(hooks) >= {"PreToolUse", "PostToolUse", "PostToolUseFailure"}
    # The start event (a tool call in flight, docs/agents.md "Start events") for the same tools.
    assert hooks["PreToolUse"][0]["matcher"] == hooks["PostToolUse"][0]["matcher"]
    for entries in (hooks["PreToolUse"], hooks["PostToolUse"], hooks["PostToolUseFailure"]):
        [entry] = entries
        matcher = re.compile(entry["matcher"])
        for tool in ("write_file", "edit", "run_shell_command", "mcp__fs__write"):
            assert matcher.search(tool), tool
        for tool in ("read_file", "glob", "grep_search", "web_fetch"):
            assert not matcher.search(tool), tool
        [hook] = entry["hooks"]
        assert hook["command"] == "snapshot-hook" and hook["type"] == "command"
        assert hook["timeout"] / 1000 > HOOK_BUDGET_S  # milliseconds
        assert not hook.get("async")


def test_cursor_goose_and_kiro_configs() -> None:
    cursor = _json("cursor/hooks.json")
    assert cursor["version"] == 1
    assert cursor["hooks"].items() >= {"postToolUse": [{"command": "snapshot-hook"}],
                                       "afterFileEdit": [{"command": "snapshot-hook"}]}.items()
    goose = _json("goose/hooks/hooks.json")["hooks"]
    assert set(goose) >= {"PostToolUse", "AfterFileEdit"}
    assert re.compile(goose["PostToolUse"][0]["matcher"]).fullmatch("developer__text_editor")
    for entries in goose.values():
        [hook] = entries[0]["hooks"]
        assert hook["command"] == "snapshot-hook" and hook["timeout"] > HOOK_BUDGET_S
    kiro = _json("kiro/snapshotd.json")["hooks"]
    assert {h["matcher"] for h in kiro["postToolUse"]} == {"fs_write", "execute_bash"}
    for hook in kiro["postToolUse"]:
        assert hook["command"] == "snapshot-hook" and hook["timeout_ms"] / 1000 > HOOK_BUDGET_S


def test_cline_hook_script_checkpoints_and_answers(sd_env: Env, daemon: Daemon,
                                                   tmp_path: Path) -> None:
    script = CONTRIB / "cline" / "PostToolUse"
    assert os.access(script, os.X_OK) and script.read_text().startswith("#!/bin/sh\n")
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "hello.txt").write_text("hello\n")
    text = (fixtures_dir() / "cline" / "post-tool-use.ndjson").read_text().splitlines()[0]
    env = sd_env.environ()
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run([str(script)], input=text.replace("<harness>/proj", str(wt)).encode(),
                            env=env, capture_output=True, timeout=60)
    assert (result.returncode, result.stderr) == (0, b"")
    assert json.loads(result.stdout) == {"cancel": False}
    run = "cline-" + json.loads(text)["taskId"]
    out = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", run, "--json"],
                         env=sd_env.environ(), capture_output=True, check=True)
    [cp] = json.loads(out.stdout)["checkpoints"]
    assert cp["tool_use_id"] == "call_0_write" and cp["worktree"] == str(wt)


OPENCODE_DRIVER = """
const { Snapshotd } = await import(process.argv[2]);
const hooks = await Snapshotd({ directory: "<harness>/proj", worktree: "<harness>/proj" });
const calls = [
  ["write", "call_0_write", { filePath: "<harness>/proj/hello.txt", content: "hello\\n" }],
  ["bash", "call_1_shell", { command: "echo from-shell > shell_out.txt", description: "scripted" }],
  ["bash", "call_2_shell",
   { command: "echo partial > failed.txt; exit 3", description: "scripted" }],
];
for (const [tool, callID, args] of calls) {
  const input = { tool, sessionID: "ses_7f3a9c", callID };
  await hooks["tool.execute.before"](input, { args });
  await hooks["tool.execute.after"](input, { title: tool, output: "", metadata: {} });
}
"""

AMP_DRIVER = """
const plugin = (await import(process.argv[2])).default;
const handlers = {};
plugin({ on: (name, handler) => { handlers[name] = handler; } });
const thread = { id: "T-5e1f0a2b" };
process.chdir(process.argv[3]);
await handlers["tool.result"]({ thread, toolUseID: "toolu_0_write", tool: "create_file",
  input: { path: "<harness>/proj/hello.txt", content: "hello\\n" }, status: "done" }, {});
await handlers["tool.result"]({ thread, toolUseID: "toolu_1_shell", tool: "Bash",
  input: { cmd: "echo from-shell > shell_out.txt" }, status: "done" }, {});
await handlers["tool.result"]({ thread, toolUseID: "toolu_2_shell", tool: "Bash",
  input: { cmd: "echo partial > failed.txt; exit 3" }, status: "error",
  error: "exit code 3" }, {});
"""


@needs_node
def test_opencode_plugin_sends_what_the_parser_reads(tmp_path: Path) -> None:
    sent = run_plugin(tmp_path, CONTRIB / "opencode" / "snapshotd.js", OPENCODE_DRIVER)
    assert sent == load_payloads("opencode/tool-execute-after.ndjson")
    assert [normalize(p)["tool_use_id"] for p in sent] == [
        "call_0_write", "call_1_shell", "call_2_shell"]


@needs_node
def test_amp_plugin_sends_what_the_parser_reads(tmp_path: Path) -> None:
    # Node runs the plugin once its two TypeScript annotations are taken out (Amp itself loads
    # the .ts file as it is).
    source = (CONTRIB / "amp" / "snapshotd.ts").read_text()
    stripped = re.sub(r"^import type .*\n", "", source, flags=re.M)
    stripped = stripped.replace("(amp: PluginAPI)", "(amp)").replace(
        " as Record<string, unknown>", "").replace("(payload: unknown): Promise<boolean>",
                                                   "(payload)")
    assert ": " not in "".join(re.findall(r"function[^{]*\{", stripped))
    plugin = tmp_path / "snapshotd.mjs"
    plugin.write_text(stripped)
    cwd = tmp_path / "proj"
    cwd.mkdir()
    sent = run_plugin(tmp_path, plugin, AMP_DRIVER, str(cwd))
    expected = load_payloads("amp/tool-result.ndjson")
    for payload in sent:  # the plugin's real cwd, as <harness>/proj in the fixture
        assert payload["cwd"] == str(cwd)
        payload["cwd"] = "<harness>/proj"
    assert sent == expected  # an undefined field (no error) is left out by JSON.stringify
