"""OpenCode, through the contrib plugin (contrib/opencode/snapshotd.js, ``snapshotd_plugin``).

Owns turning what the plugin forwards into the hook's shape (``normalize``): for
``tool.execute.after`` its ``input`` (tool, session, ``callID``: the call's id) and ``args`` as
given, a ``filePath`` also read as ``file_path``; for a session's event, its name and
``input.sessionID``. Owns the lifecycle events the plugin forwards and its context shape: none,
since the plugin discards the hook's output. The project is the plugin's worktree (or directory).
Imports only ``.common``.
"""

from __future__ import annotations

from . import END, IDLE, START, WORKING
from .common import is_lifecycle, object_of

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

LIFECYCLE = {"session.created": START, "chat.message": WORKING, "session.idle": IDLE,
             "session.deleted": END}
CONTEXT_SHAPE = None


def normalize(p: Mapping[str, Any]) -> dict[str, Any]:
    """The plugin's payload in the hook's shape (``agents.normalize`` adds the agent's name)."""
    source = object_of(p.get("input"))
    event = p.get("event")
    cwd = p.get("worktree") or p.get("directory")
    if is_lifecycle(LIFECYCLE, event):
        return {"hook_event_name": LIFECYCLE[event],
                "session_id": source.get("sessionID"), "cwd": cwd, "tool_name": None,
                "tool_input": {}, "tool_use_id": None}
    tool_input = object_of(p.get("args")) or object_of(source.get("args"))
    if isinstance(tool_input.get("filePath"), str) and "file_path" not in tool_input:
        tool_input = dict(tool_input, file_path=tool_input["filePath"])
    return {"hook_event_name": "PostToolUse", "session_id": source.get("sessionID"),
            "cwd": cwd, "tool_name": source.get("tool"),
            "tool_input": tool_input, "tool_use_id": source.get("callID")}
