"""Amp, through the contrib plugin (contrib/amp/snapshotd.ts, ``snapshotd_plugin``).

Owns turning what the plugin forwards into the hook's shape (``normalize``): the event as given
(``hook`` names it; ``tool.result`` when absent), its thread as the session, ``toolUseID`` as the
call's id, a ``cmd`` also read as ``command``. Owns the lifecycle events the plugin forwards
(Amp has no end event) and its context shape: none, since the plugin discards the hook's output.
The project is the plugin's cwd. Imports only ``.common``.
"""

from __future__ import annotations

from . import IDLE, START, WORKING
from .common import is_lifecycle, object_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

LIFECYCLE = {"session.start": START, "agent.start": WORKING, "agent.end": IDLE}
CONTEXT_SHAPE = None


def normalize(p: Mapping[str, Any]) -> dict[str, Any]:
    """The plugin's payload in the hook's shape (``agents.normalize`` adds the agent's name)."""
    event = object_of(p.get("event"))
    hook = p.get("hook")
    if is_lifecycle(LIFECYCLE, hook):
        return {"hook_event_name": LIFECYCLE[hook],
                "session_id": object_of(event.get("thread")).get("id"), "cwd": p.get("cwd"),
                "tool_name": None, "tool_input": {}, "tool_use_id": None}
    tool_input = object_of(event.get("input"))
    if isinstance(tool_input.get("cmd"), str) and "command" not in tool_input:
        tool_input = dict(tool_input, command=tool_input["cmd"])
    failed = event.get("status") == "error"  # the hook marks the call failed
    return {"hook_event_name": "PostToolUseFailure" if failed else "PostToolUse",
            "error": event.get("error") if failed else None,
            "session_id": object_of(event.get("thread")).get("id"), "cwd": p.get("cwd"),
            "tool_name": event.get("tool"), "tool_input": tool_input,
            "tool_use_id": event.get("toolUseID")}
