"""Files the user's repository tracks although a capture's ignore rules match them.

Owns ``TrackedIgnored``: for one stat cache, the paths the user's own index tracks that the
cache's rules match (``git ls-files --cached --ignored --exclude-standard`` on the user's index
under the cache's git dir). ``git add -A`` keeps such a file however it comes back, so a capture
asks this set before it leaves an ignored path out, not whatever its cache still holds. Promises:
- The set is listed again only when asked after the user's index, the cache's exclude file or
  the root ``.gitignore`` changed (their stat, looked at once a capture: ``new_capture``), or
  after ``forget`` (a deeper ``.gitignore`` changed); none while nothing ignored is met (cost:
  docs/performance.md). ``stale`` says the user's index changed since the last listing (``git
  add -f`` comes with no event); ``list_tracked_ignored`` lists apart from the set, so a
  verification can list off the cache's lock, and ``adopt`` takes that listing unless the set
  was forgotten since it began. Gitlinks are never in it (each has a cache of its own).
- A failed listing (git missing, an unreadable index) is logged at warning once per change of
  what it depends on and leaves the set empty: the capture never fails for it.
"""

from __future__ import annotations

import logging
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from snapshotd.core import user_gitdir
from snapshotd.store import cache_git_env

log = logging.getLogger("snapshotd.store")

_GITLINK_MODE = b"160000"
_LIST_TIMEOUT_S = 600


class TrackedIgnored:
    """The tracked-but-ignored files of worktree ``root`` under the rules of the stat-cache
    git dir ``gitdir``. Not thread-safe: used by its cache, which the service serializes."""

    def __init__(self, root: Path, gitdir: Path) -> None:
        self.root = root
        self.gitdir = gitdir
        self._signature: tuple | None = None
        self._paths: frozenset[str] = frozenset()
        self._current: tuple | None = None  # what this capture saw of the signature
        # Bumped by ``forget``: a listing made off the lock before it is not adopted.
        self.generation = 0

    def __contains__(self, path: object) -> bool:
        return path in self.paths()

    def paths(self) -> frozenset[str]:
        """Every tracked file the rules ignore, listed again if what it depends on changed
        (looked at once a capture: a crawl may ask for each of thousands of ignored files)."""
        if self._current is None:
            self._current = signature_of(self.root, self.gitdir)
        if self._current != self._signature:
            self._paths = _list(self.root, self.gitdir, self._current)
            self._signature = self._current
        return self._paths

    def new_capture(self) -> None:
        """A capture begins: the next question looks again at what the set depends on."""
        self._current = None

    def stale(self) -> bool:
        """Whether the user's index changed since the set was listed, or it never was: the
        index is no event source, and a file ``git add -f`` began tracking while nothing wrote
        it shows only here. One ``stat`` of the index the listing read (on every small tree's
        fast-path capture: 3 us where the whole signature took 30); the rest of the signature
        needs no look here: a changed exclude file or ``.gitignore`` sends the capture to a
        full scan, and a ``.git`` replaced changes that index's stat or removes it."""
        if self._signature is None:
            return True
        return _stat_key(self._signature[0]) != self._signature[1]

    def adopt(self, listing: Listing) -> None:
        """Take ``listing`` (made off the cache's lock by ``list_tracked_ignored``) as the set,
        unless ``forget`` came since it began."""
        if listing.generation == self.generation:
            self._signature, self._paths = listing.signature, listing.paths
            self._current = None

    def under(self, directory: str) -> list[str]:
        """The tracked-but-ignored files below ``directory`` (worktree-relative), sorted."""
        prefix = directory.rstrip("/") + "/"
        return sorted(p for p in self.paths() if p.startswith(prefix))

    def forget(self) -> None:
        """List the set again when it is next asked for (an ignore file changed)."""
        self._signature = None
        self._current = None
        self.generation += 1


@dataclass(frozen=True)
class Listing:
    """A listing of the tracked-but-ignored files made apart from their ``TrackedIgnored``:
    what it depended on when it began, and the ``generation`` of the set it is for."""

    generation: int
    signature: tuple
    paths: frozenset[str]


def list_tracked_ignored(root: Path, gitdir: Path, generation: int) -> Listing:
    """List the tracked-but-ignored files of ``root`` as ``TrackedIgnored.paths`` would, without
    the set itself (so off the cache's lock: a verification's scan does it beside its own)."""
    signature = signature_of(root, gitdir)
    return Listing(generation, signature, _list(root, gitdir, signature))


def signature_of(root: Path, gitdir: Path) -> tuple:
    """What the set of ``root`` depends on: the user's index (path and stat), the cache's
    exclude file and the root ``.gitignore`` (stat)."""
    user = user_gitdir(root)
    user_index = os.path.join(user, "index") if user is not None else None
    return (user_index, _stat_key(user_index), _stat_key(os.path.join(gitdir, "exclude")),
            _stat_key(os.path.join(root, ".gitignore")))


def _list(root: Path, gitdir: Path, signature: tuple) -> frozenset[str]:
    user_index, index_stat = signature[0], signature[1]
    if index_stat is None:  # no index (no repository, or nothing staged yet): nothing to list
        return frozenset()
    if not os.path.isfile(user_index):  # git would block on a FIFO there for good
        log.warning("cannot list the tracked ignored files of %s (%s is not a regular file); "
                    "ignored files are left out until its index changes", root, user_index)
        return frozenset()
    env = cache_git_env(gitdir, root)
    env["GIT_INDEX_FILE"] = str(user_index)
    try:
        proc = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--ignored", "--exclude-standard", "--stage"],
            cwd=str(root), env=env, capture_output=True, timeout=_LIST_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("cannot list the tracked ignored files of %s (%s); ignored files are "
                    "left out until its index changes", root, exc)
        return frozenset()
    if proc.returncode != 0:
        log.warning("cannot list the tracked ignored files of %s (git exited %d: %s); "
                    "ignored files are left out until its index changes", root,
                    proc.returncode, proc.stderr.decode(errors="replace").strip()[-300:])
        return frozenset()
    paths = set()
    for record in proc.stdout.split(b"\0"):
        meta, tab, name = record.partition(b"\t")
        if not tab or meta.startswith(_GITLINK_MODE):
            continue
        paths.add(os.fsdecode(name))
    return frozenset(paths)


def _stat_key(path: str | None) -> tuple[int, int, int, int] | None:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
