"""The guard: destructive shell commands recognised before they run, and the checkpoint taken
before them that also keeps the worktree's ignored files (docs/guard.md)."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "commands": ("Match", "destructive"),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
