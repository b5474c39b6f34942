"""Replication: checkpoints pushed to a git remote off the reply path, fetched back and
verified, handoff manifests."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "fetch": ("fetch_run",),
    "handoff": ("build_handoff", "check_manifest"),
    "pusher": ("push_now",),
    "replication": ("ensure_commit", "verify_handoff"),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
