"""Handoff: the manifest a node moves to another host with, and its verification there.

Owns ``build_handoff`` (``snapshotd handoff`` and the ``handoff`` op), the manifest's seal
(``manifest_digest``) and shape check (``check_manifest``), and ``verify_handoff``, which
``attempt begin --resume --handoff`` runs before the attempt begins (docs/scale-out.md).

Promises:
- The manifest is compact, versioned JSON sealed by a sha256 ``digest`` of its canonical content:
  an edited or damaged manifest is refused.
- Before a resume from a handoff, every digest is checked against the store and the ledger (the
  run is fetched from the remote when needed), resume is checked to restore exactly the
  manifest's checkpoint (a newer checkpoint makes the handoff stale), and the previous owner's
  attempt is fenced: it stops being active, so its later captures are refused wherever the
  ledger is shared.
- The remote appears in a manifest only through ``redact_url``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import socket
import time

from snapshotd.core import (
    BAD_REQUEST,
    CONFLICT,
    NOT_FOUND,
    VERIFY_FAILED,
    AttemptKey,
    ServiceError,
    id_field,
    opt_int_field,
    redact_url,
)
from snapshotd.features.replication.fetch import (
    ensure_commit,
    fetch_run,
    local_commit,
    rebuild_rows,
)
from snapshotd.features.replication.gitremote import descends, ls_remote, normalize_remote
from snapshotd.features.replication.pusher import Replicator
from snapshotd.ledger import ACTIVE, Attempt
from snapshotd.service import Service, list_run

log = logging.getLogger("snapshotd.replication")

HANDOFF_FORMAT = "snapshotd-handoff"
HANDOFF_VERSION = 1


def build_handoff(service: Service, run_id: str, node_id: str, *, iteration: int | None = None,
                  attempt: int | None = None, to: str | None = None,
                  replicator: Replicator | None = None) -> dict:
    """The versioned handoff manifest of a node's current attempt (docs/scale-out.md)."""
    run_id = id_field("run_id", run_id)
    node_id = id_field("node_id", node_id)
    ledger = service.ledger
    attempts = [a for a in ledger.attempts(run_id) if a.key.node_id == node_id
                and (iteration is None or a.key.iteration == iteration)
                and (attempt is None or a.key.attempt == attempt)]
    if not attempts:
        raise ServiceError(NOT_FOUND, f"no attempt of run {run_id!r} node {node_id!r} "
                           "matches"
                           + (f" iteration {iteration}" if iteration is not None else "")
                           + (f" attempt {attempt}" if attempt is not None else ""))
    current = max(attempts, key=lambda a: (a.key.iteration, a.key.attempt))
    cp = ledger.last_checkpoint(current.pk)
    cp_attempt = current
    if cp is None:  # a fresh attempt with no capture yet: its predecessor's newest
        for other in sorted(attempts, key=lambda a: (a.key.iteration, a.key.attempt),
                            reverse=True):
            cp = ledger.last_checkpoint(other.pk)
            if cp is not None:
                cp_attempt = other
                break
    gaps = [g for g in list_run(ledger, service.gaps, run_id, node_id)["gaps"]
            if not g.get("resolved") and g.get("attempt") in (None, current.key.attempt)
            and g.get("iteration") in (None, current.key.iteration)]
    url = normalize_remote(service.config.remote)
    replication: dict = {"remote": redact_url(url) if url else None}
    checkpoint = None
    if cp is not None:
        checkpoint = {"attempt": cp_attempt.key.attempt, "iteration": cp_attempt.key.iteration,
                      "seq": cp["seq"], "commit": cp["commit"], "tree": cp["tree"],
                      "parent": cp["parent"], "source": cp["source"],
                      "created_at": cp["created_at"], "ref": cp_attempt.key.ref}
        replication.update(_replication_of(service, url, cp_attempt.key, cp["commit"],
                                           replicator))
    manifest = {
        "format": HANDOFF_FORMAT, "version": HANDOFF_VERSION, "created_at": time.time(),
        "run_id": run_id, "node_id": node_id, "iteration": current.key.iteration,
        "attempt": current.key.attempt,
        "owner": {"host": socket.gethostname(), "pid": current.owner_pid,
                  "worktree": current.worktree, "state": current.state},
        "epoch": current.epoch, "to": to, "checkpoint": checkpoint,
        "gaps": gaps[:100], "gaps_total": len(gaps), "replication": replication,
    }
    manifest["next_action"] = _next_action(manifest)
    manifest["digest"] = manifest_digest(manifest)
    return manifest


def manifest_digest(manifest: dict) -> str:
    """sha256 of the manifest's canonical JSON without its ``digest`` field."""
    body = {k: v for k, v in manifest.items() if k != "digest"}
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def check_manifest(manifest: object) -> dict:
    """Validate a handoff manifest's shape, version and digest; ServiceError otherwise."""
    if not isinstance(manifest, dict) or manifest.get("format") != HANDOFF_FORMAT:
        raise ServiceError(BAD_REQUEST, "not a snapshotd handoff manifest (write one with "
                           "`snapshotd handoff RUN --node X --output FILE`)")
    if manifest.get("version") != HANDOFF_VERSION:
        raise ServiceError(BAD_REQUEST, "handoff manifest version "
                           f"{manifest.get('version')!r} is not supported (this snapshotd "
                           f"reads version {HANDOFF_VERSION})")
    if manifest.get("digest") != manifest_digest(manifest):
        raise ServiceError(VERIFY_FAILED, "the handoff manifest's digest does not match its "
                           "content: it was edited or damaged; write a new one")
    cp = manifest.get("checkpoint")
    if cp is not None:
        for name in ("commit", "tree"):
            if not isinstance(cp.get(name), str) or not re.fullmatch(r"[0-9a-f]{40}", cp[name]):
                raise ServiceError(BAD_REQUEST,
                                   f"handoff checkpoint {name} is not a sha-1 id")
    return manifest


def verify_handoff(service: Service, fields: dict) -> dict:
    """Before ``attempt_begin … resume`` with ``handoff``: check the manifest, fetch the run
    from the remote as needed, verify every digest against store and ledger, check that resume
    will restore exactly the manifest's checkpoint, and fence the previous owner's attempt."""
    manifest = check_manifest(fields.get("handoff"))
    if fields.get("resume") is not True:
        raise ServiceError(BAD_REQUEST,
                           "a handoff is resumed: pass --resume with --handoff")
    run_id = id_field("run_id", fields.get("run_id"))
    node_id = id_field("node_id", fields.get("node_id"))
    iteration = opt_int_field(fields, "iteration", 0) or 0
    if (manifest["run_id"], manifest["node_id"], manifest["iteration"]) != (run_id, node_id,
                                                                           iteration):
        raise ServiceError(CONFLICT, f"the handoff is for {manifest['run_id']}/"
                           f"{manifest['node_id']} iteration {manifest['iteration']}, not "
                           f"{run_id}/{node_id} iteration {iteration}")
    cp = manifest.get("checkpoint")
    if cp is None:
        raise ServiceError(NOT_FOUND, "the handoff names no checkpoint: there is nothing "
                           "to resume from; begin the attempt without --resume")
    key = AttemptKey(run_id, node_id, int(cp["iteration"]), int(cp["attempt"]))
    fetched = _fetch_for_handoff(service, run_id, cp["commit"])
    source = ensure_commit(service, cp["commit"], cp["tree"], ref=key.ref)
    if service.ledger.get_attempt(key) is None and service.store.head(key) is not None:
        rebuild_rows(service, [key.as_dict()])
    owner = service.ledger.get_attempt(key)
    _check_ledger_row(service, owner, key, cp)
    _check_not_stale(service, key, cp, fields.get("attempt"))
    fenced = _fence(service, owner, key, cp["commit"])
    return {"verified": {"commit": cp["commit"], "tree": cp["tree"], "seq": cp["seq"],
                         "attempt": key.attempt, "digest": manifest["digest"]},
            "source": source["source"], "fetched_refs": len(fetched["refs"]) if fetched else 0,
            "fenced": fenced, "from_host": manifest.get("owner", {}).get("host"),
            "to": manifest.get("to")}


# -- helpers -------------------------------------------------------------------------------------


def _fetch_for_handoff(service: Service, run_id: str, commit: str) -> dict | None:
    """The run's refs from the remote, when one is set. A failed fetch is fatal unless the
    checkpoint is already local (then the verification below still runs on it)."""
    if not normalize_remote(service.config.remote):
        return None
    try:
        return fetch_run(service, run_id)
    except ServiceError as exc:
        if local_commit(service, commit) is None:
            raise
        log.warning("handoff: fetch failed (%s); the checkpoint is local", exc.message)
        return None


def _check_ledger_row(service: Service, owner: Attempt | None, key: AttemptKey,
                      cp: dict) -> None:
    """The ledger's row of the manifest's seq carries the manifest's commit and tree."""
    rows = ({r["seq"]: r for r in service.ledger.attempt_checkpoints(owner.pk)}
            if owner else {})
    row = rows.get(cp["seq"])
    if row is None:
        raise ServiceError(VERIFY_FAILED, f"the ledger has no row for {key} seq "
                           f"{cp['seq']}, which the handoff names")
    if (row["commit"], row["tree"]) != (cp["commit"], cp["tree"]):
        raise ServiceError(VERIFY_FAILED, f"{key} seq {cp['seq']}: the ledger says "
                           f"commit {row['commit'][:12]} tree {row['tree'][:12]}, the handoff "
                           f"says {cp['commit'][:12]} tree {cp['tree'][:12]}")


def _check_not_stale(service: Service, key: AttemptKey, cp: dict, number: object) -> None:
    """What resume will restore (the newest checkpoint of the newest earlier attempt) is the
    manifest's checkpoint."""
    ledger = service.ledger
    if number is None:
        number = ledger.last_attempt_number(key.run_id, key.node_id, key.iteration) + 1
    earlier = sorted((a for a in ledger.attempts(key.run_id) if a.key.node_id == key.node_id
                      and a.key.iteration == key.iteration and a.key.attempt < number),
                     key=lambda a: a.key.attempt, reverse=True)
    for candidate in earlier:
        last = ledger.last_checkpoint(candidate.pk)
        if last is None:
            continue
        if (candidate.key, last["commit"]) != (key, cp["commit"]):
            raise ServiceError(CONFLICT, f"the handoff is stale: the node's newest "
                               f"checkpoint is now {candidate.key} seq {last['seq']} "
                               f"({last['commit'][:12]}), not seq {cp['seq']}; write a new "
                               "handoff, or resume without --handoff")
        return


def _fence(service: Service, owner: Attempt | None, key: AttemptKey, commit: str) -> str | None:
    """Take over: the previous owner's attempt stops being active, so its later captures are
    fenced wherever the ledger is shared. Returns the fenced attempt, if any."""
    if owner is None or owner.state != ACTIVE:
        return None
    service.ledger.set_attempt_state(key, "superseded", ended=True, final_commit=commit)
    ended = service.ledger.get_attempt(key)
    if ended is not None:
        service.announce_inactive(ended)
    return str(key)


def _replication_of(service: Service, url: str, key: AttemptKey, commit: str,
                    replicator: Replicator | None) -> dict:
    if not url:
        return {"replicated": False, "state": "no-remote"}
    out: dict = {"ref": key.ref}
    if replicator is not None:
        out.update(replicator.attempt_state(key))
    try:
        theirs = ls_remote(url, key.ref).get(key.ref)
    except ServiceError as exc:
        out.update(replicated=False, state="unreachable", error=exc.message)
        return out
    repo = service.store.reader()
    replicated = theirs is not None and descends(repo, theirs, commit)
    out.update(remote_commit=theirs, replicated=replicated,
               state="replicated" if replicated else "missing" if theirs is None else "behind")
    return out


def _next_action(m: dict) -> str:
    cp, rep = m["checkpoint"], m["replication"]
    begin = (f"snapshotd attempt begin --run {m['run_id']} --node {m['node_id']} --iteration "
             f"{m['iteration']} --resume --handoff FILE --cwd DIR")
    if cp is None:
        return ("nothing to hand off yet (no checkpoint); begin a fresh attempt with "
                f"`snapshotd attempt begin --run {m['run_id']} --node {m['node_id']}`")
    if not rep.get("remote"):
        return "configure a remote (remote = \"<git url>\") and run `snapshotd push`, then " + begin
    if not rep.get("replicated"):
        return (f"run `snapshotd push {m['run_id']}` on this host until the checkpoint is on "
                f"the remote ({rep.get('state')}), then on the new host: {begin}")
    note = f" ({m['gaps_total']} unresolved gap(s): review them first)" if m["gaps_total"] else ""
    return f"on the new host: {begin}{note}"
