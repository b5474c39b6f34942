"""Restore of single paths (``restore --path P``): which paths a restore may touch.

Owns ``scope_paths`` (the caller's paths checked and made worktree-relative) and ``scope_plan``
(a plan cut down to those paths). A path names a file, a link or a directory (everything under
it); every other path of the worktree is left exactly as it is: not written, not deleted, not
even stat-ed beyond what the safety checkpoint reads. Promises (docs/restore.md, "Single
paths"): a path that is absolute outside the worktree, or has an empty, ``.`` or ``..``
component or a ``.git`` component, is refused before anything changes (``bad-request``); a path
the checkpoint lacks is deleted if the capture holds it now (the checkpoint's state of that path
is "absent"), and reported as a ``D`` row of the plan.
"""

from __future__ import annotations

import os
from pathlib import Path

from snapshotd.core import BAD_REQUEST, ServiceError
from snapshotd.features.restore.plan import Plan

# A request names at most this many paths (each a prefix test per planned path).
MAX_PATHS = 1000


def scope_paths(root: Path, paths: object) -> list[bytes]:
    """``paths`` (a list of str, relative to the worktree or absolute inside it) as
    worktree-relative byte paths without a trailing slash; raises ``bad-request``."""
    if not isinstance(paths, list) or not paths or len(paths) > MAX_PATHS:
        raise ServiceError(BAD_REQUEST, f"paths must be a list of 1 to {MAX_PATHS} paths")
    out: list[bytes] = []
    base = os.fsencode(root)
    for given in paths:
        if not isinstance(given, str) or not given or "\0" in given:
            raise ServiceError(BAD_REQUEST, f"path {given!r} is not a non-empty string")
        raw = os.fsencode(given)
        if raw.startswith(b"/"):
            if raw.rstrip(b"/") == base:
                raise ServiceError(BAD_REQUEST, f"path {given!r} is the whole worktree; "
                                   "restore without --path instead")
            if not raw.startswith(base + b"/"):
                raise ServiceError(BAD_REQUEST, f"path {given!r} is outside the worktree "
                                   f"{root}; refusing (nothing was changed)")
            raw = raw[len(base) + 1:]
        raw = raw.rstrip(b"/")
        for part in raw.split(b"/"):
            if part in (b"", b".", b".."):
                raise ServiceError(BAD_REQUEST, f"path {given!r} has an empty, '.' or '..' "
                                   "component; name paths inside the worktree plainly "
                                   "(nothing was changed)")
            if part.lower() == b".git":
                raise ServiceError(BAD_REQUEST, f"path {given!r} lies inside a .git "
                                   "directory, which a restore never touches")
        out.append(raw)
    return sorted(set(out))


def in_scope(path: bytes, scope: list[bytes]) -> bool:
    """Whether ``path`` is one of ``scope`` or lies under one of them."""
    return any(path == p or path.startswith(p + b"/") for p in scope)


def scope_plan(plan: Plan, scope: list[bytes]) -> Plan:
    """``plan`` with only the writes and deletes of paths in ``scope``."""
    return Plan(writes=[w for w in plan.writes if in_scope(w.path, scope)],
                deletes=[p for p in plan.deletes if in_scope(p, scope)],
                kept=[k for k in plan.kept if in_scope(k[0], scope)])
