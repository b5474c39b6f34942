"""A checkpoint's label naming a path of its worktree relative to it.

Owns ``relative_label``. A hook's label is ``<tool> <path-or-command>`` (``before `` first for a
before-tool capture), and agents send the path as they got it: usually absolute
(``Edit /home/me/src/app/click/__init__.py``), which every listing then cuts to its prefix. The
daemon knows the attempt's worktree, so when the label's path lies inside it the path is named
relative to it (``Edit click/__init__.py``); a path outside it, or a command, is kept as it is.
A path reached through a symbolic link to the worktree (the worktree is recorded resolved) is
resolved by its directory only, so a link inside the worktree keeps its own name. Only reads
names (``os.path.realpath``: lstat and readlink, never an open).
"""

from __future__ import annotations

import os
import re

# The label's words before the path: an optional ``before`` and the tool's name.
_LABEL = re.compile(r"((?:before )?[^ /]+ )(/.*)", re.DOTALL)


def relative_label(label: str | None, worktree: str) -> str | None:
    """``label`` with its path named relative to ``worktree`` when the path lies inside it."""
    match = _LABEL.fullmatch(label) if label else None
    if match is None:
        return label
    head, path = match.groups()
    inside = _inside(path, worktree)
    if inside is None:
        parent, name = os.path.split(path)
        try:
            resolved = os.path.join(os.path.realpath(parent), name)
        except (OSError, ValueError):
            return label
        inside = _inside(resolved, worktree)
    return label if inside is None else head + inside


def _inside(path: str, worktree: str) -> str | None:
    """``path`` relative to ``worktree`` (``.`` for the worktree itself), or None."""
    root = worktree.rstrip("/") or "/"
    if path.rstrip("/") == root:
        return "."
    prefix = root if root.endswith("/") else root + "/"
    if path.startswith(prefix) and len(path) > len(prefix):
        return path[len(prefix):]
    return None
