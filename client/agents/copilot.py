"""GitHub Copilot CLI: camelCase payloads with no event name, or VS Code's PascalCase ones.

Owns turning Copilot's payloads into the hook's shape (``normalize``), its lifecycle events
(``LIFECYCLE``; a camelCase payload names no event, so each is told by the fields only it has)
and its context shape (a top-level ``additionalContext``). Copilot sends no tool call id: one is
derived from the session, the timestamp, the tool and its arguments (``copilot-<24 hex>``);
``toolArgs`` may arrive as JSON text. Imports only ``.common``.
"""

from __future__ import annotations

from . import END, IDLE, START, WORKING
from .common import derived, object_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

LIFECYCLE = {"sessionStart": START, "userPromptSubmitted": WORKING, "agentStop": IDLE,
             "sessionEnd": END}
CONTEXT_SHAPE = "copilot"


def normalize(p: Mapping[str, Any]) -> dict[str, Any]:
    """Copilot's payload in the hook's shape (``agents.normalize`` adds the agent's name)."""
    session = p.get("sessionId", p.get("session_id"))
    tool = p.get("toolName", p.get("tool_name"))
    args = object_of(p.get("toolArgs", p.get("tool_input")))
    event = p.get("hook_event_name") or _event(p)
    fields = {"hook_event_name": event, "session_id": session, "cwd": p.get("cwd"),
              "tool_name": tool, "tool_input": args, "tool_use_id": None,
              "error": p.get("error"),  # postToolUseFailure's: the hook marks the call failed
              "prompt": p.get("prompt")}  # userPromptSubmitted's: the turn's first line
    if tool is not None:
        fields["tool_use_id"] = derived("copilot", [session, p.get("timestamp"), tool, args])
    return fields


def _event(p: Mapping[str, Any]) -> str | None:
    # Each camelCase event has fields of its own (the hooks reference's input payloads): a
    # tool's name; agentStop's stopReason; userPromptSubmitted's prompt; sessionEnd's reason;
    # sessionStart's source. Only the events contrib/copilot registers are told apart.
    if "toolName" in p:
        return "PostToolUseFailure" if "error" in p else "PostToolUse"
    for field, event in (("stopReason", "agentStop"), ("prompt", "userPromptSubmitted"),
                         ("reason", "sessionEnd"), ("source", "sessionStart")):
        if field in p:
            return LIFECYCLE[event]
    return None
