"""Purge: a path taken out of every checkpoint of a run, for the day a key is found in history.

Owns the ``purge`` op (``snapshotd purge RUN PATH``), its journal (``<home>/purge-journal.json``)
and finishing a purge a crash interrupted. Every write to the store is a ``Store`` method
(``purge_chain``, ``set_attempt_ref``); the ledger's is ``Ledger.apply_purge``. Promises (in
full: docs/secrets.md, "Purge"):
- Each attempt holding the path gets a fresh chain from its first such checkpoint on (same
  messages and seqs, the path gone from every tree); its rows and ref move to it; earlier
  checkpoints keep their ids.
- Crash safety as gc's (new commits under a hold ref, journal, ledger, ref, stat cache): per
  attempt the path is gone from all of its chain or none; ``purge`` run again finishes a run.
- The worktree's stat cache and its keep ref are forgotten (``StatCaches.forget``); the old
  objects go at the next ``gc`` past its safety interval (never from a capture in flight).
- Each rewritten attempt lists the purge as an event (``features.events``) at its newest seq.
- A path that is absent, absolute, or climbs out (``..``) is ``bad-request``; unknown run: ``not-found``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2

from snapshotd.core import (
    BAD_REQUEST,
    NOT_FOUND,
    AttemptKey,
    ServiceError,
    Trailers,
    crash_point,
    id_field,
    without_findings,
)
from snapshotd.features.events import record_event
from snapshotd.store import read_journal, write_journal

if TYPE_CHECKING:
    from snapshotd.core import Config, Registry
    from snapshotd.ledger import Attempt
    from snapshotd.service import Service

log = logging.getLogger("snapshotd.purge")

JOURNAL = "purge-journal.json"


def attach(service: Service, server: Registry, config: Config) -> None:
    """Serve the ``purge`` op, after finishing a purge a crash interrupted."""
    recover_journal(service)
    server.register("purge", lambda fields: purge_op(service, fields))


def purge_op(service: Service, fields: dict) -> dict:
    """``{"run_id", "path"}`` → ``{"run_id", "path", "attempts": [{..., "rewritten"}]}``."""
    run_id = id_field("run_id", fields.get("run_id"))
    path = _checked_path(fields.get("path"))
    attempts = service.ledger.attempts(run_id)
    if not attempts:
        raise ServiceError(NOT_FOUND, f"run {run_id} has no attempts")
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
        remap, tip, final = _rewrite(service, current, chain, parent, path)
        crash_point("purge-after-commits")
        journal = {"key": attempt.key.as_dict(), "path": path, "new_tip": tip,
                   "remap": remap, "final_commit": final}
        _write_journal(service, journal)
        crash_point("purge-after-journal")
        _complete(service, journal)
        (service.home / JOURNAL).unlink(missing_ok=True)
        service.store.release_purge_holds(attempt.key)
        # Listed as an event at the newest seq: its state is the first without the path.
        record_event(service.ledger, current, "purge", chain[-1]["seq"], f"purge {path}")
    log.warning("purged %s from %d checkpoint(s) of %s", path, len(chain), attempt.key)
    return len(chain)


def recover_journal(service: Service) -> bool:
    """Finish a purge that a crash interrupted (idempotent)."""
    path = service.home / JOURNAL
    journal = read_journal(path, "purge", "run the purge again")
    if journal is not None:
        attempt = service.ledger.get_attempt(AttemptKey(**journal["key"]))
        if attempt is not None:
            # Parts that start before this one may capture already (a settle window the
            # crash left open): not while the chain is finished.
            with service.worktree_lock(Path(attempt.worktree)):
                _complete(service, journal)
        path.unlink(missing_ok=True)
        log.warning("completed an interrupted purge of %s", journal.get("path"))
    # A crash before the journal leaves a new chain nothing will use; after it, one now named.
    held = service.store.release_purge_holds()
    if held and journal is None:
        log.warning("dropped %d purge hold(s) of a purge killed before its journal: "
                    "run the purge again", held)
    return journal is not None


def _complete(service: Service, journal: dict) -> None:
    """Ledger rows, then the ref, then the stat cache: idempotent, so a crash anywhere in it is
    finished by running it again from the journal. Checkpoints taken after the crash, on the
    old chain (the ref had not moved), are rewritten onto the new one as well."""
    key = AttemptKey(**journal["key"])
    attempt = service.ledger.get_attempt(key)
    if attempt is None:
        return
    remap = {int(seq): tuple(v) for seq, v in journal["remap"].items()}
    service.ledger.apply_purge(attempt, remap, journal.get("final_commit"))
    crash_point("purge-after-ledger")
    tip = journal.get("new_tip")
    later = [r for r in service.ledger.attempt_checkpoints(attempt.pk)
             if r["pruned_at"] is None and r["seq"] > max(remap, default=-1)]
    if later and tip:
        attempt = service.ledger.get_attempt(key) or attempt
        extra, tip, final = _rewrite(service, attempt, later, tip, journal["path"])
        service.ledger.apply_purge(attempt, {int(seq): tuple(v) for seq, v in extra.items()},
                                   final)
        log.warning("%s: %d checkpoint(s) taken after an interrupted purge moved onto the "
                    "purged chain", key, len(later))
    if tip:
        service.store.set_attempt_ref(key, tip)
    # The stat cache holds the path's blob and would keep it reachable (its keep ref, and
    # the tree gc names from a cache on disk): it starts afresh.
    service.caches.forget(Path(attempt.worktree))
    if service.change_source is not None:
        # The watcher's changed paths were relative to the cache just dropped: the next capture
        # scans fully (a verification judging them against a cold cache saw the untouched
        # files the cache now lacks, the purged one too, as drift no event reported).
        service.change_source.failed(Path(attempt.worktree))


def _rewrite(service: Service, attempt: Attempt, rows: list[dict], parent: str | None,
             path: str) -> tuple[dict[str, list], str | None, str | None]:
    """The commits of ``rows`` rewritten without ``path`` onto ``parent`` (held from gc until
    the attempt ref names them), their messages without the path's secret findings: the
    journal's ``{seq: [commit, parent, tree, secrets, added, modified, deleted]}`` (the row's
    new secrets mark, the trailer's text, and its change counts against the tree before it),
    the new tip, and the attempt's final commit when one of ``rows`` was it."""
    new = service.store.purge_chain([r["commit"] for r in rows], parent, path,
                                    hold=attempt.key,
                                    message=lambda text: without_findings(text, path))
    repo = service.store.reader()
    before = str(repo[parent].peel(pygit2.Commit).tree_id) if parent else None
    remap: dict[str, list] = {}
    final = None
    for row, (commit, tree) in zip(rows, new, strict=True):
        secrets = Trailers(repo[commit].peel(pygit2.Commit).message).secrets_text
        remap[str(row["seq"])] = [commit, parent, tree, secrets,
                                  *service.store.tree_changes(before, tree)]
        if row["commit"] == attempt.final_commit:
            final = commit
        parent, before = commit, tree
    return remap, parent, final


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
        raise ServiceError(BAD_REQUEST, "path must be a worktree-relative path")
    if value.startswith("/") or ".." in value.split("/"):
        raise ServiceError(BAD_REQUEST,
                           f"path must be relative to the worktree, got {value!r}")
    return value.strip("/")
