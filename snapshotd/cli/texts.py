"""What several commands print alike: a tool call as ``[ID] label``, how it owns a checkpoint,
labels relative to their worktree, and an age (``snapshots``, ``show``, ``runs``, ``turns``).

Kept apart from the commands so that running one command never imports another's module.
"""

from __future__ import annotations

from snapshotd.cli.terminal import field

HOW_TEXT = {"in-flight": "in flight", "inferred": "inferred"}


def age(seconds: float) -> str:
    seconds = max(0.0, seconds)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    if seconds < 129600:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"


def relative(label: str, worktree: str) -> str:
    """``label`` with the worktree's paths relative to it (labels older than that rule)."""
    return label.replace(worktree.rstrip("/") + "/", "") if worktree and label else label


def call_text(call: dict, worktree: str = "") -> str:
    """``[ID] label`` of a tool call (its label's paths relative to the worktree), escaped."""
    label = relative(call.get("label") or "", worktree)
    kind = f"{field(call['kind'])}: " if call.get("kind") else ""
    return f"{kind}[{field(call['id'])}]" + (f" {field(label)}" if label else "")
