"""The ledger: rows for worktrees, attempts, checkpoints and tool calls, on SQLite or
PostgreSQL. Never reads or writes the store."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
