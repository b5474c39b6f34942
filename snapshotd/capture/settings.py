"""The rules every capture of a host follows, and a worktree's own overrides of them.

Owns ``CaptureSettings``: the daemon's exclude list, the file size limit and the
credential-file policy (``secret_files``, ``secret_scan``), which ``Config.for_worktree`` may
override for one worktree. Read by each stat cache (``stat_cache.WorktreeIndex``) when it is
made; the registry (``stat_caches.StatCaches``) hands the same settings to every cache.

Promises: immutable; ``secret_policy`` asks the per-worktree overrides each time it is called.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CaptureSettings:
    """The host-wide rules of every capture, and a worktree's own overrides."""

    excludes: tuple[str, ...] = ()
    max_file_bytes: int = 64 << 20
    secret_files: str = "skip"
    secret_scan: bool = True
    # A worktree's own overrides of the two secret settings (``Config.for_worktree``).
    worktree_settings: Callable[[Path], Mapping[str, object]] | None = None

    def secret_policy(self, root: Path) -> tuple[str, bool]:
        """``(secret_files, secret_scan)`` for the captures of the worktree at ``root``: the
        host-wide values unless the configuration overrides them for that worktree."""
        settings = self.worktree_settings(root) if self.worktree_settings else {}
        files = settings.get("secret_files", self.secret_files)
        scan = settings.get("secret_scan", self.secret_scan)
        return str(files), bool(scan)
