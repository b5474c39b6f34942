"""Cline: hook scripts fed ``hookName`` and ``taskId``, by the VS Code extension or the CLI (3.x).

Owns turning Cline's payloads into the hook's shape (``normalize``): the CLI's ``tool_result``
with the call's id, or the extension's older ``postToolUse`` (parameters as text, no id, so one
is derived from the task, the timestamp, the tool and its input); a ``run_commands`` call's
commands become one command. Owns its lifecycle events (the extension's names, then the CLI's,
for the same hook files; a task's run ending leaves it waiting for the user) and its context
shape: none, since Cline's hook scripts print Cline's own ``{"cancel": false}``. The project is
the first workspace root. Imports only ``.common``.
"""

from __future__ import annotations

from . import END, IDLE, START, WORKING
from .common import derived, first, object_of, renamed, text

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

LIFECYCLE = {"TaskStart": START, "TaskResume": START, "UserPromptSubmit": WORKING,
             "TaskComplete": IDLE, "TaskCancel": IDLE, "TaskError": IDLE,
             "agent_start": START, "agent_resume": START, "prompt_submit": WORKING,
             "agent_end": IDLE, "agent_abort": IDLE, "agent_error": IDLE,
             "session_shutdown": END}
CONTEXT_SHAPE = None
# The after-tool hooks: the CLI's, then the extension's.
_AFTER = ("tool_result", "PostToolUse")


def normalize(p: Mapping[str, Any]) -> dict[str, Any]:
    """Cline's payload in the hook's shape (``agents.normalize`` adds the agent's name)."""
    result = object_of(p.get("tool_result"))
    legacy = object_of(p.get("postToolUse")) or object_of(p.get("preToolUse"))
    tool = result.get("name") or legacy.get("toolName")
    tool_input = object_of(result.get("input")) or object_of(legacy.get("parameters"))
    commands = tool_input.get("commands")  # run_commands: a list of shell commands
    if isinstance(commands, list) and "command" not in tool_input:
        tool_input = dict(tool_input, command="; ".join(
            c if isinstance(c, str) else text(object_of(c).get("command")) for c in commands))
    call_id = result.get("id") if isinstance(result.get("id"), str) else None
    if not call_id:
        call_id = derived("cline", [p.get("taskId"), p.get("timestamp"), tool, tool_input])
    hook = p.get("hookName")
    if hook not in _AFTER:
        call_id = None  # a lifecycle event (or another): no tool call
    return {"hook_event_name": "PostToolUse" if hook in _AFTER else renamed(LIFECYCLE, hook),
            "session_id": p.get("taskId"), "cwd": first(p.get("workspaceRoots")),
            "tool_name": tool, "tool_input": tool_input, "tool_use_id": call_id}
