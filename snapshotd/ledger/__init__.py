"""The ledger: rows for worktrees, attempts, checkpoints and tool calls, on SQLite or
PostgreSQL. Never reads or writes the store."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "base": ("percentiles",),
    "ledger": ("ACTIVE", "Attempt", "DuplicateToolCall", "Ledger", "LedgerDamaged", "LedgerError",
        "POSTGRES_SCHEMES", "SQLITE_FILE", "SeqConflict", "describe_ledger", "ledger_exists",
        "ledger_url", "open_ledger"),
    "tool_calls": ("IN_FLIGHT", "INFERRED"),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
