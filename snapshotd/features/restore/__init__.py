"""Restore: a worktree, or a fresh directory, brought back to a checkpoint, planned
first and written confined and atomic per file."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "restore": ("page_plan", "restore_checkpoint"),
    "revert": ("revert_checkpoints",),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
