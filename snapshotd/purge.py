"""Purge: a path taken out of every checkpoint of a run, for the day a key is found in history.

Owns the ``purge`` op (``snapshotd purge RUN PATH``), its journal (``<home>/purge-journal.json``)
and finishing a purge a crash interrupted. Every write to the store is a ``Store`` method
(``purge_chain``, ``set_attempt_ref``); the ledger's is ``Ledger.apply_purge``.

Promises:
- Each attempt of the run whose checkpoints hold the path gets a fresh chain from its first such
  checkpoint on: same messages, seqs and everything else, the path gone from every tree; the
  ledger rows and the attempt ref move to it. Checkpoints before that one keep their ids.
- Crash safety as gc's: new commits first, then the journal, then the ledger transaction, then
  the ref, then the stat cache; a journal left by a crash is completed at the next start
  (idempotent), so the path is gone from all of that attempt's chain or (a crash before the
  journal) from none of it. Attempts are purged one after another: after a crash, some
  attempts of the run may be purged and others not yet; ``purge`` run again finishes them.
- The worktree's stat cache is forgotten, on disk and its keep ref too (``Store.forget_cache``:
  it would keep the old blob reachable), after a crash as well; the old commits and blobs are
  unreachable afterwards and go at the next ``gc`` once older than its safety interval (a
  capture in flight is never robbed of an object).
- A path that is absent, absolute, or climbs out (``..``) is ``bad-request``; an unknown run is
  ``not-found``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from snapshotd import errors, faults
from snapshotd.errors import ServiceError, id_field
from snapshotd.journal import read_journal, write_journal
from snapshotd.keys import AttemptKey

if TYPE_CHECKING:
    from snapshotd.config import Config
    from snapshotd.ledger import Attempt
    from snapshotd.server import Server
    from snapshotd.service import Service

log = logging.getLogger("snapshotd.purge")

JOURNAL = "purge-journal.json"


def attach(service: Service, server: Server, config: Config) -> None:
    """Serve the ``purge`` op, after finishing a purge a crash interrupted."""
    recover_journal(service)
    server.register("purge", lambda fields: purge_op(service, fields))


def purge_op(service: Service, fields: dict) -> dict:
    """``{"run_id", "path"}`` → ``{"run_id", "path", "attempts": [{..., "rewritten"}]}``."""
    run_id = id_field("run_id", fields.get("run_id"))
    path = _checked_path(fields.get("path"))
    attempts = service.ledger.attempts(run_id)
    if not attempts:
        raise ServiceError(errors.NOT_FOUND, f"run {run_id} has no attempts")
    done = []
    for attempt in attempts:
        rewritten = purge_attempt(service, attempt, path)
        if rewritten:
            done.append({**attempt.key.as_dict(), "rewritten": rewritten})
    return {"run_id": run_id, "path": path, "attempts": done}


def purge_attempt(service: Service, attempt: Attempt, path: str) -> int:
    """Take ``path`` out of one attempt's checkpoints; how many were rewritten."""
    root = Path(attempt.worktree)
    with service.worktree_lock(root):
        current = service.ledger.get_attempt(attempt.key) or attempt
        rows = [r for r in service.ledger.attempt_checkpoints(current.pk)
                if r["pruned_at"] is None]
        repo = service.store.reader()
        first = next((i for i, r in enumerate(rows) if _holds(repo, r["tree"], path)), None)
        if first is None:
            return 0
        parent: str | None = rows[first - 1]["commit"] if first > 0 else None
        chain = rows[first:]
        new = service.store.purge_chain([r["commit"] for r in chain], parent, path)
        faults.crash_point("purge-after-commits")
        remap: dict[str, list] = {}
        final = None
        for row, (commit, tree) in zip(chain, new, strict=True):
            remap[str(row["seq"])] = [commit, parent, tree]
            if row["commit"] == current.final_commit:
                final = commit
            parent = commit
        journal = {"key": attempt.key.as_dict(), "path": path, "new_tip": parent,
                   "remap": remap, "final_commit": final}
        _write_journal(service, journal)
        faults.crash_point("purge-after-journal")
        _complete(service, journal)
        (service.home / JOURNAL).unlink(missing_ok=True)
    log.warning("purged %s from %d checkpoint(s) of %s", path, len(chain), attempt.key)
    return len(chain)


def recover_journal(service: Service) -> bool:
    """Finish a purge that a crash interrupted (idempotent)."""
    path = service.home / JOURNAL
    journal = read_journal(path, "purge", "run the purge again")
    if journal is None:
        return False
    _complete(service, journal)
    path.unlink(missing_ok=True)
    log.warning("completed an interrupted purge of %s", journal.get("path"))
    return True


def _complete(service: Service, journal: dict) -> None:
    """Ledger rows, then the ref, then the stat cache: idempotent, so a crash anywhere in it is
    finished by running it again from the journal."""
    key = AttemptKey(**journal["key"])
    attempt = service.ledger.get_attempt(key)
    if attempt is None:
        return
    remap = {int(seq): (v[0], v[1], v[2]) for seq, v in journal["remap"].items()}
    service.ledger.apply_purge(attempt, remap, journal.get("final_commit"))
    faults.crash_point("purge-after-ledger")
    if journal.get("new_tip"):
        service.store.set_attempt_ref(key, journal["new_tip"])
    # The stat cache holds the path's blob and would keep it reachable (its keep ref, and
    # the tree gc names from a cache on disk): it starts afresh.
    service.store.forget_cache(Path(attempt.worktree))


def _write_journal(service: Service, journal: dict) -> None:
    write_journal(service.home / JOURNAL, journal)


def _holds(repo: pygit2.Repository, tree_id: str, path: str) -> bool:
    tree = repo[tree_id].peel(pygit2.Tree)
    try:
        tree[path]
    except KeyError:
        return False
    return True


def _checked_path(value: object) -> str:
    if not isinstance(value, str) or not value.strip("/") or "\0" in value:
        raise ServiceError(errors.BAD_REQUEST, "path must be a worktree-relative path")
    if value.startswith("/") or ".." in value.split("/"):
        raise ServiceError(errors.BAD_REQUEST,
                           f"path must be relative to the worktree, got {value!r}")
    return value.strip("/")
