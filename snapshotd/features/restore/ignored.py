"""A guard checkpoint's kept ignored files written back (``restore --include-ignored``).

Owns ``kept_set`` (the kept files of one checkpoint, or ``not-found`` naming the seqs that have
some) and ``write_ignored``. Promises: a kept file is written only where nothing is (a file
there now, whatever it holds, is left and listed under ``left``: no checkpoint holds its
current bytes); every directory is entered from ``/`` without following a link
(``apply.open_confined``); a file is written to a temporary name at mode 0600 (0700 when it
was executable) and renamed into place; a symlink is made as it was. ``dry_run`` writes
nothing and says what would be written (docs/guard.md, "Getting them back").
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from snapshotd.core import NOT_FOUND, AttemptKey, ServiceError
from snapshotd.features.restore.apply import Modes, open_confined
from snapshotd.store import KeptFile, kept_for, kept_seqs

if TYPE_CHECKING:
    from snapshotd.store import Store

# The paths a reply names, written or left; past it only counted (the reply fits one frame).
MAX_LISTED = 1000


def kept_set(store: Store, key: AttemptKey, seq: int) -> tuple[str, list[KeptFile]]:
    """The kept ignored files of checkpoint ``seq`` of ``key``: the kept commit and its files;
    ``not-found`` (naming the seqs that have kept files) when that checkpoint has none."""
    found = kept_for(store, key, seq)
    if found is None:
        seqs = kept_seqs(store, key)
        raise ServiceError(NOT_FOUND, f"seq {seq} of {key} has no kept ignored files (only a "
                           "guard checkpoint has them; " + (
                               f"those of this attempt: seq {', '.join(map(str, seqs))})"
                               if seqs else "this attempt has none)"))
    return found[0], found[1]


def write_ignored(root: Path, commit: str, files: list[KeptFile], *, dry_run: bool,
                  modes: Modes) -> dict:
    """Write ``files`` under ``root`` where nothing is: ``{"commit", "written", "left"}`` (the
    first ``MAX_LISTED`` of each) and their ``written_total``, ``left_total``."""
    written: list[str] = []
    left: list[dict] = []
    for f in files:
        parent, name = os.path.split(f.path)
        try:
            if dry_run:
                exists = os.path.lexists(root / f.path)
            else:
                exists = not _write(root / parent if parent else root, name, f, modes)
        except (OSError, ValueError) as exc:
            left.append({"path": f.path, "reason": f"not written: {exc}"})
            continue
        if exists:
            left.append({"path": f.path, "reason": "a file is there: left as it is"})
        else:
            written.append(f.path)
    return {"commit": commit, "written": written[:MAX_LISTED], "written_total": len(written),
            "left": left[:MAX_LISTED], "left_total": len(left)}


def _write(directory: Path, name: str, f: KeptFile, modes: Modes) -> bool:
    """Write one kept file into ``directory`` (created, confined); False when a file is there."""
    dir_fd = open_confined(directory, create=True, modes=modes)
    try:
        try:
            os.lstat(name, dir_fd=dir_fd)
            return False
        except FileNotFoundError:
            pass
        if f.mode == 0o120000:
            os.symlink(os.fsdecode(f.data), name, dir_fd=dir_fd)
            return True
        temp = f".{name}.snapshotd-{secrets.token_hex(6)}"
        mode = 0o700 if f.mode == 0o100755 else 0o600
        fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode,
                     dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as out:
                out.write(f.data)
                os.fchmod(out.fileno(), mode)  # whatever the umask
            os.link(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # never over a file
        finally:
            os.unlink(temp, dir_fd=dir_fd)
        return True
    finally:
        os.close(dir_fd)

