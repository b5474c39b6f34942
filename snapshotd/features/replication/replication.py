"""Replication: checkpoints pushed to a git remote, fetched back and verified by digest.

Owns the ``remote`` setting's wiring into the daemon (docs/scale-out.md): ``attach`` starts the
background pusher when a remote is set, registers the daemon ops ``push``, ``fetch`` and
``handoff``, and adds the ``replication`` block to ``status``. The work itself lives in
``pusher`` (``Replicator``, off the reply path), ``fetch`` (a run's refs or one missing
checkpoint, verified before any ref moves), ``handoff`` (the manifest and its verification on
the new host) and ``gitremote`` (the git command line against the remote).
``ensure_commit``, ``verify_handoff``, ``build_handoff``, ``check_manifest``, ``manifest_digest``,
``fetch_run`` and ``Replicator`` are re-exported here for existing callers.

Promises: with no remote set, ``push`` and ``fetch`` fail with ``no-remote`` and a sentence saying
how to set one, and ``status`` says replication is off; the remote shown in ``status`` and every
replication log line has its credentials redacted (``config.redact_url``/``redact_text``).
"""

from __future__ import annotations

from snapshotd.core import (
    BAD_REQUEST,
    NO_REMOTE,
    ServiceError,
    id_field,
    opt_id_field,
    opt_int_field,
)
from snapshotd.features.replication.fetch import ensure_commit, fetch_run
from snapshotd.features.replication.gitremote import NO_REMOTE_HINT
from snapshotd.features.replication.handoff import (
    build_handoff,
    check_manifest,
    manifest_digest,
    verify_handoff,
)
from snapshotd.features.replication.pusher import Replicator
from snapshotd.service import Service

TYPE_CHECKING = False
if TYPE_CHECKING:
    from snapshotd.core import Config, Registry

__all__ = ["attach", "build_handoff", "check_manifest", "ensure_commit", "fetch_run",
           "manifest_digest", "Replicator", "verify_handoff"]


def attach(service: Service, server: Registry, config: Config) -> None:
    """Start the pusher (when ``remote`` is set) and register ``push``, ``fetch``, ``handoff``."""
    replicator = Replicator(service, config.remote, config.push_interval_ms) \
        if config.remote else None

    def need() -> Replicator:
        if replicator is None:
            raise ServiceError(NO_REMOTE, NO_REMOTE_HINT)
        return replicator

    def push_op(fields: dict) -> dict:
        return need().sync(opt_id_field(fields, "run_id"))

    def fetch_op(fields: dict) -> dict:
        need()
        return fetch_run(service, id_field("run_id", fields.get("run_id")))

    def handoff_op(fields: dict) -> dict:
        return build_handoff(service, id_field("run_id", fields.get("run_id")),
                             id_field("node_id", fields.get("node_id")),
                             iteration=opt_int_field(fields, "iteration", 0),
                             attempt=opt_int_field(fields, "attempt", 1),
                             to=_opt_short_str(fields, "to"), replicator=replicator)

    server.register("push", push_op)
    server.register("fetch", fetch_op)
    server.register("handoff", handoff_op)
    if replicator is None:
        server.status_extras.append(lambda: {"replication": {"enabled": False, "remote": ""}})
        return
    service.on_checkpoint.append(replicator.note)
    server.status_extras.append(lambda: {"replication": replicator.status()})
    server.shutdown_hooks.append(replicator.stop)
    replicator.start()


def _opt_short_str(fields: dict, name: str) -> str | None:
    """A free-text label (who a handoff is for): at most 200 characters, no NUL."""
    value = fields.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 200 or "\0" in value:
        raise ServiceError(BAD_REQUEST, f"{name} must be a short string")
    return value
