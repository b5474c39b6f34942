"""The agent configurations shipped in the repository: the Claude Code plugin (the repository root,
``.claude-plugin/plugin.json`` + ``hooks/hooks.json``), ``contrib/codex/hooks.json`` and
``contrib/gemini/settings.json``, and the marketplace that offers the plugin
(``.claude-plugin/marketplace.json``). Valid JSON with the fields each CLI requires, matchers that
cover exactly the tools that can change files, every session lifecycle event, synchronous hooks
with a timeout in each CLI's unit, and a command that really is the installed ``snapshot-hook`` (the
plugin's: ``snapshot-hook-native`` when it is installed, else ``snapshot-hook``; what that command
does when run is in test_plugin_launch.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, Daemon, Env, claude_payload, make_git_worktree

pytestmark = pytest.mark.one_ledger("the shipped plugin's configuration")

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

HOOK_BUDGET_S = 5.0  # snapshot-hook's own default budget (SNAPSHOTD_HOOK_TIMEOUT_MS=5000)

CLAUDE_WRITERS = ["Write", "Edit", "MultiEdit", "NotebookEdit", "Bash", "mcp__github__push_files",
                  "mcp__fs__write_file"]
CLAUDE_LIFECYCLE = {"SessionStart", "UserPromptSubmit", "Stop", "SessionEnd"}
CODEX_LIFECYCLE = {"SessionStart", "UserPromptSubmit", "Stop"}  # Codex has no SessionEnd
GEMINI_LIFECYCLE = {"SessionStart", "BeforeAgent", "AfterAgent", "SessionEnd"}
# The plugin's one command for every event: the first executable ``snapshot-hook-native`` on the
# PATH (a regular file), else ``snapshot-hook``; shell builtins only, so choosing costs no process.
PLUGIN_COMMAND = ('set -f; IFS=:; for d in $PATH; do if [ -f "$d/snapshot-hook-native" ] && '
                  '[ -x "$d/snapshot-hook-native" ]; then exec "$d/snapshot-hook-native"; fi; '
                  'done; exec snapshot-hook')
CLAUDE_READERS = ["Read", "Glob", "Grep", "WebFetch", "WebSearch", "Task", "TodoWrite",
                  "NotebookRead", "LS", "BashOutput"]


def load(relative: str) -> dict:
    path = REPO / relative
    assert path.is_file(), f"{relative} is missing"
    data = json.loads(path.read_text())
    assert isinstance(data, dict)
    return data


def check_entries(entries: object, *, timeout_max: float) -> list[dict]:
    """Claude-style event entries: a list of ``{"matcher": str, "hooks": [command hooks]}``."""
    assert isinstance(entries, list) and entries
    commands = []
    for entry in entries:
        assert isinstance(entry, dict)
        assert isinstance(entry["matcher"], str) and entry["matcher"]
        re.compile(entry["matcher"])
        assert isinstance(entry["hooks"], list) and entry["hooks"]
        for hook in entry["hooks"]:
            assert hook["type"] == "command"
            assert isinstance(hook["command"], str) and hook["command"]
            assert isinstance(hook["timeout"], int) and not isinstance(hook["timeout"], bool)
            assert 0 < hook["timeout"] <= timeout_max
            # Synchronous: an async hook could capture the next tool call's changes under this
            # tool call's id.
            assert "async" not in hook and "background" not in hook
            commands.append(hook)
    return commands


def check_lifecycle(hooks: dict, events: set[str], *, timeout_max: float,
                    timeout_min: float, command: str = "snapshot-hook") -> None:
    """A session's lifecycle events: one ``snapshot-hook`` each, for every occasion (no matcher:
    a session that starts by resuming or after ``/clear`` is a session all the same),
    synchronous, with a timeout longer than the hook's own budget."""
    for event in events:
        entries = hooks[event]
        assert isinstance(entries, list) and len(entries) == 1, event
        assert "matcher" not in entries[0], event
        [hook] = entries[0]["hooks"]
        assert (hook["type"], hook["command"]) == ("command", command), event
        assert "async" not in hook and "background" not in hook, event
        assert isinstance(hook["timeout"], int) and timeout_min < hook["timeout"] <= timeout_max


def matches(entries: list[dict], tool: str) -> bool:
    # Claude Code, Codex and Gemini all test the matcher as a regular expression on the name.
    return any(re.search(e["matcher"], tool) for e in entries)


# -- Claude Code ----------------------------------------------------------------------------------


def test_plugin_manifest() -> None:
    manifest = load(".claude-plugin/plugin.json")
    assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", manifest["name"])
    assert re.fullmatch(r"\d+\.\d+\.\d+", manifest["version"])
    assert isinstance(manifest["description"], str) and manifest["description"]
    # hooks/hooks.json is loaded from its standard place; naming it again in the manifest
    # makes Claude Code report a duplicate hooks file.
    assert "hooks" not in manifest
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert manifest["version"] == project["version"]


def test_marketplace_manifest_offers_the_plugin_at_the_repository_root() -> None:
    # `claude plugin marketplace add <this repository>` then `claude plugin install
    # snapshotd@snapshotd`: the marketplace lists the plugin whose root is the repository's.
    marketplace = load(".claude-plugin/marketplace.json")
    manifest = load(".claude-plugin/plugin.json")
    assert re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", marketplace["name"])
    assert isinstance(marketplace["owner"]["name"], str) and marketplace["owner"]["name"]
    [entry] = marketplace["plugins"]
    assert entry["name"] == manifest["name"] and entry["source"] == "./"
    assert entry["version"] == manifest["version"]
    assert isinstance(entry["description"], str) and entry["description"]


@pytest.mark.parametrize("relative,agent", [
    ("claude-code/session-lifecycle.ndjson", "hooks/hooks.json"),
    ("codex/session-lifecycle.ndjson", "contrib/codex/hooks.json"),
    ("gemini/session-lifecycle.ndjson", "contrib/gemini/settings.json"),
])
def test_every_lifecycle_event_reaches_the_hook(relative: str, agent: str) -> None:
    from snapshotd_client.hook import SESSION_EVENTS
    from tests.conftest import load_payloads

    hooks = load(agent)["hooks"]
    for payload in load_payloads(relative):
        assert payload["hook_event_name"] in hooks and payload["hook_event_name"] in SESSION_EVENTS


def test_plugin_hooks_cover_the_tools_that_change_files() -> None:
    config = load("hooks/hooks.json")
    hooks = config["hooks"]
    assert set(hooks) == {"PreToolUse", "PostToolUse", "PostToolUseFailure", *CLAUDE_LIFECYCLE}
    check_lifecycle(hooks, CLAUDE_LIFECYCLE, timeout_max=600, timeout_min=HOOK_BUDGET_S,
                    command=PLUGIN_COMMAND)
    for event in ("PreToolUse", "PostToolUse", "PostToolUseFailure"):
        commands = check_entries(hooks[event], timeout_max=600)  # seconds
        for hook in commands:
            assert hook["command"] == PLUGIN_COMMAND
            assert hook["timeout"] > HOOK_BUDGET_S  # the hook always ends first, writing a gap
        for tool in CLAUDE_WRITERS:
            assert matches(hooks[event], tool), (event, tool)
        for tool in CLAUDE_READERS:
            assert not matches(hooks[event], tool), (event, tool)


def test_snapshot_hook_is_the_installed_console_script() -> None:
    # A script file, not an entry point: the wrapper older pips generate imports `re`, about
    # 10 ms after every tool call (docs/performance.md).
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "snapshot-hook" not in config["project"].get("scripts", {})
    assert config["tool"]["setuptools"]["script-files"] == ["client/snapshot-hook"]
    script = (REPO / "client" / "snapshot-hook").read_text().splitlines()
    assert script[0] == "#!python" and "from snapshotd_client.hook import main" in script
    assert (Path(sys.executable).parent / "snapshot-hook").exists()


def test_the_configured_command_captures(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    # Run the exact command string from hooks.json the way Claude Code does (a shell), with the
    # environment it sets: the tool call becomes a checkpoint.
    command = load("hooks/hooks.json")["hooks"]["PostToolUse"][0]["hooks"][0]["command"]
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "hello.txt").write_text("hi\n")
    env = sd_env.environ(CLAUDE_PROJECT_DIR=str(wt))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    result = subprocess.run(["sh", "-c", command], input=json.dumps(
        claude_payload(wt, "toolu_plugin", session_id="plugin")).encode(), env=env,
        capture_output=True, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")
    out = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", "claude-plugin",
                          "--json"], env=sd_env.environ(), capture_output=True, check=True)
    [cp] = json.loads(out.stdout)["checkpoints"]
    assert cp["tool_use_id"] == "toolu_plugin" and cp["worktree"] == str(wt)


# -- Codex and Gemini -----------------------------------------------------------------------------


def test_codex_hooks() -> None:
    hooks = load("contrib/codex/hooks.json")["hooks"]
    assert set(hooks) == {"PreToolUse", "PostToolUse", *CODEX_LIFECYCLE}  # no failure event
    assert hooks["PreToolUse"] == hooks["PostToolUse"]  # bracketing: the same tools
    check_lifecycle(hooks, CODEX_LIFECYCLE, timeout_max=600, timeout_min=HOOK_BUDGET_S)
    for hook in check_entries(hooks["PostToolUse"], timeout_max=600):  # seconds
        assert hook["command"] == "snapshot-hook" and hook["timeout"] > HOOK_BUDGET_S
    for tool in ("Bash", "apply_patch", "mcp__github__push_files"):
        assert matches(hooks["PostToolUse"], tool), tool
    for tool in ("view_image", "web_search", "update_plan"):
        assert not matches(hooks["PostToolUse"], tool), tool


def test_gemini_settings() -> None:
    hooks = load("contrib/gemini/settings.json")["hooks"]
    assert set(hooks) == {"BeforeTool", "AfterTool", *GEMINI_LIFECYCLE}
    assert hooks["BeforeTool"][0]["matcher"] == hooks["AfterTool"][0]["matcher"]
    # Milliseconds here too.
    check_lifecycle(hooks, GEMINI_LIFECYCLE, timeout_max=600_000,
                    timeout_min=1000 * (HOOK_BUDGET_S + 1))
    for event in GEMINI_LIFECYCLE:
        assert isinstance(hooks[event][0]["hooks"][0].get("name"), str)
    for hook in check_entries(hooks["AfterTool"], timeout_max=600_000):  # milliseconds
        assert hook["command"] == "snapshot-hook"
        # Milliseconds: a value in seconds (like 10) would kill the hook after 10 ms.
        assert hook["timeout"] >= 1000 * (HOOK_BUDGET_S + 1)
        assert isinstance(hook.get("name"), str) and hook["name"]
    for tool in ("write_file", "replace", "run_shell_command", "mcp__github__push_files"):
        assert matches(hooks["AfterTool"], tool), tool
    for tool in ("read_file", "read_many_files", "glob", "search_file_content",
                 "list_directory", "google_web_search", "web_fetch", "write_todos"):
        assert not matches(hooks["AfterTool"], tool), tool


@pytest.mark.parametrize("relative,agent", [
    ("claude-code/post-tool-use.ndjson", "hooks/hooks.json"),
    ("claude-code/post-tool-use-failure.ndjson", "hooks/hooks.json"),
    ("codex/post-tool-use.ndjson", "contrib/codex/hooks.json"),
    ("gemini/after-tool.ndjson", "contrib/gemini/settings.json"),
])
def test_every_recorded_tool_call_reaches_the_hook(relative: str, agent: str) -> None:
    # Every tool call in the captured sessions changed (or could have changed) files: each one
    # must pass the matcher of its event.
    from tests.conftest import load_payloads

    hooks = load(agent)["hooks"]
    for payload in load_payloads(relative):
        entries = hooks[payload["hook_event_name"]]
        assert matches(entries, payload["tool_name"]), (relative, payload["tool_name"])
