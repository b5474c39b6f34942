"""Files the user's repository tracks although a capture's ignore rules match them.

Owns ``TrackedIgnored``: for one stat cache, the paths the user's own index tracks that the
cache's ignore rules match, as git lists them (``git ls-files --cached --ignored
--exclude-standard`` run on the user's index under the cache's git dir, so with the cache's
rules). ``git add -A`` in the user's repository keeps such a file
however it comes back: re-created in a deleted ignored directory, checked out from another
branch, force-added after the cache was started. A capture asks this set before it leaves an
ignored path out, instead of trusting whatever its own cache happened to still hold.

Promises:
- The set is listed again only when it is asked for after the user's index, the cache's
  exclude file or the root ``.gitignore`` changed (their stat, looked at once a capture:
  ``new_capture``), or after ``forget`` (a
  ``.gitignore`` deeper in the tree changed): about 0.4 s for a million tracked files, 5 ms
  for ten thousand, and none while nothing ignored is met.
- Gitlinks (submodules) are never in it: each is captured by a cache of its own.
- A listing that fails (git missing, an index git cannot read) is logged at warning, once
  per change of what it depends on, and leaves the set empty: an ignored file is then left
  out as the rules say; the capture never fails for it.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path

from snapshotd.ignore_rules import cache_git_env
from snapshotd.user_repo import user_gitdir

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
        self._looked = False  # whether this capture looked at the signature already

    def __contains__(self, path: object) -> bool:
        return path in self.paths()

    def paths(self) -> frozenset[str]:
        """Every tracked file the rules ignore, listed again if what it depends on changed
        (looked at once a capture: a crawl may ask for each of thousands of ignored files)."""
        if not self._looked:
            signature = self._current_signature()
            if signature != self._signature:
                # No index (no repository, or nothing staged yet): nothing to list.
                self._paths = self._list(signature[0]) if signature[1] else frozenset()
                self._signature = signature
            self._looked = True
        return self._paths

    def new_capture(self) -> None:
        """A capture begins: the next question looks again at what the set depends on."""
        self._looked = False

    def under(self, directory: str) -> list[str]:
        """The tracked-but-ignored files below ``directory`` (worktree-relative), sorted."""
        prefix = directory.rstrip("/") + "/"
        return sorted(p for p in self.paths() if p.startswith(prefix))

    def forget(self) -> None:
        """List the set again when it is next asked for (an ignore file changed)."""
        self._signature = None
        self._looked = False

    # -- helpers ---------------------------------------------------------------------------

    def _current_signature(self) -> tuple:
        gitdir = user_gitdir(self.root)
        user_index = gitdir / "index" if gitdir is not None else None
        return (user_index, _stat_key(user_index), _stat_key(self.gitdir / "exclude"),
                _stat_key(self.root / ".gitignore"))

    def _list(self, user_index: Path) -> frozenset[str]:
        env = cache_git_env(self.gitdir, self.root)
        env["GIT_INDEX_FILE"] = str(user_index)
        try:
            proc = subprocess.run(
                ["git", "ls-files", "-z", "--cached", "--ignored", "--exclude-standard",
                 "--stage"],
                cwd=str(self.root), env=env, capture_output=True, timeout=_LIST_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.warning("cannot list the tracked ignored files of %s (%s); ignored files are "
                        "left out until its index changes", self.root, exc)
            return frozenset()
        if proc.returncode != 0:
            log.warning("cannot list the tracked ignored files of %s (git exited %d: %s); "
                        "ignored files are left out until its index changes", self.root,
                        proc.returncode, proc.stderr.decode(errors="replace").strip()[-300:])
            return frozenset()
        paths = set()
        for record in proc.stdout.split(b"\0"):
            meta, tab, name = record.partition(b"\t")
            if not tab or meta.startswith(_GITLINK_MODE):
                continue
            paths.add(os.fsdecode(name))
        return frozenset(paths)


def _stat_key(path: Path | None) -> tuple[int, int, int, int] | None:
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
