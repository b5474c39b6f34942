"""One notifier shared by some watched worktrees: its reader thread and its cookie round trips.

Owns a ``notifier`` over a set of roots plus a cookie directory of the daemon's own
(``<home>/cookies/<pid>-<n>/``), the thread that reads it, and ``sync``: the cookie round trip
the fast path relies on. Promises:
- Every batch of events is handed to the ``dispatch`` callback in queue order, by the reader
  thread or by a ``sync``, under one drain lock: a batch taken off the queue is dispatched
  before anyone else takes the next.
- ``sync`` returns True only once a cookie written after the call began has come back through
  the same kernel queue, so every event queued before it has been dispatched (a cookie is one
  event, sent again only once its last was dispatched). A cookie that could not be written or
  read (``cookie_errors``) or came back late (``cookie_timeouts``) is reported through
  ``report``; a retired notifier just answers False.
- A notifier that fails, or whose cookie directory was removed, is closed and reported once
  through ``on_failure`` (never when retired); a close failure goes to ``report``.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from snapshotd.core import injected_delay
from snapshotd.watch.notifier import Event, open_notifier

# How often a polled notifier's thread (watchfiles) looks at its queue (ms), and how long an
# inotify notifier's thread lets a burst gather before it takes it. It bounds how late a change
# is *noticed*; the settle clock runs from the files' ctimes, so it does not add to the delay.
STEP_MS = 50
# An inotify notifier's thread sleeps in poll(2) until events come; this much after the first
# one it takes what has gathered (s), so a burst is one batch, not thousands.
GATHER_S = 0.005
# ... and wakes at least this often anyway (s) to see whether it was retired.
IDLE_WAKE_S = 5.0
# A capture waiting on a cookie polls for it without sleeping for this long first (s).
SYNC_SPIN_S = 0.001

Dispatch = Callable[["NotifierGroup", Iterable[Event]], None]
# (counter, message, *args): log at warning and count (``WatchState.count_error``).
Report = Callable[..., None]


class CookieDirLost(OSError):
    """The notifier's cookie directory was removed: its queue is intact, its proof is gone."""


class NotifierGroup:
    """One notifier over some worktrees, and the thread that reads it."""

    _ids = itertools.count()

    def __init__(self, home: Path, roots: list[str], kind: str, dispatch: Dispatch,
                 on_failure: Callable[[NotifierGroup, BaseException], None],
                 report: Report) -> None:
        self.roots = frozenset(roots)
        self._dispatch = dispatch
        self._on_failure = on_failure
        self._report = report
        # Cookies live in a directory of the daemon's own, watched by the same notifier (one
        # kernel queue), so a cookie's event arriving proves every earlier event has arrived.
        self.cookie_dir = Path(home) / "cookies" / f"{os.getpid()}-{next(self._ids)}"
        self.cookie_dir.mkdir(parents=True, exist_ok=True)
        self.cookie_prefix = str(self.cookie_dir) + "/"
        self._waiters: dict[str, threading.Event] = {}
        self._cookie_count = itertools.count()
        # Cookies whose round trip came back, kept to send again. Only through a kernel
        # queue (inotify), where touching a file is one event of its own; a polled notifier
        # may merge two events of one path, so there each cookie is new.
        self._spent: list[str] = []
        # Held from taking a batch off the notifier's queue until it is dispatched. A cookie
        # seen by ``sync`` proves every earlier event has left the queue; only with this lock
        # does it also prove they have been dispatched (the reader thread may hold an earlier
        # batch it has taken but not yet handed over).
        self._drain = threading.Lock()
        # Recursive; a root that cannot be watched raises here.
        try:
            self.notify = open_notifier([*roots, str(self.cookie_dir)], kind)
        except BaseException:
            shutil.rmtree(self.cookie_dir, ignore_errors=True)
            raise
        self.follows_symlinks = self.notify.follows_symlinks
        self._reuse_cookies = not self.notify.polled
        self.retired = False
        # Set by a ``sync`` that found the cookie directory gone: the reader fails on it.
        self._lost: CookieDirLost | None = None
        # Set by a merge once every event this notifier queued before its successor began is
        # dispatched: from then on the successor alone vouches for its worktrees.
        self.handed_over = False
        self._thread = threading.Thread(target=self._loop, daemon=True,
                                        name=f"snapshotd-watch-{len(roots)}")

    def sync(self, timeout: float) -> bool:
        """Write a cookie and drain events until it shows up: then every event queued before
        it has been dispatched. False if it did not within ``timeout``."""
        if self.retired:
            return False
        reused = self._take_spent_cookie()
        name = reused or f"c{next(self._cookie_count)}"
        seen = threading.Event()
        self._waiters[name] = seen
        path = self.cookie_dir / name
        deadline = time.monotonic() + timeout
        came_back = False
        try:
            if reused:
                # Its times set: one event, and no directory entry created or removed, which
                # on a file system busy freeing space costs a thousand times as much.
                os.utime(path)
            else:
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o600))
            if not self._drain.acquire(timeout=max(0.0, deadline - time.monotonic())):
                return self._timed_out(timeout)
            try:
                # A capture waits on this: for its first millisecond, poll without sleeping
                # (the cookie's event usually lands within ~0.1 ms), then wait a millisecond
                # at a time.
                spin_until = time.monotonic() + SYNC_SPIN_S
                while not seen.is_set():
                    if self.retired:
                        return False
                    if time.monotonic() > deadline:
                        return self._timed_out(timeout)
                    self._take_and_dispatch(0 if time.monotonic() < spin_until else 1)
            finally:
                self._drain.release()
            came_back = True
            return True
        except Exception as exc:  # noqa: BLE001 - reported: that capture scans fully
            if not self.retired:
                self._report("cookie_errors", "cookie round trip through %s failed (the "
                             "capture scans fully): %s: %s", self.cookie_dir,
                             type(exc).__name__, exc)
                if isinstance(exc, FileNotFoundError) and not self.cookie_dir.is_dir():
                    self._lose_cookie_dir()
            return False
        finally:
            self._waiters.pop(name, None)
            if came_back and self._reuse_cookies:
                self._spent.append(name)
            else:
                # Never used again: an event of it still on its way can prove nothing later.
                with contextlib.suppress(OSError):
                    path.unlink()

    def _take_spent_cookie(self) -> str | None:
        """A cookie whose round trip came back, for the next one (None: make a new one). Its
        one event was dispatched, so none of it is left in the queue to be mistaken for the
        next sync's; ``list.pop`` hands each to one caller."""
        try:
            return self._spent.pop()
        except IndexError:
            return None

    def _lose_cookie_dir(self) -> None:
        """The cookie directory was removed (a clean-up of the daemon's home, say): no
        cookie can come back through this notifier again, so every capture would scan fully.
        Its reader thread dispatches what is queued and fails it with ``CookieDirLost``; the
        watcher (``on_failure``) watches its worktrees again with a new directory and
        rescans them: nothing was missed, so no gap."""
        self._lost = CookieDirLost(f"the cookie directory {self.cookie_dir} was removed: no "
                                   "capture can take the fast path through this notifier")
        # Not woken: this may run after the notifier closed (its descriptors' numbers then
        # belong to other files). The reader sees it within ``IDLE_WAKE_S``.

    def cookie_seen(self, name: str) -> None:
        waiter = self._waiters.get(name)
        if waiter is not None:
            waiter.set()

    def overflowed(self) -> None:
        """Events were lost, cookies perhaps among them: no waiter gets to vouch (each sees its
        worktree's overflow and scans), and none waits for a cookie that will never come."""
        for waiter in list(self._waiters.values()):
            waiter.set()

    def start(self) -> None:
        self._thread.start()

    def retire(self) -> None:
        self.retired = True
        self.notify.interrupt()

    def join(self) -> None:
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def close(self) -> None:
        # Under the drain lock: a ``sync`` reading the notifier's descriptor must never see it
        # closed (or, worse, its number reused by another file) in the middle of a read.
        with self._drain:
            try:
                self.notify.close()
            except Exception as exc:  # noqa: BLE001 - reported; the notifier is unusable anyway
                self._report("notifier_close_errors", "cannot close the notifier of %s (its "
                             "kernel watches may leak): %s: %s", self.cookie_dir,
                             type(exc).__name__, exc)
        shutil.rmtree(self.cookie_dir, ignore_errors=True)

    def _timed_out(self, timeout: float) -> bool:
        if not self.retired:
            self._report("cookie_timeouts", "cookie through %s did not come back within %gs "
                         "(the capture scans fully)", self.cookie_dir, timeout)
        return False

    def _take_and_dispatch(self, block_ms: int = 0) -> None:
        """Take what the notifier has queued and dispatch it (caller holds ``_drain``), first
        waiting up to ``block_ms`` for something to come."""
        changes = self.notify.read(block_ms)
        if changes:
            injected_delay("dispatch")
            self._dispatch(self, changes)

    def _loop(self) -> None:
        failed: BaseException | None = None
        polled = self.notify.polled
        try:
            # A batch is taken and dispatched under ``_drain`` only, so a concurrent ``sync``
            # never overtakes a batch in hand.
            while not self.retired:
                if self._lost is not None:
                    with self._drain:  # what was queued is dispatched, not lost with it
                        self._take_and_dispatch()
                    raise self._lost
                if polled:
                    self.notify.wait(STEP_MS / 1000)
                    block = 1
                else:
                    self.notify.wait(IDLE_WAKE_S)
                    time.sleep(GATHER_S)
                    block = 0
                with self._drain:
                    self._take_and_dispatch(block)
            # Hand over what is still queued: a successor notifier already runs.
            with self._drain:
                self._take_and_dispatch()
        except Exception as exc:  # noqa: BLE001 - reported below, never a traceback
            failed = exc
        finally:
            self.close()
        if failed is not None and not self.retired:
            self._on_failure(self, failed)
