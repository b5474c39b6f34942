"""Bisect and checkout as the front ends run them: here, on the home opened for reading.

Owns ``run_bisect`` and ``run_checkout``, the one path of ``snapshotd bisect``/``checkout``
and the MCP tool into ``snapshotd.features.bisect``. Neither goes through the daemon: the
command must run as the caller, in the caller's environment, and both only read the ledger
and the store (``backend.read_home``: beside a running daemon or without one). Promises:
failures are ``ServiceError``s whose message says what to do; nothing here prints or exits.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from snapshotd.core import process_umask
from snapshotd.ops import backend

if TYPE_CHECKING:
    from snapshotd.features.bisect import Progress
    from snapshotd.features.review import HomeView


def run_bisect(fields: dict[str, Any], argv: list[str], *, home: Path | None = None,
               timeout: float | None = None, max_steps: int | None = None,
               progress: Progress | None = None, output: int | None = None,
               scratch_parent: Path | None = None) -> dict:
    """Bisect the attempt ``fields`` names (``run_id``, ``node_id``, ``good``, ``bad``,
    ``iteration``, ``attempt``) with ``argv``."""
    from snapshotd.features.bisect import bisect_attempt, plan_bisect

    def call(view: HomeView) -> dict:
        plan = plan_bisect(view, **fields)
        return bisect_attempt(view, plan, argv, timeout=timeout, max_steps=max_steps,
                              progress=progress, output=output, scratch_parent=scratch_parent)

    return backend.read_home(call, home=home)


def run_checkout(fields: dict[str, Any], *, home: Path | None = None) -> dict:
    """Materialize the checkpoint ``fields`` names (``run_id``, ``node_id``, ``seq``,
    ``iteration``, ``attempt``, ``target``, ``writable``) read-only; ``umask`` this process's
    unless given."""
    from snapshotd.features.bisect import checkout_checkpoint

    sent = dict(fields)
    sent.setdefault("umask", process_umask())
    return backend.read_home(lambda view: checkout_checkpoint(view, **sent), home=home)
