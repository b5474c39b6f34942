"""Automatic maintenance: the store packed (delta-compressed) on a schedule and past a loose
object count, and the short-grace prune, both without holding captures back.

Owns the maintenance thread, its ``status`` section (``maintenance``) and ``prune_unreachable``
(what ``gc --prune-grace 0s`` runs). Promises (the rules and their reasons: docs/durability.md,
"Maintenance"):
- Packing (``git repack -d``; ``-a -d -k`` past ``maintenance_pack_limit`` packs) runs without
  the store's gate: captures go on writing loose objects; no object that is not in a pack is
  deleted, so nothing a capture wrote or reuses goes.
- The prune holds the gate alone twice, briefly: to name every stat cache's tree before the
  reachable pack is written, and to pack what captures made meanwhile and delete the cruft
  pack. Neither waits on git's whole-store work, which runs between them.
- One maintenance or gc at a time (``RUN_LOCK``); a failed pass is counted and logged.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from snapshotd.core import INTERNAL, Config, ServiceError
from snapshotd.features.budget import check_budget, limits
from snapshotd.service import Service
from snapshotd.store import (
    cruft_packs,
    drop_cruft,
    drop_pins,
    loose_count,
    object_counts,
    pack_count,
    pack_since,
    pack_store,
    pin_tips,
    pinned,
    ref_tips,
    repack_cruft,
)

if TYPE_CHECKING:
    from snapshotd.core import Registry

log = logging.getLogger("snapshotd.maintenance")

# One gc or maintenance at a time: a prune's rewritten chain is unreferenced until its ref
# moves, and a cruft pack is deleted only by the pass that wrote it.
RUN_LOCK = threading.Lock()
# How often the thread looks at the loose object count (a listing of 256 directories), and at
# the disk budget (``git count-objects``, ``statvfs``).
POLL_S = 5.0
BUDGET_POLL_S = 60.0


def store_size(service: Service) -> int:
    """Bytes of the store's objects, loose and packed (``git count-objects -v``)."""
    counts = object_counts(service.store.path)
    return counts.get("size", 0) + counts.get("size-pack", 0) + counts.get("size-garbage", 0)


def maintain(service: Service, pack_limit: int) -> dict:
    """One packing pass (the caller holds ``RUN_LOCK``): a report of when, how long, the
    bytes before and after and whether the packs were consolidated."""
    store = service.store
    started, clock = time.time(), time.monotonic()
    before = store_size(service)
    consolidate = pack_count(store.path) >= pack_limit
    proc = pack_store(store.path, consolidate=consolidate)
    # Packs may have been deleted (consolidation): handles are reopened before next use.
    store.replaced_objects()
    if proc.returncode != 0:
        raise ServiceError(INTERNAL, "git repack failed: "
                           f"{proc.stderr.decode(errors='replace').strip()}")
    return {"at": started, "duration_s": round(time.monotonic() - clock, 3),
            "bytes_before": before, "bytes_after": store_size(service),
            "consolidated": consolidate}


def prune_unreachable(service: Service) -> dict:
    """Drop every object no ref and no stat cache names, holding captures back only for the
    two short steps under the gate (the caller holds ``RUN_LOCK``). See the module's promise."""
    store = service.store
    path = store.path
    clock = time.monotonic()
    with store.gate.exclusive():
        # No capture in flight: every object written so far is named by a ref or a keep ref.
        service.caches.refresh_keep_refs(lambda _root: contextlib.nullcontext())
        pin_tips(path, ref_tips(path))
    held = time.monotonic() - clock
    try:
        proc = repack_cruft(path)
        if proc.returncode != 0:
            raise ServiceError(INTERNAL, "git repack --cruft failed: "
                               f"{proc.stderr.decode(errors='replace').strip()}")
        # The reachable pack holds all the pins reach: pinned commits bound git's walks, and a
        # pinned tree needs no walk at all.
        pins, pinned_trees = pinned(path)
        cruft = cruft_packs(path)
        # Off the gate, what captures made while the reachable pack was written; under it,
        # only what they made since.
        seen_commits, seen_trees = _split(ref_tips(path))
        seen_trees = [t for t in seen_trees if t not in pinned_trees]
        pack_since(path, seen_commits + seen_trees, pins)
        step = time.monotonic()
        with store.gate.exclusive():
            service.caches.refresh_keep_refs(lambda _root: contextlib.nullcontext())
            known = set(seen_commits) | set(seen_trees) | pinned_trees
            commits, trees = _split(ref_tips(path))
            fresh = [t for t in commits + trees if t not in known]
            # What the seen tips reach is packed already: their commits bound the walk (never
            # their trees, which git would read whole).
            pack_since(path, fresh, pins + seen_commits)
            freed = drop_cruft(cruft)
            drop_pins(path)
            store.replaced_objects()
        held = max(held, time.monotonic() - step)
    finally:
        store.replaced_objects()
    return {"cruft_bytes_freed": freed, "longest_gate_hold_s": round(held, 3)}


def _split(tips: dict[str, str]) -> tuple[list[str], list[str]]:
    """The commits the refs name, and the trees (a stat cache's keep ref names one) that are
    no named commit's tree: git would read such a tree whole when nothing new reaches it."""
    commits, roots, trees = set(), set(), set()
    for value in tips.values():
        kind, oid, tree = (value.split(" ") + [""])[:3]
        if kind == "commit":
            commits.add(oid)
            roots.add(tree)
        elif kind == "tree":
            trees.add(oid)
    return sorted(commits), sorted(trees - roots)


def attach(service: Service, server: Registry, config: Config,
           budget: tuple[Callable[[], int], Callable[[int], dict]]) -> None:
    """Run the maintenance thread (packing, the disk budget) and add the ``maintenance`` and
    ``disk`` status sections. ``budget``: gc's measure and size policy (``check_budget``)."""
    state: dict = {"last": None, "errors": 0, "last_error": None, "running": False,
                   "interval_s": float(config.maintenance_interval_s),
                   "loose_threshold": int(config.maintenance_loose_objects)}
    disk: dict = {**limits(config), "warning": None, "last_prune": None, "errors": 0}
    stop = threading.Event()
    limit = int(config.maintenance_pack_limit)
    budget_every = min(BUDGET_POLL_S, state["interval_s"] or BUDGET_POLL_S)

    def loop() -> None:
        last = checked = time.monotonic()
        while not stop.wait(min(POLL_S, state["interval_s"] or POLL_S)):
            loose = loose_count(service.store.path)
            due = state["interval_s"] > 0 and time.monotonic() - last >= state["interval_s"]
            if loose and (due or loose >= state["loose_threshold"] > 0):
                last = time.monotonic()
                run_once(service, state, limit)
            if time.monotonic() - checked >= budget_every:
                checked = time.monotonic()
                _budget(service, disk, budget)

    def maintain_op(_fields: dict) -> dict:
        # One pass now (a bench, a script): waits for a gc or a pass already running.
        with RUN_LOCK:
            state["last"] = maintain(service, limit)
        return dict(state["last"])

    server.register("maintain", maintain_op)
    threading.Thread(target=loop, name="snapshotd-maintenance", daemon=True).start()
    server.shutdown_hooks.append(stop.set)
    server.status_extras.append(lambda: {"maintenance": dict(state), "disk": dict(disk)})


def _budget(service: Service, disk: dict,
            budget: tuple[Callable[[], int], Callable[[int], dict]]) -> None:
    try:
        check_budget(service, disk, *budget)
    except Exception as exc:  # noqa: BLE001 - counted and logged, the next check tries again
        disk["errors"] += 1
        disk["last_error"] = f"{type(exc).__name__}: {exc}"
        log.error("the disk budget check failed: %s", exc)


def run_once(service: Service, state: dict, pack_limit: int) -> None:
    """One pass unless a gc or another pass is running; its report or its error in ``state``."""
    if not RUN_LOCK.acquire(blocking=False):
        return
    state["running"] = True
    try:
        state["last"] = maintain(service, pack_limit)
        log.info("maintenance packed the store: %d -> %d bytes in %.2fs",
                 state["last"]["bytes_before"], state["last"]["bytes_after"],
                 state["last"]["duration_s"])
    except Exception as exc:  # noqa: BLE001 - counted and logged, the next pass tries again
        state["errors"] += 1
        state["last_error"] = f"{type(exc).__name__}: {exc}"
        log.error("maintenance failed: %s", exc)
    finally:
        state["running"] = False
        RUN_LOCK.release()
