"""The capture service: a request attributed to an attempt, captured, committed, recorded,
or kept as a gap; listing and checkpoint lookup."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
