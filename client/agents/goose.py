"""Goose: hooks fed ``event`` (not ``hook_event_name``) and ``session_id``.

Owns turning Goose's payloads into the hook's shape (``normalize``): its after-tool events
(``PostToolUse``, ``PostToolUseFailure``, ``AfterFileEdit``, ``AfterShellExecution``; a file
event's path may be only in ``matcher_context``), the call's id when Goose sends one (its file
events send none, and none is derived: two identical calls would merge), its lifecycle events
(Claude Code's names) and its context shape (Claude Code's). The project is the payload's
``working_dir``, else its ``cwd``. Imports only ``.common``.
"""

from __future__ import annotations

from . import END, IDLE, START, WORKING
from .common import object_of, renamed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

LIFECYCLE = {START: START, WORKING: WORKING, IDLE: IDLE, END: END}
CONTEXT_SHAPE = "claude"
_AFTER = ("PostToolUse", "PostToolUseFailure", "AfterFileEdit", "AfterShellExecution")


def normalize(p: Mapping[str, Any]) -> dict[str, Any]:
    """Goose's payload in the hook's shape (``agents.normalize`` adds the agent's name)."""
    event = p.get("event")
    tool_input = object_of(p.get("tool_input"))
    if event == "AfterFileEdit" and not tool_input.get("path"):
        tool_input = dict(tool_input, path=p.get("matcher_context"))
    given = p.get("tool_call_id")
    after = event in _AFTER
    failed = event == "PostToolUseFailure"  # the error is tool_output's (the hook reads it)
    return {"hook_event_name": ("PostToolUseFailure" if failed else "PostToolUse") if after
            else renamed(LIFECYCLE, event),
            "error": object_of(p.get("tool_output")).get("error") if failed else None,
            "session_id": p.get("session_id"), "cwd": p.get("working_dir") or p.get("cwd"),
            "tool_name": p.get("tool_name") or event, "tool_input": tool_input,
            "tool_use_id": given if isinstance(given, str) and given else None}
