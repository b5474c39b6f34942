"""Reading a worktree into a checkpoint's tree: the stat cache, its scans, seeding it from
the user's repository, and what a capture may read."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
