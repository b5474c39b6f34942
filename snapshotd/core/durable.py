"""Durability primitives: making a file, a directory entry or a new tree survive power loss.

Owns the fsync discipline the rest of the daemon relies on (docs/durability.md): data reaches
the disk only at ``fsync`` of the file, and a name (a create, rename, link or ``mkdir``) only at
``fsync`` of the directory holding it. Every helper here does both halves, so a caller that
used one can depend on the result after a power cut. Also the ``git`` options that make the git
CLI fsync what it writes (``GIT_FSYNC_ARGS``): by default git does not fsync loose objects.

Also ``boot_id``: only a reboot (a power cut, a kernel panic) can undo what was written without
fsync, so work that repairs such damage is needed once per boot.

Promises: ``write_file`` replaces a file atomically (old or new content after a cut, never
empty); ``make_dirs`` leaves every directory it created reachable after a cut (both unless
told ``sync=False``); ``sync_tree``
makes everything under a root durable, names and data.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

# The git CLI fsyncs the files it writes with these (git >= 2.36; older versions ignore them),
# but never the directories they land in: callers fsync those (``sync_object_dirs``).
GIT_FSYNC_ARGS: tuple[str, ...] = ("-c", "core.fsync=loose-object,pack,pack-metadata,index",
                                   "-c", "core.fsyncMethod=fsync")


def fsync_path(path: Path | str) -> None:
    """fsync a file or a directory by name."""
    fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if os.path.isdir(path) else 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes, mode: int = 0o644, *, sync: bool = True) -> None:
    """Replace ``path`` with ``data`` durably: a temporary file fsynced, renamed over it, and
    the directory fsynced. After a cut the file holds the old content or the new, never less.
    ``sync=False`` keeps the atomic replace and skips both fsyncs, for a file its reader
    checks and rewrites when a cut damaged it."""
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    write_new(tmp, data, mode, sync=sync, replace=True)
    os.replace(tmp, path)
    if sync:
        fsync_path(path.parent)


def write_new(path: Path | str, data: bytes, mode: int, *, sync: bool,
              replace: bool = False) -> None:
    """Create ``path`` holding ``data`` (it must not exist yet, unless ``replace``), the file
    fsynced when ``sync`` (its name is the caller's to make durable)."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if replace else os.O_EXCL)
    fd = os.open(path, flags, mode)
    try:
        write_all(fd, data)
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)


def write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (``os.write`` may take fewer than it is given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def make_dirs(path: Path, mode: int = 0o755, *, sync: bool = True) -> None:
    """``mkdir -p`` whose result survives a cut: each directory created is fsynced, and so is
    the parent it was created in (not with ``sync=False``, as ``write_file``)."""
    missing: list[Path] = []
    current = path
    while not current.is_dir():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for directory in reversed(missing):
        try:
            directory.mkdir(mode)
        except FileExistsError:
            if not directory.is_dir():
                raise
        if sync:
            fsync_path(directory)
            fsync_path(directory.parent)


def sync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (children before parents), then the
    directory holding ``root``: a tree just created by a tool that fsyncs nothing."""
    for top, _dirs, files in os.walk(root, topdown=False):
        for name in files:
            full = Path(top, name)
            if not full.is_symlink():
                fsync_path(full)
        fsync_path(Path(top))
    fsync_path(root.parent)


def sync_dirs(paths: Iterable[Path]) -> None:
    """fsync each directory of ``paths`` that exists."""
    for path in paths:
        if path.is_dir():
            fsync_path(path)


def sync_object_dirs(store: Path) -> None:
    """Make the names of objects the git CLI wrote into ``store`` durable: every fan-out
    directory, ``objects/pack`` and ``objects`` itself (git fsyncs the files, not these)."""
    objects = store / "objects"
    fanout = [objects / entry.name for entry in os.scandir(objects)
              if len(entry.name) == 2 and entry.is_dir(follow_symlinks=False)]
    sync_dirs([*fanout, objects / "pack", objects])


def boot_id() -> str:
    """This boot's id (it changes at every reboot, so at every power loss); "" where the system
    has none (every start is then taken for one after a reboot). ``SNAPSHOTD_BOOT_ID`` stands
    in for it in tests that cut power without rebooting."""
    override = os.environ.get("SNAPSHOTD_BOOT_ID")
    if override:
        return override
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
