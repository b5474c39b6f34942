"""One worktree file into a stat cache: hashed and counted, or listed with the reason why not.

Owns ``update_path``, what every capture path (full scan, fast path, crawl) does with one file,
and ``add_file``, libgit2's add of it, retrying a file that changes while read. Promises:
- A FIFO, socket or device is never opened (``special``); a credential file is left out unless
  the worktree captures them (``secret``); a file over the size limit is left out
  (``too-large``); a name no tree can hold is left out (``invalid-path``). Each is listed.
- A file that cannot be read keeps its last captured content, listed ``unreadable``, and is
  held out of the next full scan's diff (``ScanTarget.unreadable``); so does a file whose
  content is not the size its stat reports (``SizeMismatch``: a ``/sys`` file).
- A file that changes size or vanishes while it is read is read again, up to ``CHANGING_TRIES``
  times; still changing, it keeps its last captured content, listed ``changing``, and is hashed
  again at the next capture (it is in ``touched``, so racy); gone for good, it is deleted.
- A failure on the store's side raises ``StoreError`` (``store-write-failed``) and never skips
  the file: a checkpoint is never acknowledged without a change it was given.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import pygit2

from snapshotd.capture.cache_checks import entry_id
from snapshotd.capture.full_scan import Capture, remove_entry
from snapshotd.capture.scan_rules import (
    change_mark,
    readable_size,
    source_readable,
    special_entry,
    vanished_path,
)
from snapshotd.core import scan_changed_file, secret_skip
from snapshotd.store import (
    STORE_WRITE_FAILED,
    FileChanging,
    InvalidPath,
    SizeMismatch,
    StoreError,
    changed_while_read,
    odb_retry,
    refused_path,
)

if TYPE_CHECKING:
    from snapshotd.store import Store

# How many times a file that changed size (or vanished) while it was read is read again.
CHANGING_TRIES = 3


class FileVanished(FileChanging):
    """A worktree file deleted between its stat and its read, each time it was tried: gone
    now, it is a deletion; back again, it is listed ``changing`` like a file still changing."""

    def __init__(self, path: str, tries: int) -> None:
        super().__init__(path, tries)
        self.args = (f"{path} vanished while it was read, {tries} times in a row",)


class EntryTarget(Protocol):
    """What adding one file needs of a worktree's stat cache (``WorktreeIndex``)."""

    root: Path
    store: Store
    max_file_bytes: int
    secret_files: str
    secret_scan: bool
    unreadable: set[str]


def update_path(wt: EntryTarget, index: pygit2.Index, path: str, result: Capture,
                touched: list[str], *, new: bool = False, racy_recheck: bool = False) -> None:
    """Hash ``path`` (worktree-relative) into ``index`` and count it in ``result``, or list
    why not: a special file, a credential file, a file over the size limit, a name no tree
    can hold, a file still changing, or one that cannot be read (its last captured content
    then stays, and the next full scan holds it out of libgit2's diff)."""
    full = wt.root / path
    if path.endswith("/"):
        # libgit2 reports a nested repository as an untracked directory: listed here, then
        # captured whole by a cache of its own (``Workspace.capture_found``).
        result.skipped.append({"path": path.rstrip("/"), "reason": "nested-repository"})
        return
    try:
        st = full.lstat()
    except FileNotFoundError:
        if remove_entry(index, path) and not racy_recheck:
            result.deleted += 1
        return
    except OSError as exc:
        result.skipped.append({"path": path, "reason": "unreadable", "detail": str(exc)})
        return
    special = special_entry(path, st.st_mode)
    if special is not None:
        # Never opened: a FIFO would block this thread for good, a device has no content.
        if remove_entry(index, path) and not racy_recheck:
            result.deleted += 1
        result.skipped.append(special)
        return
    secret = secret_skip(path, full, wt.secret_files)
    if secret is not None:
        remove_entry(index, path)
        result.skipped.append(secret)
        return
    if stat.S_ISREG(st.st_mode) and st.st_size > wt.max_file_bytes:
        remove_entry(index, path)
        result.skipped.append({"path": path, "reason": "too-large", "bytes": st.st_size})
        return
    before = entry_id(index, path)
    try:
        add_file(wt, index, path)
    except InvalidPath as exc:
        result.skipped.append({"path": path, "reason": "invalid-path", "detail": str(exc)})
        return
    except FileChanging as exc:
        if isinstance(exc, FileVanished) and not os.path.lexists(full):
            if remove_entry(index, path) and not racy_recheck:
                result.deleted += 1
            return
        # Its last content stays, listed; hashed again next time (``touched``: it is racy).
        result.skipped.append({"path": path, "reason": "changing", "detail": str(exc)})
        touched.append(path)
        return
    except (pygit2.GitError, OSError) as exc:
        if before is not None:
            wt.unreadable.add(path)  # kept as last captured; held out of the next scan
        result.skipped.append({"path": path, "reason": "unreadable", "detail": str(exc)})
        return
    touched.append(path)
    if wt.secret_scan:
        result.secrets.extend(scan_changed_file(path, full, st.st_mode, new=before is None))
    after = entry_id(index, path)
    if racy_recheck:
        if before is None:
            result.added += 1
        elif before != after:
            result.modified += 1
    elif new or before is None:
        result.added += 1
    else:
        result.modified += 1


def add_file(wt: EntryTarget, index: pygit2.Index, path: str) -> None:
    """Hash ``path`` into the store and the index. A failure on the store's side raises
    ``StoreError``: the file is fine, and skipping it would acknowledge a checkpoint without
    the change. A name no tree can hold raises ``InvalidPath``, a file that changes size each
    time it is read ``FileChanging``, one whose content is not the size it reports
    ``SizeMismatch``; any other failure (the file cannot be read) is the caller's to report."""
    # The file's stat at each short read: a file rewritten without a pause can be back at the
    # same one (two writes within a tick of the file system's clock), so all are compared.
    seen: set[tuple[int, int, int] | None] = set()
    for attempt in range(1, CHANGING_TRIES + 1):
        try:
            odb_retry(index.add, path)
            return
        except (pygit2.GitError, OSError) as exc:
            if refused_path(exc):
                raise InvalidPath(path) from exc
            if vanished_path(exc, wt.root) == path:
                # Deleted between its stat and its read (its name maybe back by now): the
                # worktree changed under the capture; never the store's failure.
                if attempt < CHANGING_TRIES:
                    continue
                raise FileVanished(path, attempt) from exc
            if changed_while_read(exc):
                now = change_mark(wt.root / path)
                seen.add(now)
                if attempt < CHANGING_TRIES:
                    continue
                # Only a file seen to change is "changing"; one that stood still is read
                # here: content of another size than its stat is the file's (a /sys file),
                # the size read right is a store write failing with no OS reason.
                if len(seen) > 1:
                    raise FileChanging(path, attempt) from exc
                if now is not None and (got := readable_size(wt.root / path, now[0])) != now[0]:
                    raise SizeMismatch(path, now[0], got) from exc
            if wt.store.is_store_failure(exc, lambda: source_readable(wt.root / path)):
                raise StoreError(STORE_WRITE_FAILED,
                                 f"could not store {path}: {exc}") from exc
            raise
