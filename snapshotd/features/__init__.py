"""What the daemon does with checkpoints beyond taking them: restore, review, replication,
retention, purge, the engine, agent sessions and ledger repair."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
