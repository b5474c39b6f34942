"""Claude Code: the agent whose hook payload is the shape ``snapshot-hook`` reads.

Owns Claude Code's lifecycle events (all four, read as they are), how it reads a session start's
context (``hookSpecificOutput.additionalContext``) and where it names the project
(``CLAUDE_PROJECT_DIR``). Its payloads need no normalizing: ``agents.normalize`` returns None for
them, and ``agents.agent_of`` names a payload ``claude`` when it is neither Gemini's nor Codex's.
Every tool call carries Claude Code's own ``tool_use_id``; no id is derived for one that lacks
it. Imports nothing.
"""

from __future__ import annotations

from . import END, IDLE, START, WORKING

LIFECYCLE = {START: START, WORKING: WORKING, IDLE: IDLE, END: END}
CONTEXT_SHAPE = "claude"
PROJECT_DIR_ENV = ("CLAUDE_PROJECT_DIR",)
