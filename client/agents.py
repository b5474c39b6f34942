"""The hook payloads of the agents beyond Claude Code, Codex and Gemini CLI.

Owns telling these agents apart and turning each one's payload into the shape
``snapshotd_client.hook`` reads (Claude Code's): ``hook_event_name``, ``session_id``, ``cwd``,
``tool_name``, ``tool_input``, ``tool_use_id``, plus ``snapshotd_agent`` naming the agent. That
covers the after-tool events and the session's lifecycle events (``LIFECYCLE``: each agent's
start, prompt, turn-end and end events, renamed to Claude Code's ``SessionStart``,
``UserPromptSubmit``, ``Stop`` and ``SessionEnd``, which ``hook.SESSION_EVENTS`` reads).
docs/agents.md has the table (events, config file, run names); tests/fixtures/README.md says
which payloads were captured from the real CLIs and which are written from their documentation.

Promises:
- ``normalize`` returns ``None`` for a payload of none of these agents (Claude Code, Codex,
  Gemini CLI), so those are read exactly as before; it never raises on odd input (a field of the
  wrong type counts as absent);
- a payload that already carries ``snapshotd_agent`` (the contrib plugins' and any integration
  that speaks this shape) is taken as it is;
- the tool call id is the agent's own when it sends one; otherwise one derived from the session,
  the agent's timestamp, the tool and its input (``<agent>-<24 hex>``), stable across a retried
  hook; an agent that sends neither an id nor a timestamp (Kiro, Goose's file events) gets none,
  since a derived id would merge two identical calls;
- every result names a session: the agent's own, or for Kiro (which has none) one derived from
  the working directory (``cwd-<12 hex>``), so zero-setup runs are ``<agent>-<session>``; a
  session's lifecycle events name the same session (and ``cwd``) as its tool calls;
- a lifecycle event is renamed only as ``LIFECYCLE`` says, and carries no tool call id; any
  other event of an agent that is not one of its after-tool events keeps its own name;
- ``cwd`` is the project the agent works in: the workspace root where the agent names one
  (Cursor, Cline, the OpenCode plugin), else the payload's ``cwd``;
- imports nothing at module level; ``hashlib`` and ``json`` only when an id must be derived.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

# The key a normalized payload names its agent by.
AGENT_KEY = "snapshotd_agent"
AGENTS = ("copilot", "qwen", "cline", "opencode", "cursor", "goose", "amp", "kiro")
# The lifecycle event names the hook reads (Claude Code's; hook.SESSION_EVENTS).
START, WORKING, IDLE, END = "SessionStart", "UserPromptSubmit", "Stop", "SessionEnd"
# Per agent, its own lifecycle events and what each becomes (docs/agents.md has the table).
# Copilot CLI's camelCase payloads carry no event name: ``_copilot_event`` tells them apart by
# their fields. Cline: the VS Code extension's hook names, then the CLI's (3.x) for the same
# hook files; a task's run ending (completed, cancelled, failed) leaves it waiting for the user.
# OpenCode and Amp: the events the contrib plugins forward.
LIFECYCLE: dict[str, dict[str, str]] = {
    "copilot": {"sessionStart": START, "userPromptSubmitted": WORKING, "agentStop": IDLE,
                "sessionEnd": END},
    "qwen": {START: START, WORKING: WORKING, IDLE: IDLE, END: END},
    "cline": {"TaskStart": START, "TaskResume": START, "UserPromptSubmit": WORKING,
              "TaskComplete": IDLE, "TaskCancel": IDLE, "TaskError": IDLE,
              "agent_start": START, "agent_resume": START, "prompt_submit": WORKING,
              "agent_end": IDLE, "agent_abort": IDLE, "agent_error": IDLE,
              "session_shutdown": END},
    "opencode": {"session.created": START, "chat.message": WORKING, "session.idle": IDLE,
                 "session.deleted": END},
    "cursor": {"sessionStart": START, "beforeSubmitPrompt": WORKING, "stop": IDLE,
               "sessionEnd": END},
    "goose": {START: START, WORKING: WORKING, IDLE: IDLE, END: END},
    "amp": {"session.start": START, "agent.start": WORKING, "agent.end": IDLE},
    "kiro": {"agentSpawn": START, "userPromptSubmit": WORKING, "stop": IDLE},
}
# The after-tool events, by agent (the contrib configs register only these and LIFECYCLE's).
_CURSOR_EVENTS = ("postToolUse", "afterFileEdit", "afterShellExecution")
_KIRO_EVENTS = ("postToolUse", "preToolUse", "agentSpawn", "userPromptSubmit", "stop")
_CLINE_AFTER = ("tool_result", "PostToolUse")


def normalize(payload: Mapping[str, Any]) -> dict[str, Any] | None:
    """The Claude-shaped payload for one of ``AGENTS``' payloads; ``None`` for any other."""
    if isinstance(payload.get(AGENT_KEY), str):
        return dict(payload)
    agent = detect(payload)
    if agent is None:
        return None
    fields = _PARSERS[agent](payload)
    fields[AGENT_KEY] = agent
    if not _text(fields.get("session_id")):
        fields["session_id"] = "cwd-" + _digest([_text(fields.get("cwd"))])[:12]
    return fields


def detect(payload: Mapping[str, Any]) -> str | None:
    """Which of ``AGENTS`` sent the payload, or ``None``."""
    plugin = payload.get("snapshotd_plugin")
    if plugin in ("opencode", "amp"):
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


def _qwen(p: Mapping[str, Any]) -> dict[str, Any]:
    # Claude Code's shape, with a tool_use_id of its own (and the model's call id beside it).
    fields = {k: p.get(k) for k in ("hook_event_name", "session_id", "cwd", "tool_name",
                                      "tool_input", "tool_use_id", "transcript_path")}
    return fields


def _copilot(p: Mapping[str, Any]) -> dict[str, Any]:
    session = p.get("sessionId", p.get("session_id"))
    tool = p.get("toolName", p.get("tool_name"))
    args = _object(p.get("toolArgs", p.get("tool_input")))
    event = p.get("hook_event_name") or _copilot_event(p)
    fields = {"hook_event_name": event, "session_id": session, "cwd": p.get("cwd"),
              "tool_name": tool, "tool_input": args, "tool_use_id": None}
    if tool is not None:
        fields["tool_use_id"] = _derived("copilot", [session, p.get("timestamp"), tool, args])
    return fields


def _copilot_event(p: Mapping[str, Any]) -> str | None:
    # Each camelCase event has fields of its own (the hooks reference's input payloads): a
    # tool's name; agentStop's stopReason; userPromptSubmitted's prompt; sessionEnd's reason;
    # sessionStart's source. Only the events contrib/copilot registers are told apart.
    if "toolName" in p:
        return "PostToolUseFailure" if "error" in p else "PostToolUse"
    for field, event in (("stopReason", "agentStop"), ("prompt", "userPromptSubmitted"),
                         ("reason", "sessionEnd"), ("source", "sessionStart")):
        if field in p:
            return LIFECYCLE["copilot"][event]
    return None


def _cline(p: Mapping[str, Any]) -> dict[str, Any]:
    # Cline's CLI (3.x) sends `tool_result` with the call's id; the VS Code extension's older
    # hooks send only `postToolUse` (parameters as text, no id).
    result = _object(p.get("tool_result"))
    legacy = _object(p.get("postToolUse")) or _object(p.get("preToolUse"))
    tool = result.get("name") or legacy.get("toolName")
    tool_input = _object(result.get("input")) or _object(legacy.get("parameters"))
    commands = tool_input.get("commands")  # run_commands: a list of shell commands
    if isinstance(commands, list) and "command" not in tool_input:
        tool_input = dict(tool_input, command="; ".join(
            c if isinstance(c, str) else _text(_object(c).get("command")) for c in commands))
    call_id = result.get("id") if isinstance(result.get("id"), str) else None
    if not call_id:
        call_id = _derived("cline", [p.get("taskId"), p.get("timestamp"), tool, tool_input])
    hook = p.get("hookName")
    if hook not in _CLINE_AFTER:
        call_id = None  # a lifecycle event (or another): no tool call
    return {"hook_event_name": "PostToolUse" if hook in _CLINE_AFTER else _renamed("cline", hook),
            "session_id": p.get("taskId"), "cwd": _first(p.get("workspaceRoots")),
            "tool_name": tool, "tool_input": tool_input, "tool_use_id": call_id}


def _cursor(p: Mapping[str, Any]) -> dict[str, Any]:
    event = p.get("hook_event_name")
    fields = {"hook_event_name": "PostToolUse" if event in _CURSOR_EVENTS
              else _renamed("cursor", event),
              "session_id": p.get("conversation_id") or p.get("session_id"),
              "cwd": _first(p.get("workspace_roots")) or p.get("cwd")}
    if _lifecycle("cursor", event):
        return dict(fields, tool_name=None, tool_input={}, tool_use_id=None)
    if event == "afterFileEdit":
        tool_input = {"file_path": p.get("file_path")}
        material = [p.get("conversation_id"), p.get("generation_id"), event,
                    p.get("file_path"), p.get("edits")]
    elif event == "afterShellExecution":
        tool_input = {"command": p.get("command")}
        material = [p.get("conversation_id"), p.get("generation_id"), event, p.get("command"),
                    p.get("duration")]
    else:
        tool_input = _object(p.get("tool_input"))
        material = [p.get("conversation_id"), p.get("generation_id"), p.get("tool_name"),
                    tool_input]
    given = p.get("tool_use_id")
    fields.update(tool_name=p.get("tool_name") if event == "postToolUse" else event,
                  tool_input=tool_input,
                  tool_use_id=given if isinstance(given, str) and given
                  else _derived("cursor", material))
    return fields


def _goose(p: Mapping[str, Any]) -> dict[str, Any]:
    event = p.get("event")
    tool_input = _object(p.get("tool_input"))
    if event == "AfterFileEdit" and not tool_input.get("path"):
        tool_input = dict(tool_input, path=p.get("matcher_context"))
    given = p.get("tool_call_id")
    after = event in ("PostToolUse", "PostToolUseFailure", "AfterFileEdit",
                      "AfterShellExecution")
    return {"hook_event_name": "PostToolUse" if after else _renamed("goose", event),
            "session_id": p.get("session_id"), "cwd": p.get("working_dir") or p.get("cwd"),
            "tool_name": p.get("tool_name") or event, "tool_input": tool_input,
            "tool_use_id": given if isinstance(given, str) and given else None}


def _kiro(p: Mapping[str, Any]) -> dict[str, Any]:
    # No session id and no call id: see the module's promises.
    event = p.get("hook_event_name")
    return {"hook_event_name": "PostToolUse" if event == "postToolUse"
            else _renamed("kiro", event),
            "session_id": None, "cwd": p.get("cwd"), "tool_name": p.get("tool_name"),
            "tool_input": _object(p.get("tool_input")), "tool_use_id": None}


def _opencode(p: Mapping[str, Any]) -> dict[str, Any]:
    # contrib/opencode/snapshotd.js: `input` and `args` of tool.execute.after, as given; for a
    # session's event, its name and `input.sessionID`.
    source = _object(p.get("input"))
    event = p.get("event")
    cwd = p.get("worktree") or p.get("directory")
    if _lifecycle("opencode", event):
        return {"hook_event_name": LIFECYCLE["opencode"][event],
                "session_id": source.get("sessionID"), "cwd": cwd, "tool_name": None,
                "tool_input": {}, "tool_use_id": None}
    tool_input = _object(p.get("args")) or _object(source.get("args"))
    if isinstance(tool_input.get("filePath"), str) and "file_path" not in tool_input:
        tool_input = dict(tool_input, file_path=tool_input["filePath"])
    return {"hook_event_name": "PostToolUse", "session_id": source.get("sessionID"),
            "cwd": cwd, "tool_name": source.get("tool"),
            "tool_input": tool_input, "tool_use_id": source.get("callID")}


def _amp(p: Mapping[str, Any]) -> dict[str, Any]:
    # contrib/amp/snapshotd.ts: the event as given (`hook` names it; tool.result when absent),
    # and the plugin's cwd.
    event = _object(p.get("event"))
    hook = p.get("hook")
    if _lifecycle("amp", hook):
        return {"hook_event_name": LIFECYCLE["amp"][hook],
                "session_id": _object(event.get("thread")).get("id"), "cwd": p.get("cwd"),
                "tool_name": None, "tool_input": {}, "tool_use_id": None}
    tool_input = _object(event.get("input"))
    if isinstance(tool_input.get("cmd"), str) and "command" not in tool_input:
        tool_input = dict(tool_input, command=tool_input["cmd"])
    return {"hook_event_name": "PostToolUse",
            "session_id": _object(event.get("thread")).get("id"), "cwd": p.get("cwd"),
            "tool_name": event.get("tool"), "tool_input": tool_input,
            "tool_use_id": event.get("toolUseID")}


_PARSERS: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "copilot": _copilot, "qwen": _qwen, "cline": _cline, "opencode": _opencode,
    "cursor": _cursor, "goose": _goose, "amp": _amp, "kiro": _kiro,
}


def _renamed(agent: str, event: Any) -> Any:
    """The hook's name for ``agent``'s lifecycle ``event``; any other event keeps its own."""
    return LIFECYCLE[agent][event] if _lifecycle(agent, event) else event


def _lifecycle(agent: str, event: Any) -> bool:
    # An event name of any other type (a list, an object) is no lifecycle event, and must not
    # reach a dict lookup, which would raise on an unhashable one.
    return isinstance(event, str) and event in LIFECYCLE[agent]


def _derived(agent: str, material: list[Any]) -> str | None:
    """``<agent>-<24 hex>`` from the session, a timestamp and the call; ``None`` when the
    material's first two parts (session and timestamp or turn) are missing."""
    if not material[0] or not material[1]:
        return None
    return f"{agent}-{_digest(material)[:24]}"


def _digest(material: list[Any]) -> str:
    import hashlib
    import json

    parts = [value if isinstance(value, str) else json.dumps(
        value, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
        for value in material]
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _object(value: Any) -> dict[str, Any]:
    # Some agents send the tool's arguments as JSON text (Copilot, Cursor's MCP events).
    if isinstance(value, str) and value.startswith("{"):
        try:
            import json

            value = json.loads(value)
        except ValueError:
            return {}
    return dict(value) if isinstance(value, dict) else {}


def _first(value: Any) -> str | None:
    if isinstance(value, list) and value and isinstance(value[0], str):
        return value[0]
    return None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""
