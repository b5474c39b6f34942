"""The disk budget: a byte cap for the home's store and a free-space floor on its disk, with a
warning before the disk fills and the oldest ended runs deleted only when a limit needs it.

Owns ``check_budget`` (run by the maintenance thread) and the ``disk`` status section. Promises
(docs/durability.md, "The disk budget"): nothing is deleted while the store is within
``store_budget`` and the disk has ``free_space_floor`` free; past either, a warning is logged
(once per crossing) and shown in ``status``, and ``gc``'s own size policy runs
(``--max-store-size``: whole ended runs, oldest first, never one with an active attempt; the
deleted runs are reported as ``gc`` reports them), their objects reclaimed at once by the
prune that never holds captures back (``maintenance.prune_unreachable``).
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

from snapshotd.core import Config, parse_size
from snapshotd.service import Service

log = logging.getLogger("snapshotd.budget")


def limits(config: Config) -> dict:
    """The budget and the floor in bytes (None: none)."""
    return {"budget_bytes": parse_size(config.store_budget) if config.store_budget else None,
            "floor_bytes": parse_size(config.free_space_floor) if config.free_space_floor
            else None}


def check_budget(service: Service, state: dict, measure: Callable[[], int],
                 enforce: Callable[[int], dict]) -> None:
    """Measure, warn on a crossing, and delete the oldest ended runs when a limit needs it;
    ``state`` is the ``disk`` status section (limits from ``limits``). ``measure`` and
    ``enforce`` are gc's (``store_bytes``, and ``run_gc`` of ``--max-store-size N`` with a
    zero grace), handed in by ``gc.attach``: the check and the deletion it starts measure the
    store alike."""
    store_bytes = measure()
    stat = os.statvfs(service.store.path)
    free = stat.f_bavail * stat.f_frsize
    budget, floor = state["budget_bytes"], state["floor_bytes"]
    over = budget is not None and store_bytes > budget
    low = floor is not None and free < floor
    state.update(store_bytes=store_bytes, free_bytes=free, over_budget=over, below_floor=low,
                 checked_at=time.time())
    warning = None
    if over:
        warning = f"the store is {store_bytes} bytes, over its {budget}-byte budget"
    if low:
        warning = (f"{warning}; " if warning else "") + \
            f"the disk has {free} bytes free, under the {floor}-byte floor"
    if warning and warning.split(",")[0] != (state.get("warning") or "").split(",")[0]:
        log.warning("%s: deleting the oldest ended runs (`snapshotd du` shows where the bytes "
                    "are)", warning)
    state["warning"] = warning
    if not warning:
        return
    target = min(budget if over else store_bytes,
                 store_bytes - (floor - free) if low else store_bytes)
    report = enforce(max(0, target))
    if report["deleted_runs"]:
        state["last_prune"] = {"at": time.time(), "deleted_runs": report["deleted_runs"],
                               "store_bytes_before": report["store_bytes_before"],
                               "store_bytes_after": report["store_bytes_after"]}
        log.warning("the disk budget deleted %d ended run(s): %s", len(report["deleted_runs"]),
                    ", ".join(r["run_id"] for r in report["deleted_runs"]))
