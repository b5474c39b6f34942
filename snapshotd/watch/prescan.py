"""A verification's stat scan, run off the worktree's lock.

Owns ``Prescan``. A verification looks for drift (changes no event announced) with a stat scan
of the whole worktree, which under the worktree's lock made every capture wait for it. So:
``Prescan.run`` writes the stat cache to its file under the lock for a moment
(``WorktreeIndex.persist``), then, off the lock, compares that file with the worktree under the
same ignore rules, writing nothing (from ``GIT_SCAN_FROM_BYTES`` by ``git diff-files`` and ``git
ls-files --others`` side by side, else by a second libgit2 handle); ``Prescan.verify``, inside the
verification's capture under the lock, updates only the paths found and those reported since
(``capture_changed``). Steps and costs: docs/watcher.md, docs/performance.md.

Promises: a verification finds what the full scan finds, or is one: whenever this cannot stand
in for it (every case is listed in docs/watcher.md), ``verify`` returns None before changing
anything and the caller scans fully under the lock. Not looked for: a new special file or an
unlistable never-captured directory with no event (the watcher reports those as they appear).
"""

from __future__ import annotations

import logging
import os
import subprocess
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pygit2
from pygit2.enums import DeltaStatus, DiffOption

from snapshotd.capture import DIFF_FLAGS, Capture, Listing, list_tracked_ignored, unreadable_path
from snapshotd.core import injected_delay
from snapshotd.store import cache_git_env, open_cache
from snapshotd.watch.fastpath import DIRTY_LIMIT, directories_of

if TYPE_CHECKING:
    from snapshotd.capture import WorktreeIndex
    from snapshotd.service import ChangeSource, Service

log = logging.getLogger("snapshotd.store")


# From this size of the cache file (about 30,000 entries) git scans, in processes of its own:
# measured against libgit2's diff in the daemon, equal CPU at 30,000 files (107 against 113 ms),
# less above (100,000: 343 against 518 ms; a million: 2 s against 4-5 s, and libgit2's second
# copy of the cache left the daemon 200 MB larger); below, git's two process start-ups cost more
# than they save (10,000: 46 against 35 ms, a quiet worktree's verification every 10 minutes).
GIT_SCAN_FROM_BYTES = 3 << 20
# The full scan's diff, minus the write of the stat cache it refreshes.
_DETECT_FLAGS = int(DIFF_FLAGS) & ~int(DiffOption.UPDATE_INDEX)
# The two scans, as git arguments: the tracked paths that differ from the cache file (stat data,
# or content where the stat data cannot tell), and the files the cache does not hold that its
# ignore rules let in (each file listed; a nested repository as its directory).
_SCANS = {
    "tracked": ["diff-files", "--name-status", "--no-renames", "-z"],
    "untracked": ["ls-files", "--others", "--exclude-standard", "-z"],
}
# Never start a file-system monitor daemon or write an untracked cache for the stat cache's git
# dir, whatever the user's global configuration says; one thread for the tracked paths' stat
# calls (git's default takes every core for them, and a tool call's capture waits for a core).
_GIT_SETTINGS = ["-c", "core.fsmonitor=false", "-c", "core.untrackedCache=false",
                 "-c", "core.preloadIndex=false"]
SCAN_TIMEOUT_S = 600
# The scan runs below the daemon's priority: a capture that comes meanwhile goes first.
SCAN_NICENESS = 10
# A listing longer than this holds more than DIRTY_LIMIT paths (each at most 4,096 bytes and a
# status): it is not read further.
_MAX_LISTING_BYTES = 2 * (DIRTY_LIMIT + 1) * 4100


@dataclass
class Prescan:
    """What one verification's off-lock scan found: the paths whose content may differ from
    the stat cache as written at its start, by stat data or content (None: the verification
    scans fully instead). The service's ``OffLockScan`` (``snapshotd.service.change_source``)."""

    found: set[str] | None = None
    # The user's index listed again for tracked-but-ignored files when it changed since the
    # cache's listing (no event names a file ``git add -f`` began tracking), else None.
    tracked: Listing | None = None
    held_s: float = 0.0  # how long step 1 held the worktree's lock
    scan_s: float = 0.0
    why_not: str = ""  # why ``found`` is None

    @classmethod
    def run(cls, service: Service, root: Path) -> Prescan:
        """Write ``root``'s stat cache if it changed (under the worktree's lock), then compare
        it with the worktree off the lock. Never raises: a scan that cannot run says why."""
        result = cls()
        started = time.monotonic()
        with service.worktree_lock(root):
            index = service.caches.worktree(root)
            if index.workspace.caches:
                result.why_not = "nested repositories"
            elif not index.persist():
                result.why_not = "no stat cache loaded, or it could not be written"
            gitdir, unreadable = index.gitdir, set(index.unreadable)
            tracked = index.tracked_ignored
            generation = tracked.generation if tracked.stale() else None
        result.held_s = time.monotonic() - started
        if result.why_not:
            return result
        scan_started = time.monotonic()
        injected_delay("full-scan")  # tests: a scan as slow as a million files'
        try:
            if generation is not None:
                result.tracked = list_tracked_ignored(root, gitdir, generation)
            result.found = _changed_paths(gitdir, root, unreadable)
        except _CannotStandIn as exc:
            result.why_not = str(exc)
        except (pygit2.GitError, OSError, ValueError) as exc:
            result.why_not = f"the scan failed: {type(exc).__name__}: {exc}"
        result.scan_s = time.monotonic() - scan_started
        return result

    def verify(self, index: WorktreeIndex, source: ChangeSource, root: Path,
               reported: set[str]) -> Capture | None:
        """The verification's capture under the lock: the paths found and ``reported`` (taken
        from the watcher just now) updated, drift recorded; None, with nothing changed, when
        only a full scan can do (the reason is logged)."""
        if self.found is None:
            log.info("verification of %s scans fully under the lock: %s", root, self.why_not)
            return None
        wanted = self.found | reported
        if len(wanted) > DIRTY_LIMIT:
            log.info("verification of %s scans fully: %d paths changed", root, len(wanted))
            return None
        started = time.monotonic()
        unannounced = self.found - reported
        before = index.entry_ids(unannounced)
        if self.tracked is not None:
            index.tracked_ignored.adopt(self.tracked)
        # Tracked-but-ignored files the cache lacks are taken, never judged: ``git add -f`` of
        # a file nobody wrote comes with no event, and git's scans above leave ignored files out.
        capture = index.capture_changed(wanted, take_tracked=True)
        if capture is None:
            log.info("verification of %s scans fully: the per-path update declined", root)
            return None
        after = index.entry_ids(unannounced)
        # The whole scan's length, though the lock was held for little of it: a verification
        # still waits for a quiet worktree when its scan is long, so it spares the CPU too.
        source.scanned(root, self.held_s + self.scan_s + time.monotonic() - started)
        changed = {p for p in unannounced if before[p] != after[p]}
        if changed:
            source.drift(root, changed, reported)
        log.debug("verification of %s: %d path(s) found off the lock in %.2fs, %d changed "
                  "without an event", root, len(self.found), self.scan_s, len(changed))
        return capture


class _CannotStandIn(Exception):
    """What the scan found needs the full scan (its message says why)."""


def _changed_paths(gitdir: Path, root: Path, unreadable: set[str]) -> set[str]:
    """The worktree-relative paths whose content may differ from the stat cache file in
    ``gitdir``: by git in processes of its own for a cache of ``GIT_SCAN_FROM_BYTES`` or more,
    else by libgit2 in the daemon. Files known ``unreadable`` are listed too, to be tried
    again."""
    try:
        size = (gitdir / "index").stat().st_size
    except OSError:
        size = 0  # libgit2 then says what is wrong with it
    if size >= GIT_SCAN_FROM_BYTES:
        found = _changed_by_git(gitdir, root, unreadable)
    else:
        found = _changed_by_libgit2(gitdir, root, unreadable)
    if len(found) > DIRTY_LIMIT:
        raise _CannotStandIn(f"more than {DIRTY_LIMIT} paths changed")
    # A file where a directory was, or the reverse, shows as a deletion and an addition under
    # one name: the per-path update cannot express that.
    for path in found:
        for directory in directories_of(path):
            if directory in found:
                raise _CannotStandIn(f"{directory} changed between file and directory")
    return found


def _changed_by_git(gitdir: Path, root: Path, unreadable: set[str]) -> set[str]:
    """git's listing, two processes side by side (``_SCANS``): the tracked paths whose stat
    data or content differ, and the files the cache does not hold that its ignore rules let
    in. A file whose stat data alone changed is listed (the update under the lock re-reads it)."""
    env = cache_git_env(gitdir, root)
    listings = _run_scans(root, env)
    found = set(unreadable)
    records = listings["tracked"].split(b"\0")[:-1]
    for status, raw in zip(records[::2], records[1::2], strict=True):
        if status == b"T":
            raise _CannotStandIn(f"{os.fsdecode(raw)} changed type")
        found.add(raw.decode("utf-8", "surrogateescape"))
    for raw in listings["untracked"].split(b"\0")[:-1]:
        if raw.endswith(b"/"):
            raise _CannotStandIn(f"{os.fsdecode(raw)} is a nested repository")
        found.add(raw.decode("utf-8", "surrogateescape"))
    return found


def _changed_by_libgit2(gitdir: Path, root: Path, unreadable: set[str]) -> set[str]:
    """libgit2's diff of a second copy of the cache file against the worktree (the full scan's,
    writing nothing). Files known unreadable, or found so, are held out of the diff (it fails on
    them) and listed."""
    index = open_cache(gitdir).index
    held = {p for p in unreadable if p in index}
    for path in held:
        index.remove(path)
    while True:
        try:
            deltas = index.diff_to_workdir(_DETECT_FLAGS).deltas
            break
        except pygit2.GitError as exc:
            if "nesting too deep" in str(exc):
                raise _CannotStandIn("directories nested deeper than libgit2 walks") from exc
            rel = unreadable_path(exc, root)
            if rel is None or rel in held or rel not in index:
                raise
            held.add(rel)
            index.remove(rel)
    found = set(held)
    for delta in deltas:
        if delta.status == DeltaStatus.TYPECHANGE:
            raise _CannotStandIn(f"{delta.new_file.path} changed type")
        path = (delta.old_file if delta.status == DeltaStatus.DELETED else delta.new_file).path
        if path.endswith("/"):
            raise _CannotStandIn(f"{path} is a nested repository or a directory it cannot list")
        found.add(path)
    return found


def _run_scans(root: Path, env: dict[str, str]) -> dict[str, bytes]:
    """Each of ``_SCANS``' output, the two run at once. A scan that fails, warns (a directory
    it cannot list: only the full scan lists those), outlasts ``SCAN_TIMEOUT_S`` or lists more
    than ``DIRTY_LIMIT`` paths' worth of bytes cannot stand in for the full scan."""
    with ExitStack() as stack:
        running = {}
        for name, args in _SCANS.items():
            out = stack.enter_context(tempfile.TemporaryFile())
            err = stack.enter_context(tempfile.TemporaryFile())
            proc = subprocess.Popen(["git", *_GIT_SETTINGS, *args], cwd=root, env=env,
                                    stdin=subprocess.DEVNULL, stdout=out, stderr=err)
            stack.callback(_reap, proc)
            _yield_to_captures(proc)
            running[name] = (proc, out, err)
        deadline = time.monotonic() + SCAN_TIMEOUT_S
        listings: dict[str, bytes] = {}
        for name, (proc, out, err) in running.items():
            try:
                code = proc.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired as exc:
                raise _CannotStandIn(f"git {_SCANS[name][0]} took over {SCAN_TIMEOUT_S} s") \
                    from exc
            err.seek(0)
            complaint = err.read(4096).decode(errors="replace").strip()
            if code != 0 or complaint:
                raise _CannotStandIn(f"git {_SCANS[name][0]} (exit {code}): "
                                     f"{complaint.splitlines()[0] if complaint else ''}")
            out.seek(0)
            listings[name] = out.read(_MAX_LISTING_BYTES + 1)
            if len(listings[name]) > _MAX_LISTING_BYTES:
                raise _CannotStandIn(f"more than {DIRTY_LIMIT} paths changed")
        return listings


def _yield_to_captures(proc: subprocess.Popen) -> None:
    """Lower the scan's priority (``SCAN_NICENESS``) at once, before git has read the cache
    file and started any thread of its own (they inherit it): at full priority the scan took
    the cores a tool call's capture needed (87 ms for one at a million files)."""
    try:
        os.setpriority(os.PRIO_PROCESS, proc.pid, SCAN_NICENESS)
    except OSError as exc:  # it exited already, or the system refuses
        log.info("could not lower the priority of a verification scan: %s", exc)


def _reap(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()
