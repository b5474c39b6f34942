"""Codex CLI: Claude Code's payload shape, and its ``apply_patch`` tool's patch format.

Owns Codex's lifecycle events (Claude Code's names, read as they are; Codex has no
``SessionEnd``), its context shape (Claude Code's) and the files an ``apply_patch`` call names
(``patch_paths``, for the checkpoint's label). ``agents.agent_of`` tells a Codex payload by the
``turn_id`` of a turn's events, or its transcript, a ``rollout-*.jsonl`` under ``.codex``. Codex
sends a ``tool_use_id``; none is derived for a payload that lacks one. Imports nothing.
"""

from __future__ import annotations

from . import IDLE, START, WORKING

LIFECYCLE = {START: START, WORKING: WORKING, IDLE: IDLE}
CONTEXT_SHAPE = "claude"
PROJECT_DIR_ENV = ("CLAUDE_PROJECT_DIR",)
# The lines of an apply_patch patch that name a file.
_PATCH_PREFIXES = ("*** Update File: ", "*** Add File: ", "*** Delete File: ")


def patch_paths(patch: str) -> str:
    """The files a patch updates, adds or deletes, each once, in order, comma-separated."""
    paths: list[str] = []
    for line in patch.splitlines():
        for prefix in _PATCH_PREFIXES:
            if line.startswith(prefix):
                path = line[len(prefix):].strip()
                if path and path not in paths:
                    paths.append(path)
    return ", ".join(paths)
