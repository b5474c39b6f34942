"""Gemini CLI: Claude Code's payload shape under its own event names, and no tool call id.

Owns Gemini's lifecycle events (``SessionStart``, ``BeforeAgent``, ``AfterAgent``,
``SessionEnd``, read as they are: ``hook.SESSION_EVENTS`` has them), its context shape (Claude
Code's), where it names the project (``GEMINI_PROJECT_DIR``, then the ``CLAUDE_PROJECT_DIR`` it
also sets for compatibility) and the id of a tool call (``derive_tool_use_id``: Gemini sends
none). ``agents.agent_of`` tells Gemini by its event names or, for the events it shares with
Claude Code, the ``timestamp`` every Gemini payload has.

Promises: the derived id (``gemini-<24 hex>``) is the same for a retried hook of one call and
differs with the call's timestamp; imports ``hashlib`` and ``json`` only to derive it.
"""

from __future__ import annotations

from . import END, START

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

LIFECYCLE = {START: START, "BeforeAgent": "BeforeAgent", "AfterAgent": "AfterAgent", END: END}
CONTEXT_SHAPE = "claude"
PROJECT_DIR_ENV = ("GEMINI_PROJECT_DIR", "CLAUDE_PROJECT_DIR")


def derive_tool_use_id(payload: Mapping[str, Any]) -> str:
    """A stable id for a Gemini tool call, so a retried hook for the same call stays
    idempotent: the session, the timestamp, the tool and its input."""
    import hashlib
    import json

    parts = [
        _text(payload.get("session_id")),
        _text(payload.get("timestamp")),
        _text(payload.get("tool_name")),
        json.dumps(payload.get("tool_input"), sort_keys=True, ensure_ascii=False,
                   separators=(",", ":"), default=str),
    ]
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    return "gemini-" + digest[:24]


def _text(value: object) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))
