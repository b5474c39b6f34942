"""The base every layer stands on: keys, errors, configuration, fault seams, durable writes,
secrets detection and the reading of a user's repository. Imports nothing else of snapshotd."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
