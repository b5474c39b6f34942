"""Cursor: hooks fed ``conversation_id`` and ``workspace_roots``, with events of their own.

Owns turning Cursor's payloads into the hook's shape (``normalize``): ``postToolUse`` (the tool's
name and input), ``afterFileEdit`` (the file) and ``afterShellExecution`` (the command) are all
after-tool events; the call's id is Cursor's when it sends one, else derived from the
conversation, the generation and the call (``cursor-<24 hex>``). Owns its lifecycle events and
its context shape (``additional_context``). The project is the first workspace root, else the
payload's ``cwd``. Imports only ``.common``.
"""

from __future__ import annotations

from . import END, IDLE, START, WORKING
from .common import derived, first, is_lifecycle, object_of, renamed

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

LIFECYCLE = {"sessionStart": START, "beforeSubmitPrompt": WORKING, "stop": IDLE,
             "sessionEnd": END}
CONTEXT_SHAPE = "cursor"
# The after-tool events (contrib/cursor registers only these and LIFECYCLE's).
_AFTER = ("postToolUse", "afterFileEdit", "afterShellExecution")


def normalize(p: Mapping[str, Any]) -> dict[str, Any]:
    """Cursor's payload in the hook's shape (``agents.normalize`` adds the agent's name)."""
    event = p.get("hook_event_name")
    fields = {"hook_event_name": "PostToolUse" if event in _AFTER
              else renamed(LIFECYCLE, event),
              "session_id": p.get("conversation_id") or p.get("session_id"),
              "cwd": first(p.get("workspace_roots")) or p.get("cwd")}
    if is_lifecycle(LIFECYCLE, event):
        # beforeSubmitPrompt's prompt: the turn's first line (docs/review.md, "Turns").
        return dict(fields, tool_name=None, tool_input={}, tool_use_id=None,
                    prompt=p.get("prompt"))
    if event == "afterFileEdit":
        tool_input = {"file_path": p.get("file_path")}
        material = [p.get("conversation_id"), p.get("generation_id"), event,
                    p.get("file_path"), p.get("edits")]
    elif event == "afterShellExecution":
        tool_input = {"command": p.get("command")}
        material = [p.get("conversation_id"), p.get("generation_id"), event, p.get("command"),
                    p.get("duration")]
    else:
        tool_input = object_of(p.get("tool_input"))
        material = [p.get("conversation_id"), p.get("generation_id"), p.get("tool_name"),
                    tool_input]
    given = p.get("tool_use_id")
    fields.update(tool_name=p.get("tool_name") if event == "postToolUse" else event,
                  tool_input=tool_input,
                  tool_use_id=given if isinstance(given, str) and given
                  else derived("cursor", material))
    return fields
