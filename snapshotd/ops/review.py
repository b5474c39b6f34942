"""The review ops as the front ends run them: diff, blame and export, daemon or local.

Owns ``run_diff``, ``run_blame`` and ``run_export``: each goes to the daemon when one answers
(so it is serialized with the captures of that worktree), else runs on the home under the
daemon's lock (``snapshotd.ops.backend.run_op``); the feature modules
(``snapshotd.features.review``) hold only the operations themselves.

Promises:
- A blame reply whose lines were left out (too large for one frame) is completed here from the
  store the reply names; a diff reply is returned as the op gave it (``backend.complete_diff``
  renders what it left out).
- Failures are the ``ServiceError`` of ``backend.run_op``; nothing here prints or exits.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from snapshotd.core import NOT_FOUND, ServiceError, process_umask
from snapshotd.ops import backend

if TYPE_CHECKING:
    from snapshotd.service import Service

# A --worktree diff captures the worktree first; a blame walks one attempt's chain; an export
# may write a whole series.
DIFF_TIMEOUT_S = 3600.0
BLAME_TIMEOUT_S = 120.0
EXPORT_TIMEOUT_S = 900.0


def run_diff(fields: dict[str, Any], *, home: Path | None = None, socket: Path | None = None,
             timeout: float = DIFF_TIMEOUT_S) -> dict:
    """The ``diff`` op's reply (``snapshotd.features.review.diff.diff_checkpoints``)."""

    def local(service: Service) -> dict:
        from snapshotd.features.review import diff_checkpoints

        return diff_checkpoints(service, **fields)

    return backend.run_op("diff", fields, local, home=home, socket=socket, timeout=timeout)


def run_blame(fields: dict[str, Any], *, home: Path | None = None,
              socket: Path | None = None) -> dict:
    """Blame through the daemon when one answers, else on the home directly; a reply whose
    lines were left out (too large for a frame) is completed here from the store."""
    from snapshotd.features.review import attribute, blame_checkpoint, blame_commit

    def local(service: Service) -> dict:
        return blame_checkpoint(service, **fields)

    result = backend.run_op("blame", fields, local, home=home, socket=socket,
                            timeout=BLAME_TIMEOUT_S)
    if result.get("lines_omitted"):
        from snapshotd.store import Store

        store_path = Path(result["store"])
        if store_path.name != "store.git" or not (store_path / "HEAD").exists():
            raise ServiceError(NOT_FOUND, f"the store {store_path} named by the daemon's "
                                                 "reply is not readable here")
        repo = Store(store_path.parent).reader()
        # The daemon checked the limits; the same range, blamed here.
        lines = blame_commit(repo, result["commit"], result["path"],
                             first=result.get("first_line") or 1, last=result.get("last_line"))
        attribute(lines, {seq: call for seq, call in result.pop("tool_calls_by_seq", [])})
        result = dict(result, lines=lines)
        result.pop("lines_omitted")
    return result


def run_export(fields: dict[str, Any], *, home: Path | None = None,
               socket: Path | None = None) -> dict:
    """Export through the daemon when one answers, else on the home directly. ``umask`` is
    this process's unless given: what the export writes gets git's modes under it."""
    from snapshotd.features.review import export_fields

    fields = dict(fields)
    fields.setdefault("umask", process_umask())

    def local(service: Service) -> dict:
        return export_fields(service, fields)

    return backend.run_op("export", fields, local, home=home, socket=socket,
                          timeout=EXPORT_TIMEOUT_S)
