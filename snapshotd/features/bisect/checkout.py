"""``snapshotd checkout``: one checkpoint materialized read-only into a new or empty directory.

Owns ``checkout_checkpoint``. Promises: the target is resolved once (the links of the caller's
path followed then), must be new or empty and outside the snapshotd home; from there it is
entered only by descriptors opened with ``O_NOFOLLOW`` (``scratch.ScratchTree``), so nothing is
written through a symlink or outside it. Files are 0444 (0555 executable), directories 0555,
the target included; ``writable`` gives git's modes under ``umask`` instead. Symlinks are
written as symlinks. The store and the ledger are only read; a failed checkout takes back
what it wrote (a directory it created is removed).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from snapshotd.core import BAD_REQUEST, ServiceError
from snapshotd.features.bisect.scratch import (
    CHECKOUT_MODES,
    ScratchTree,
    remove_at,
    remove_tree,
    writable_modes,
)
from snapshotd.service import find_checkpoint, selection

if TYPE_CHECKING:
    from snapshotd.features.review import HomeView


def checkout_checkpoint(view: HomeView, *, run_id: object, node_id: object, seq: object,
                        target: object, iteration: object = None, attempt: object = None,
                        writable: bool = False, umask: int = 0o022) -> dict:
    """Write checkpoint ``seq`` of the attempt into ``target``: what was written."""
    started = time.perf_counter()
    run, node, s, it, att = selection(run_id, node_id, seq, iteration, attempt)
    if s is None:
        raise ServiceError(BAD_REQUEST, "checkout needs the checkpoint's seq (--seq N)")
    if not isinstance(target, str) or not target or "\0" in target:
        raise ServiceError(BAD_REQUEST, f"the target must be a directory path, not {target!r}")
    row = find_checkpoint(view.ledger, run, node, seq=s, iteration=it, attempt=att,
                          skip_safety=False)
    where = _resolve_target(Path(target), view.home)
    created = not os.path.lexists(where)
    if created:
        os.mkdir(where, 0o700)
    modes = writable_modes(umask) if writable else CHECKOUT_MODES
    tree = ScratchTree(view.repo, where, modes)
    try:
        counts = tree.move_to(row["tree"])
        if created or not writable:
            tree.finish_root()
    except BaseException:
        tree.close()
        _take_back(where, created)
        raise
    tree.close()
    return {"run_id": run, "node_id": node, "iteration": row["iteration"],
            "attempt": row["attempt"], "seq": row["seq"], "commit": row["commit"],
            "tree": row["tree"], "label": row.get("label"),
            "tool_use_id": row.get("tool_use_id"), "target": str(where),
            "files": counts["written"], "writable": writable,
            "not_written": [{"path": os.fsdecode(p), "reason": r}
                            for p, r in sorted(tree.skipped.items())],
            "elapsed_ms": round((time.perf_counter() - started) * 1000, 3)}


def _resolve_target(target: Path, home: Path) -> Path:
    where = Path(os.path.realpath(os.path.abspath(target)))
    real_home = Path(os.path.realpath(home))
    if where == real_home or real_home in where.parents:
        raise ServiceError(BAD_REQUEST, f"{target} is inside the snapshotd home {real_home}; "
                           "choose a directory elsewhere")
    if os.path.lexists(where):
        if not where.is_dir():
            raise ServiceError(BAD_REQUEST, f"{where} exists and is not a directory; name a new "
                               "or empty directory")
        with os.scandir(where) as entries:
            if any(entries):
                raise ServiceError(BAD_REQUEST, f"{where} is not empty; name a new or empty "
                                   "directory (a checkout never overwrites)")
    elif not where.parent.is_dir():
        raise ServiceError(BAD_REQUEST, f"{where.parent} does not exist; create it first")
    return where


def _take_back(where: Path, created: bool) -> None:
    """What a failed checkout wrote, removed: the directory itself when it made it."""
    if created:
        remove_tree(where)
        return
    fd = os.open(where, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    mode = os.fstat(fd).st_mode & 0o7777
    try:
        with os.scandir(fd) as entries:
            names = [os.fsencode(e.name) for e in entries]
        for name in names:
            remove_at(fd, name)
        os.fchmod(fd, mode)
    finally:
        os.close(fd)
