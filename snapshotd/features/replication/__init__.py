"""Replication: checkpoints pushed to a git remote off the reply path, fetched back and
verified, handoff manifests."""

from snapshotd.faces import face

__all__, __getattr__, __dir__ = face(__name__, {
})
