"""The store: the one bare git repository every checkpoint lives in, and the only code that
writes to it (objects, commits, attempt refs, recovery after a crash)."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
