"""The watcher's shared state: one record per watched worktree, and what its parts share.

Owns ``Entry`` (one watched worktree) and its per-concern records (``Linger``, ``Window``,
``Checks``, ``Changes``), ``WatchState`` (the one lock, the registry of entries by root, the
``watcher`` counters of ``status``, gap recording), ``Markers`` (``<home>/watch/``, one marker
per open settle window) and ``Host``, the lifecycle actions the watcher's parts ask of the
registry (``snapshotd.watch.watcher.Watcher`` implements it).

Promises:
- Every field of every record is read and written under ``WatchState.cond`` only (the records
  are plain data; the parts that own a concern change its record).
- ``WatchState.count_error`` never blocks on ``cond`` (it may be called with or without it held):
  an error that silently switches a guarantee off is logged at warning and counted in
  ``status``, never swallowed.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import stat
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from snapshotd.core import Config, worktree_id
from snapshotd.ledger import Attempt
from snapshotd.watch.notifier import WatchLimitError
from snapshotd.watch.notifier_group import NotifierGroup

if TYPE_CHECKING:
    from snapshotd.service import Service  # the watcher's; service imports the fast path

log = logging.getLogger("snapshotd.watcher")

# Counters of errors that switch a guarantee off for a while (logged at warning, shown in the
# ``watcher`` map of ``status``): a cookie round trip that failed or timed out (that capture
# scans fully), an ignore rule that could not be applied to an event's path (the path then
# arms a capture), a notifier that could not be closed (its watches may leak), a settle
# window's crash marker that could not be written (a crash would then go without its gap).
ERROR_COUNTERS = ("cookie_errors", "cookie_timeouts", "ignore_errors", "notifier_close_errors",
                  "marker_errors")


@dataclass
class Linger:
    """After its attempt ended: whether the worktree is still watched passively, and since when."""

    lingering: bool = False
    last_attempt: Attempt | None = None  # the ended attempt (gaps and status name it)
    mark: float = 0.0  # monotonic: linger start or the latest relevant event since
    idle_since: float | None = None  # ended, not lingering: dropped after a grace period


@dataclass
class Window:
    """The settle window: changes not yet in a checkpoint, and the capture that takes them."""

    first: float | None = None  # monotonic estimate of the first unsaved change
    last: float | None = None  # ... and of the latest one
    wall: float | None = None  # wall-clock time the window opened (marker, status)
    capturing: bool = False
    not_before: float = 0.0  # capture backoff after a failure
    failures: int = 0
    captures: int = 0


@dataclass
class Checks:
    """Clocks of the scans that look for what events may not have said."""

    last_event: float = 0.0  # monotonic estimate of the latest relevant change seen
    verify_at: float | None = None  # a verification scan is due then
    verify_since: float = 0.0
    judge_at: float | None = None  # then: was what the verification found announced?
    judge_since: float = 0.0
    judge_seq: int | None = None
    next_scan: float | None = None  # periodic stat scan while degraded
    retry_at: float | None = None  # next attempt to watch again
    next_health: float = 0.0  # next stat of the root (deleted or replaced?)
    next_verify: float = 0.0  # periodic drift verification
    verified_mark: float = 0.0  # ``last_event`` when the last periodic verification started
    last_verify: float = 0.0
    verify_took: float = 0.0  # how long its last scan of the whole tree took (s): what one costs


@dataclass
class Changes:
    """The fast path's changed paths since the last capture, and whether they can be trusted:
    only once a full scan has run under the current watch (``baseline``) and no event may have
    been lost since."""

    dirty: set[str] = field(default_factory=set)
    removed: set[str] = field(default_factory=set)  # those of ``dirty`` with a delete event
    overflow: bool = False
    baseline: bool = False
    baseline_at: float = 0.0  # when the current baseline was (re)established
    fast_off_until: float = 0.0  # after drift, captures scan fully until then
    fast_captures: int = 0
    last_fast: float = 0.0  # when a capture last took the changed paths (a tool call's, mostly)
    drifts: int = 0
    drift_at: float = 0.0  # a verification's drift is already on record: no second gap
    # The watchfiles notifier follows symlinks to directories when it walks the tree, and then
    # reports the real directory's events under the link's path (one inotify watch per inode).
    # Seen once, its paths cannot be trusted: the fast path stays off until the next watch.
    # (Our inotify reader never follows a link: never set with it.)
    aliased: bool = False
    # Notifiers this worktree was just merged away from, not yet drained: a capture's cookie
    # must go through them too before the changed paths can be trusted.
    draining: list[NotifierGroup] = field(default_factory=list)


@dataclass
class Entry:
    """One watched worktree: the attempt its captures belong to, and how it is watched."""

    root: str
    attempt: Attempt | None
    identity: tuple[int, int] | None = None
    matcher: object | None = None  # pygit2.Repository whose path_is_ignored filters events
    group: NotifierGroup | None = None
    state: str = "watching"  # watching | degraded | missing
    reason: str | None = None  # why degraded / missing (a gap reason)
    detail: str | None = None
    ignore_warned: bool = False  # an ignore-rule error was logged once for this watch
    linger: Linger = field(default_factory=Linger)
    window: Window = field(default_factory=Window)
    checks: Checks = field(default_factory=Checks)
    changes: Changes = field(default_factory=Changes)

    def watched(self) -> bool:
        """Whether a notifier should carry this worktree."""
        return self.state == "watching"

    def live(self) -> bool:
        """Whether its events matter: an active attempt's, or a lingering watch."""
        return self.attempt is not None or self.linger.lingering

    def gap_attempt(self) -> Attempt | None:
        """The attempt a gap about this worktree belongs to."""
        return self.attempt or (self.linger.last_attempt if self.linger.lingering else None)


class Host(Protocol):
    """Lifecycle actions of the registry that the settle scheduler and the notifier groups
    trigger (implemented by ``snapshotd.watch.watcher.Watcher``). None is called under the lock."""

    def check_root(self, root: str) -> None:
        """Stat the root: a deleted or replaced worktree is dealt with."""

    def degrade(self, entry: Entry, reason: str, detail: str, *, record: bool = True) -> None:
        """Periodic stat scans instead of a watch (``record``: with a gap)."""

    def mark_missing(self, entry: Entry, *, record: bool) -> None:
        """The worktree is gone: its watch ends."""

    def replaced(self, entry: Entry, identity: tuple[int, int]) -> None:
        """The path names another directory now: watch it and capture it."""

    def drop(self, entry: Entry, *, expired: bool = False) -> None:
        """Forget an entry whose attempt ended (its grace or linger time is over)."""

    def watch_failed(self, entry: Entry, exc: BaseException, *, record: bool = True) -> None:
        """Starting a notifier for ``entry`` alone failed with ``exc``."""

    def retry(self, entry: Entry) -> None:
        """Try to leave degraded mode."""

    def probe_missing(self, entry: Entry) -> None:
        """Whether a missing worktree came back."""


class WatchState:
    """What the watcher's parts share: the lock, the entries, the counters, gap recording."""

    def __init__(self, service: Service, config: Config) -> None:
        self.service = service
        self.config = config
        self.cond = threading.Condition(threading.Lock())
        self.entries: dict[str, Entry] = {}
        self.stopping = False
        self.counters = {"captures": 0, "deduped": 0, "verifications": 0, "failures": 0,
                         "verify_full_scans": 0, "scheduler_passes": 0,
                         "groups_started": 0, "merges": 0, "overflows": 0,
                         **{name: 0 for name in ERROR_COUNTERS}}
        self.markers = Markers(Path(service.home) / "watch", self)
        self._errors_lock = threading.Lock()

    def count_error(self, counter: str, message: str, *args: object, warn: bool = True) -> None:
        """Count an error under ``counter`` (one of ``ERROR_COUNTERS``) and, unless ``warn`` is
        False (the caller already warned about this one), log it at warning."""
        if warn:
            log.warning(message, *args)
        with self._errors_lock:
            self.counters[counter] += 1

    def gap(self, entry: Entry, reason: str, detail: str) -> None:
        attempt = entry.gap_attempt()
        key = attempt.key if attempt else None
        self.service.gaps.record(
            reason=reason, detail=detail, run_id=key.run_id if key else None,
            node_id=key.node_id if key else None, iteration=key.iteration if key else None,
            attempt=key.attempt if key else None, worktree=entry.root, tier=2, source="watch")

    def timing(self, entry: Entry) -> tuple[float, float]:
        """Effective (settle, max_wait) in seconds: the attempt's, else the daemon's."""
        attempt = entry.attempt
        settle = (attempt.settle_ms if attempt and attempt.settle_ms else self.config.settle_ms)
        max_wait = (attempt.max_wait_ms if attempt and attempt.max_wait_ms
                    else self.config.max_wait_ms)
        return settle / 1000, max(settle, max_wait) / 1000

    def close_window(self, entry: Entry) -> None:
        """Forget the entry's settle window and its marker. Under the lock."""
        window = entry.window
        window.first = window.last = window.wall = None
        self.markers.remove(entry)

    def open_window_now(self, entry: Entry, wall: float | None = None) -> None:
        """Open (or keep) a window that is due at once, with its marker. Under the lock."""
        window = entry.window
        now = time.monotonic()
        window.first = window.first or now
        window.last = now - 3600  # due at once
        window.wall = window.wall or wall or time.time()
        self.markers.write(entry)


class Markers:
    """``<home>/watch/<worktree-id>.json``: whether a window is open (for a process crash).

    A worktree's marker is made once and then rewritten in place: the open window's record,
    or ``{"open": false}`` once it closes, padded with spaces so the file never shrinks. So a
    window opens and closes without a file made or removed: on ext4 without a journal every
    freed inode is checked again at each later inode allocation in its block group for
    minutes (``recently_deleted``), and a marker made and removed per window was one of the
    two inodes each tool call's capture freed. One ``pwrite`` holds the whole record, so a
    process crash leaves the old record or the new one. The file goes when its worktree is no
    longer watched (``drop``), when a stop leaves its window closed, and at start-up once read.
    """

    def __init__(self, directory: Path, state: WatchState) -> None:
        self.dir = directory
        self._state = state
        # The size each marker this process wrote has: rewrites pad to it, never truncate.
        self._sizes: dict[Path, int] = {}

    def path(self, entry: Entry) -> Path:
        return self.dir / f"{worktree_id(Path(entry.root))}.json"

    def write(self, entry: Entry) -> None:
        """Note that a window is open. Under the lock."""
        attempt = entry.attempt
        if attempt is None:
            return
        record = {"worktree": entry.root, **attempt.key.as_dict(),
                  "opened_at": entry.window.wall or time.time()}
        path = self.path(entry)
        try:
            self._put(path, json.dumps(record))
        except OSError as exc:
            self._state.count_error("marker_errors", "cannot write window marker %s (a crash "
                                    "now would go without its settle-window-missed gap): %s",
                                    path, exc)

    def remove(self, entry: Entry) -> None:
        """Note that no window is open (the file stays for the next one). Under the lock."""
        path = self.path(entry)
        try:
            if path in self._sizes:
                self._put(path, _CLOSED)
            else:  # not ours (left by an earlier daemon): nothing to keep it for
                path.unlink(missing_ok=True)
        except OSError as exc:
            # A marker that still reads open costs a spurious gap after a crash, not a loss.
            self._state.count_error("marker_errors", "cannot mark window marker %s closed: %s",
                                    path, exc)

    def drop(self, entry: Entry) -> None:
        """Remove the marker of a worktree no longer watched, or of a closed window at a stop.
        Under the lock."""
        path = self.path(entry)
        self._sizes.pop(path, None)
        try:
            path.unlink()
        except FileNotFoundError:
            pass  # none was written, or start-up recovered it
        except OSError as exc:  # a closed marker left behind is dropped at the next start
            self._state.count_error("marker_errors", "cannot remove window marker %s: %s",
                                    path, exc)

    def read_all(self) -> list[tuple[Path, dict | None]]:
        """Every marker and its open window's record (None when unreadable or closed)."""
        out: list[tuple[Path, dict | None]] = []
        for path in sorted(self.dir.glob("*.json")):
            try:
                record = json.loads(path.read_text())
                record["worktree"] = str(record["worktree"])
                record["opened_at"] = float(record["opened_at"])
            except (OSError, ValueError, KeyError, TypeError):
                record = None
            out.append((path, record))
        return out

    def _put(self, path: Path, text: str) -> None:
        known = self._sizes.get(path)
        data = text.encode()
        data += b" " * (max(known or 0, _MARKER_BYTES) - len(data))
        # The first write of this process truncates: a file an earlier daemon left may be longer.
        flags = os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC | (os.O_TRUNC if known is None else 0)
        fd = os.open(path, flags, 0o600)
        try:
            if os.pwrite(fd, data, 0) != len(data):
                raise OSError(errno.EIO, f"short write of {len(data)} bytes")
        finally:
            os.close(fd)
        self._sizes[path] = len(data)


# A closed window's marker; records are padded to at least this many bytes so that most
# worktrees' markers never grow.
_CLOSED = '{"open": false}'
_MARKER_BYTES = 512


def identity(root: str) -> tuple[int, int] | None:
    """(device, inode) of a real directory at ``root``, None if there is none."""
    try:
        st = os.lstat(root)
    except OSError:
        return None
    if not stat.S_ISDIR(st.st_mode):
        return None
    return st.st_dev, st.st_ino


def describe_watch_error(exc: BaseException) -> str:
    """A watch failure in words, with what to do about the usual ones."""
    if isinstance(exc, WatchLimitError):
        return str(exc.strerror)  # names the limit, its value and what to set
    text = f"{type(exc).__name__}: {exc}"
    code = getattr(exc, "errno", None)
    if code in (errno.ENOSPC, errno.EMFILE) or "No space left" in text or "Too many" in text:
        return (f"the inotify watch limit was reached ({text}); raise fs.inotify.max_user_watches "
                "or fs.inotify.max_user_instances")
    if isinstance(exc, PermissionError) or "ermission denied" in text:
        return f"permission denied while watching ({text})"
    return f"the file watcher failed ({text})"
