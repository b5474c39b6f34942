"""Tier 2: the daemon's own watcher (notifiers, groups, the fast path, settle windows and
verification scans) turning quiet moments into checkpoints."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
