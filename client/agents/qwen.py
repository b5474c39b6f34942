"""Qwen Code: Claude Code's payload shape, told apart by its transcript under ``.qwen``.

Owns keeping the fields of Qwen's payload the hook reads (``normalize``: Qwen sends a
``tool_use_id`` of its own, with the model's call id beside it), its lifecycle events (Claude
Code's names) and its context shape (Claude Code's). A ``PostToolUseFailure`` keeps its
``error`` (the hook marks the call failed), and the model's ``tool_call_id`` is kept too. Imports nothing.
"""

from __future__ import annotations

from . import END, IDLE, START, WORKING

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

LIFECYCLE = {START: START, WORKING: WORKING, IDLE: IDLE, END: END}
CONTEXT_SHAPE = "claude"


def normalize(p: Mapping[str, Any]) -> dict[str, Any]:
    """Qwen's payload in the hook's shape (``agents.normalize`` adds the agent's name)."""
    return {k: p.get(k) for k in ("hook_event_name", "session_id", "cwd", "tool_name",
                                    "tool_input", "tool_use_id", "transcript_path", "tool_response",
                                    "error", "tool_call_id", "prompt", "prompt_id")}
