"""Reading a worktree into a checkpoint's tree: the stat cache, its scans, seeding it from
the user's repository, and what a capture may read."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "full_scan": ("Capture", "DIFF_FLAGS"),
    "scan_rules": ("unreadable_path",),
    "settings": ("CaptureSettings",),
    "stat_cache": ("WorktreeIndex",),
    "stat_caches": ("StatCaches",),
    "tracked_ignored": ("Listing", "list_tracked_ignored"),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
