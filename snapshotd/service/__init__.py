"""The capture service: a request attributed to an attempt, captured, committed, recorded,
or kept as a gap; listing and checkpoint lookup."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "change_source": ("ChangeSource",),
    "checkpoints": ("checkpoint_tree", "current_tree_of", "find_checkpoint",
        "format_seqs", "selection"),
    "coverage": ("GapFollower", "active_coverage", "run_coverage", "total_coverage"),
    "gaps": ("GapSpool",),
    "listing": ("collect_runs", "list_from_ledger", "list_gaps", "list_run", "open_ledger_if_any",
        "require_known_run", "unknown_run"),
    "reconcile": ("reconcile_attempt",),
    "request": ("SnapshotRequest",),
    "service": ("Service",),
    "tool_calls": ("OWN", "ToolCallIndex", "annotate", "call_span", "count_calls", "key_of",
        "read_calls", "run_calls", "with_tool_calls"),
    "turns": ("TurnIndex", "gap_time", "public_turn", "set_turns", "with_turns"),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
