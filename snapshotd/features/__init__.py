"""What the daemon does with checkpoints beyond taking them: restore, review, replication,
retention, purge, the engine, agent sessions and ledger repair."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "disk_usage": ("du_report",),
    "events": ("EVENT_KINDS", "record_event"),
    "gc": ("policy_from_fields", "run_gc"),
    "purge": ("purge_op", "recover_journal"),
    "repair": ("repair_ledger",),
    "withhold": ("RELEASES_FILE", "Withholder", "blob_at", "chain_findings", "release"),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
