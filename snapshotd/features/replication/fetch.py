"""Fetching checkpoints from the git remote: a run's refs, or the one commit a restore needs.

Owns ``fetch_run`` (``snapshotd fetch`` and the ``fetch`` op), ``ensure_commit`` (restore anywhere:
a checkpoint the ledger knows and the local store lacks), ``rebuild_rows`` (ledger rows of adopted
refs from their commit trailers) and ``local_commit``. Promises:
- Nothing fetched is trusted: git checks every object it receives (``transfer.fsckObjects``), so
  content that does not hash to its name is refused; fetched refs land in a private staging
  namespace (removed afterwards), each chain's trailers must name its ref's attempt with strictly
  decreasing seqs, and every commit whose seq the ledger already records must carry the ledger's
  commit and tree ids. Only then does a ref move, and only forward (created, or fast-forwarded).
- A checkpoint a restore needs and the local store lacks is fetched from the remote and its
  commit and tree ids compared with the ledger row before anything is written; one that exists
  nowhere reachable is an error naming the store and the remote that were searched.
- Every remote and git error in a reply or a log line is redacted (``redact_url``,
  ``redact_text``).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pygit2

from snapshotd.core import (
    FETCH_FAILED,
    NO_REMOTE,
    NOT_FOUND,
    SEQ,
    VERIFY_FAILED,
    AttemptKey,
    ServiceError,
    TrailerError,
    Trailers,
    id_field,
    last_lines,
    redact_url,
)
from snapshotd.features.replication.gitremote import (
    GIT_TIMEOUT_S,
    NO_REMOTE_HINT,
    descends,
    normalize_remote,
    run_pattern,
)
from snapshotd.service import Service
from snapshotd.store import Store
from snapshotd_client import validate_id

log = logging.getLogger("snapshotd.replication")



def fetch_run(service: Service, run_id: str, remote: str | None = None) -> dict:
    """Bring every attempt ref of ``run_id`` from the remote into the local store (verified, see
    the module docstring), then rebuild the ledger rows from the commit trailers."""
    run_id = id_field("run_id", run_id)
    url = normalize_remote(remote if remote is not None else service.config.remote)
    if not url:
        raise ServiceError(NO_REMOTE, NO_REMOTE_HINT)
    src = run_pattern(run_id)
    outcome = _fetch_and_adopt(service, url, src)
    if not outcome["refs"] and not outcome["conflicts"]:
        raise ServiceError(NOT_FOUND, f"the remote {redact_url(url)} holds no checkpoints "
                           f"of run {run_id!r} (looked for {src})")
    outcome["rebuilt_rows"] = rebuild_rows(service, outcome["refs"])
    outcome["run_id"] = run_id
    outcome["checkpoints"] = len(service.ledger.checkpoints(run_id))
    return outcome


def rebuild_rows(service: Service, refs: list[dict]) -> int:
    """Ledger rows for the adopted refs, rebuilt from their commit trailers (the start-up
    reconciliation, run only on those attempts: a capture racing it on another attempt is never
    disturbed; one on the same attempt is serialized by the worktree lock)."""
    rebuilt = 0
    for ref in refs:
        key = AttemptKey(ref["run_id"], ref["node_id"], ref["iteration"], ref["attempt"])
        head = service.store.head(key)
        if head is None:
            continue
        attempt = service.ledger.get_attempt(key)
        if attempt is None:
            rebuilt += service.reconcile_attempt(key, str(head.id))
            continue
        with service.worktree_lock(Path(attempt.worktree)):
            head = service.store.head(key)
            if head is not None:
                rebuilt += service.reconcile_attempt(key, str(head.id))
    return rebuilt


def ensure_commit(service: Service, commit_id: str, tree_id: str, *,
                  ref: str | None = None) -> dict:
    """Make sure the local store holds checkpoint ``commit_id`` whose tree is ``tree_id`` (the
    ledger's ids), fetching ``ref`` (the attempt's ref) from the remote when it does not.
    Raises ServiceError: ``not-found`` when it exists nowhere reachable, ``verify-failed`` when
    what is found does not match the ledger, ``fetch-failed`` when the remote refused or sent bad
    objects. Returns where the commit came from."""
    store = service.store
    found = local_commit(service, commit_id)
    if found is not None:
        _check_tree(found, commit_id, tree_id, str(store.path))
        return {"source": "local"}
    url = normalize_remote(service.config.remote)
    where = f"the local store {store.path}"
    if not url:
        raise ServiceError(NOT_FOUND, f"checkpoint commit {commit_id[:12]} (tree "
                           f"{tree_id[:12]}) exists nowhere reachable: not in {where}, and no "
                           f"remote is configured (set remote in config.toml or "
                           f"SNAPSHOTD_REMOTE)")
    outcome = None
    if ref is not None:
        outcome = _fetch_and_adopt(service, url, ref)
    found = local_commit(service, commit_id)
    if found is None:
        remote_tip = None
        if outcome is not None and outcome["conflicts"]:
            remote_tip = outcome["conflicts"][0].get("remote")
        elif outcome is not None and outcome["refs"]:
            remote_tip = outcome["refs"][0]["commit"]
        detail = (f"its ref {ref} there points to {remote_tip[:12]}, which does not contain it"
                  if remote_tip else f"it has no {ref}" if ref else "no ref was named")
        conflicts = "; ".join(c["reason"] for c in (outcome or {}).get("conflicts", []))
        raise ServiceError(NOT_FOUND, f"checkpoint commit {commit_id[:12]} (tree "
                           f"{tree_id[:12]}) exists nowhere reachable: not in {where}, nor on "
                           f"the remote {redact_url(url)} ({detail})"
                           + (f"; the remote's history was refused: {conflicts}"
                              if conflicts else ""))
    _check_tree(found, commit_id, tree_id, f"the remote {redact_url(url)}")
    return {"source": "remote", "remote": redact_url(url)}


def _fetch_and_adopt(service: Service, url: str, src: str) -> dict:
    """Fetch ``src`` (a ref or a ``…/*`` pattern) into staging, verify, adopt. Returns
    ``{"remote", "refs": [{attempt…, commit, action}], "conflicts": [...]}``."""
    proc, staging = service.store.fetch_staged(url, src, GIT_TIMEOUT_S)
    try:
        if proc.returncode != 0:
            text = last_lines(proc)
            if "couldn't find remote ref" in text:
                return {"remote": redact_url(url), "refs": [], "conflicts": []}
            raise ServiceError(FETCH_FAILED, f"could not fetch {src} from "
                               f"{redact_url(url)}; nothing was restored or changed: {text}")
        repo = service.store.reader()  # opened after the fetch: sees the staged refs
        staged = [(r, str(repo.references[r].target)) for r in repo.references
                  if r.startswith(staging)]
        refs, conflicts = [], []
        for name, tip in sorted(staged):
            real = "refs/" + name[len(staging):]
            try:
                key = _key_of(real)
                _verify_chain(service, repo, key, tip)
                action = _adopt(service.store, repo, key, tip)
            except _Refused as exc:
                conflicts.append({"ref": real, "remote": tip, "reason": str(exc)})
                continue
            refs.append({**key.as_dict(), "commit": tip, "action": action})
        for c in conflicts:
            log.warning("fetch from %s refused %s: %s", redact_url(url), c["ref"], c["reason"])
        return {"remote": redact_url(url), "refs": refs, "conflicts": conflicts}
    finally:
        problem = service.store.drop_staged(staging)
        if problem is not None:
            log.warning("%s", problem)


class _Refused(Exception):
    """A fetched ref that fails verification: reported as a conflict, never adopted."""


def _key_of(ref: str) -> AttemptKey:
    try:
        key = AttemptKey.from_ref(ref)
        validate_id("run_id", key.run_id)
        validate_id("node_id", key.node_id)
    except ValueError as exc:
        raise _Refused(f"not an attempt ref: {exc}") from None
    if key.ref != ref:
        raise _Refused("not an attempt ref in canonical form")
    return key


def _verify_chain(service: Service, repo: pygit2.Repository, key: AttemptKey, tip: str) -> None:
    """The chain's trailers name ``key`` with strictly decreasing seqs, and every commit whose
    seq the ledger records carries the ledger's commit and tree ids."""
    attempt = service.ledger.get_attempt(key)
    rows = {r["seq"]: r for r in service.ledger.attempt_checkpoints(attempt.pk)} \
        if attempt else {}
    commit = repo[tip].peel(pygit2.Commit)
    previous_seq: int | None = None
    while True:
        t = Trailers(commit.message)
        mismatch = t.key_mismatch(key)
        if mismatch is not None:
            raise _Refused(f"commit {str(commit.id)[:12]} says {mismatch}")
        try:
            seq = t.seq
        except TrailerError:
            seq = None
        if seq is None:
            raise _Refused(f"commit {str(commit.id)[:12]} has no valid {SEQ}")
        if seq < 0 or (previous_seq is not None and seq >= previous_seq):
            raise _Refused(f"commit {str(commit.id)[:12]} has seq {seq} out of order")
        row = rows.get(seq)
        if row is not None and not row.get("pruned_at") and (
                row["commit"] != str(commit.id) or row["tree"] != str(commit.tree_id)):
            raise _Refused(f"seq {seq}: the remote has commit {str(commit.id)[:12]} tree "
                           f"{str(commit.tree_id)[:12]}, the ledger records commit "
                           f"{row['commit'][:12]} tree {row['tree'][:12]}")
        previous_seq = seq
        if not commit.parents:
            return
        commit = commit.parents[0]


def _adopt(store: Store, repo: pygit2.Repository, key: AttemptKey, tip: str) -> str:
    """Create or fast-forward the local ref to ``tip`` (compare-and-swap); never rewind it."""
    ref = key.ref
    current = repo.references.get(ref)
    local = str(current.target) if current is not None else None
    if local == tip:
        return "unchanged"
    if local is not None:
        if descends(repo, local, tip):
            return "local-ahead"
        if not descends(repo, tip, local):
            raise _Refused(f"the remote's history of {ref} ({tip[:12]}) and the local one "
                           f"({local[:12]}) diverge; the local one is kept")
    proc = store.adopt_ref(key, tip, local)
    if proc.returncode != 0:
        raise _Refused(f"the local ref moved meanwhile: {last_lines(proc)}")
    return "updated" if local else "created"


def local_commit(service: Service, commit_id: str) -> pygit2.Commit | None:
    """The checkpoint commit ``commit_id`` in the local store, or None when it is not there."""
    try:
        return service.store.reader()[commit_id].peel(pygit2.Commit)
    except (KeyError, ValueError, pygit2.GitError):
        return None


def _check_tree(commit: pygit2.Commit, commit_id: str, tree_id: str, where: str) -> None:
    if str(commit.id) != commit_id or str(commit.tree_id) != tree_id:
        raise ServiceError(VERIFY_FAILED, f"checkpoint commit {commit_id[:12]} from "
                           f"{where} has tree {str(commit.tree_id)[:12]}, the ledger records "
                           f"{tree_id[:12]}; refusing to restore it")
