"""The agents ``snapshot-hook`` serves, one module each, and the registry the hook reads them
by: names, detection from a payload, and loading only the detected agent's module."""

# Owns the agents' names, telling them apart from a payload (``detect``, ``agent_of``) and loading
# the one module of the agent found (``module``). Each agent module (``claude``, ``codex``,
# ``gemini``, ``copilot``, ``qwen``, ``cline``, ``opencode``, ``cursor``, ``goose``, ``amp``,
# ``kiro``) owns that agent's ``LIFECYCLE`` (its lifecycle events, renamed to the Claude Code names
# ``hook.SESSION_EVENTS`` reads), its ``CONTEXT_SHAPE`` (how it reads a start's context) and, for
# the agents of ``AGENTS``, ``normalize`` (its payload in Claude Code's shape, which the hook reads).
#
# Promises: ``normalize`` returns ``None`` for Claude Code, Codex and Gemini payloads (read as they
# are) and never raises on odd input; a payload already naming ``snapshotd_agent`` is taken as it
# is; every normalized payload names a session; ``module`` loads only the agents named in
# ``NAMES``, so a plugin's ``snapshotd_agent`` picks no other module. Imports nothing at module
# level: the hook loads at most the one module of the agent it detected.

from __future__ import annotations

import os  # os and sys are loaded by the interpreter itself: free on the hook's path
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import ModuleType
    from typing import Any

# The key a normalized payload names its agent by.
AGENT_KEY = "snapshotd_agent"
# The agents whose payloads the hook reads as they are (Claude Code's shape, or Gemini's close
# variant), and those whose payloads their module's ``normalize`` turns into it.
NATIVE = ("claude", "codex", "gemini")
AGENTS = ("copilot", "qwen", "cline", "opencode", "cursor", "goose", "amp", "kiro")
NAMES = NATIVE + AGENTS
# The lifecycle event names the hook reads (Claude Code's; hook.SESSION_EVENTS).
START, WORKING, IDLE, END = "SessionStart", "UserPromptSubmit", "Stop", "SessionEnd"
# The environment variables naming the project, for an agent whose module names none.
DEFAULT_PROJECT_DIR_ENV = ("CLAUDE_PROJECT_DIR",)
# Detection lives here, not in the agent modules, so that telling the agent apart loads none of
# them (measured: about 0.3 ms a module on the hook's path). Kiro's events, Gemini's events.
_KIRO_EVENTS = ("postToolUse", "preToolUse", "agentSpawn", "userPromptSubmit", "stop")
_GEMINI_EVENTS = ("AfterTool", "BeforeTool", "BeforeAgent", "AfterAgent")


def detect(payload: Mapping[str, Any]) -> str | None:
    """Which of ``AGENTS`` sent the payload, or ``None``. The order settles the payloads that
    two agents' marks would both fit: the first rule that matches names the agent."""
    plugin = payload.get("snapshotd_plugin")
    if plugin in ("opencode", "amp"):  # the contrib plugins say who they are
        return plugin
    if "hookName" in payload and "taskId" in payload:
        return "cline"
    event = payload.get("hook_event_name")
    if "conversation_id" in payload and "workspace_roots" in payload:
        return "cursor"
    if "sessionId" in payload and event is None:
        return "copilot"  # the camelCase payloads of .github/hooks (no event name in them)
    if "event" in payload and "session_id" in payload and event is None:
        return "goose"
    if event in _KIRO_EVENTS:
        return "kiro"
    transcript = payload.get("transcript_path")
    if isinstance(transcript, str) and "/.qwen/" in transcript:
        return "qwen"
    if (event in ("PostToolUse", "PostToolUseFailure") and "tool_result" in payload
            and "tool_use_id" not in payload and "transcript_path" not in payload):
        return "copilot"  # the VS Code-compatible (PascalCase) payload
    return None


def agent_of(payload: Mapping[str, Any]) -> str:
    """The agent of a payload in Claude Code's shape: the one a normalized payload names, else
    ``gemini``, ``codex`` or ``claude``, told from the payload alone.

    Gemini is checked first: it also sets ``CLAUDE_PROJECT_DIR`` for compatibility, so the
    environment cannot tell it apart; its event names can, and for the events it shares with
    Claude Code (``SessionStart``, ``SessionEnd``) the ``timestamp`` every Gemini payload has.
    Codex puts a ``turn_id`` in every event of a turn; its ``SessionStart`` has none, but its
    transcript is a ``rollout-*.jsonl`` under ``.codex``.
    """
    named = payload.get(AGENT_KEY)  # a payload normalize produced, or a plugin's
    if isinstance(named, str) and named:
        return named
    event = payload.get("hook_event_name")
    if event in _GEMINI_EVENTS or (event in ("SessionStart", "SessionEnd")
                                   and "timestamp" in payload):
        return "gemini"
    transcript = payload.get("transcript_path")
    if "turn_id" in payload or (isinstance(transcript, str) and (
            "/.codex/" in transcript or os.path.basename(transcript).startswith("rollout-"))):
        return "codex"
    return "claude"


def normalize(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Claude-shaped payload for one of ``AGENTS``' payloads; ``None`` for any other."""
    if isinstance(payload.get(AGENT_KEY), str):
        return dict(payload)
    agent = detect(payload)
    if agent is None:
        return None
    fields = module(agent).normalize(payload)
    fields[AGENT_KEY] = agent
    session = fields.get("session_id")
    if not (isinstance(session, str) and session):
        # Kiro names no session: one per working directory, so a zero-setup run has a name.
        from .common import digest, text

        fields["session_id"] = "cwd-" + digest([text(fields.get("cwd"))])[:12]
    return fields


def module(name: object) -> ModuleType | None:
    """The module of the agent ``name`` (one of ``NAMES``), loaded on first use; else None."""
    if not isinstance(name, str) or name not in NAMES:
        return None
    # The builtin import, not importlib's: the C path, which `python -X importtime` also times.
    full = f"{__name__}.{name}"
    __import__(full)
    return sys.modules[full]


def patched_paths(patch: str) -> str:
    """The paths an ``apply_patch`` patch names (a checkpoint's label), read as Codex's module
    reads them; loads that module only when a patch is seen."""
    codex = module("codex")
    assert codex is not None  # "codex" is one of NAMES
    return codex.patch_paths(patch)


def lifecycle(name: object) -> dict[str, str]:
    """``name``'s lifecycle events and the hook's name for each (empty for an unknown agent)."""
    found = module(name)
    return dict(found.LIFECYCLE) if found is not None else {}


def context_shape(name: object) -> str | None:
    """How ``name`` reads a session start's context (``snapshotd_client.lifecycle``): an agent
    not in ``NAMES`` (any other that sends the normalized shape) gets Claude Code's."""
    found = module(name)
    return found.CONTEXT_SHAPE if found is not None else "claude"


def project_dir_env(name: object) -> tuple[str, ...]:
    """The environment variables naming ``name``'s project, in the order they are trusted."""
    return getattr(module(name), "PROJECT_DIR_ENV", DEFAULT_PROJECT_DIR_ENV)


def derived_tool_use_id(payload: Mapping[str, Any], name: object) -> str | None:
    """A tool call id derived from a payload that has none, for an agent whose module derives
    one (Gemini); ``None`` for the others (no timestamp: a derived id could merge two calls)."""
    derive = getattr(module(name), "derive_tool_use_id", None)
    return derive(payload) if derive is not None else None
