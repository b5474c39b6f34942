"""Review: diffs, history (show, log, find), blame, export and the captures before tool
calls."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
