"""The daemon process: the socket and its server, workers, the HTTP hook, activation,
supervisor messages, status figures, FIFO guards and start-up order."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
