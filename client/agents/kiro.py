"""Kiro CLI: hooks fed camelCase event names, with no session id and no tool call id.

Owns turning Kiro's payloads into the hook's shape (``normalize``): ``postToolUse`` is its
after-tool event; no call id is derived (no timestamp either: two identical calls would merge)
and the session is left to ``agents.normalize``, which derives one from the working directory
(``cwd-<12 hex>``). Owns its lifecycle events (no end event: its process going away ends the
session) and its context shape: plain text, which Kiro adds to the agent's context as it is.
Imports only ``.common``.
"""

from __future__ import annotations

from . import IDLE, START, WORKING
from .common import object_of, renamed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

LIFECYCLE = {"agentSpawn": START, "userPromptSubmit": WORKING, "stop": IDLE}
CONTEXT_SHAPE = "text"


def normalize(p: Mapping[str, Any]) -> dict[str, Any]:
    """Kiro's payload in the hook's shape (``agents.normalize`` adds the agent's name)."""
    event = p.get("hook_event_name")
    return {"hook_event_name": "PostToolUse" if event == "postToolUse"
            else renamed(LIFECYCLE, event),
            "session_id": None, "cwd": p.get("cwd"), "tool_name": p.get("tool_name"),
            "tool_input": object_of(p.get("tool_input")), "tool_use_id": None,
            "tool_response": p.get("tool_response")}  # success, exit_status: the outcome
