"""Attribution: which attempt a request belongs to, and which directories may be worktrees.

Owns the order in which a ``snapshot`` request is attributed: the attempt the request names
(``run_id``/``node_id``, with ``attempt`` or the node's newest), else the active attempt registered
for the worktree holding ``cwd`` (the nearest registered ancestor; the newest attempt when several
are active there), else the zero-setup ``fallback`` the hook proposes (``session_attempt``). A
request with a fallback names an agent session, so it only goes to an attempt registered with
``attempt_begin`` or to its own session's attempt, never to another session's zero-setup attempt
in the same directory (docs/agents.md, "Several sessions in one folder"). Refuses directories
never captured (the filesystem root, pseudo filesystems, the snapshotd home, anything in or above
it) and, for zero-setup worktrees only, the home directory and trees over ``max_zero_setup_files``.

Promises: an attempt is created only for a directory that passed those checks; every refusal of a
capture request is a ``ServiceError`` and leaves a gap (through the ``record_gap`` it is given);
a refusal of ``attempt_begin`` (no request to attribute a gap to) leaves none.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn

from snapshotd.capture import StatCaches
from snapshotd.core import (
    BAD_REQUEST,
    NOT_FOUND,
    WORKTREE_MISSING,
    WORKTREE_REFUSED,
    AttemptKey,
    ServiceError,
    abs_path_field,
    files_under,
    int_value,
)
from snapshotd.ledger import ACTIVE, Attempt, Ledger
from snapshotd.service.request import SnapshotRequest

PSEUDO_FS = (Path("/proc"), Path("/sys"), Path("/dev"))
# Skipped when counting a zero-setup tree: never captured, or dependencies that dwarf the work.
_UNCOUNTED_DIRS = {".git", "node_modules", ".venv", "venv", "__pycache__", ".tox", ".mypy_cache"}

GapRecorder = Callable[[SnapshotRequest, "Attempt | None", str, str], None]


class Attribution:
    """Finds or creates the attempt of a request; shared by every op that names an attempt."""

    def __init__(self, *, home: Path, ledger: Ledger, caches: StatCaches,
                 max_zero_setup_files: int,
                 record_gap: GapRecorder, announce_active: Callable[[Attempt], None]) -> None:
        self.home = home
        self.ledger = ledger
        self.caches = caches
        self.max_zero_setup_files = max_zero_setup_files
        self.record_gap = record_gap
        self.announce_active = announce_active

    def attribute(self, req: SnapshotRequest) -> Attempt:
        """Which attempt a capture belongs to: explicit, registered worktree, or zero-setup."""
        if req.run_id is not None:
            attempt = self._named(req)
            self._refuse_outside(req, attempt)
            return attempt
        registered = self.active_for(req.cwd, registered_only=req.fallback is not None)
        if registered is not None:
            return registered
        if req.fallback is None:
            raise ServiceError(
                BAD_REQUEST, f"no attempt is registered for {req.cwd}: name run_id and "
                "node_id, or run `snapshotd attempt begin` for this worktree")
        attempt = self.session_attempt(req)
        self._outside_gap(req, attempt)
        return attempt

    def existing(self, req: SnapshotRequest) -> Attempt | None:
        """The active attempt ``attribute`` would give ``req`` when it need create none (the
        ``before_tool`` op): no attempt is created, no directory checked, no gap written."""
        if req.run_id is not None:
            assert req.node_id is not None
            attempt = (self.newest_attempt(req.run_id, req.node_id, req.iteration)
                       if req.attempt is None else self.ledger.get_attempt(
                           AttemptKey(req.run_id, req.node_id, req.iteration, req.attempt)))
        else:
            attempt = self.active_for(req.cwd, registered_only=req.fallback is not None)
            if attempt is None and req.fallback is not None:
                fb = req.fallback
                attempt = self.newest_attempt(fb["run_id"], fb["node_id"], fb["iteration"])
        if attempt is None or attempt.state != ACTIVE or attempt.elsewhere(self.ledger.host):
            return None
        return attempt

    def session_attempt(self, req: SnapshotRequest, *, owner_pid: int | None = None,
                        renew: bool = False) -> Attempt:
        """The attempt of the agent session ``req.fallback`` names: its node's newest attempt
        while that is active (unless ``renew``), else a new one: the fallback's number for the
        first, one more than the newest once that ended (a resumed session, or one whose
        registered attempt came and went), so a session's later work is never fenced. A new
        one is created (zero-setup, owned by ``owner_pid``) only for a directory that may be
        adopted; else a gap and ``worktree-refused``."""
        fb = req.fallback
        assert fb is not None
        newest = self.newest_attempt(fb["run_id"], fb["node_id"], fb["iteration"])
        if newest is not None and newest.state == ACTIVE and not renew:
            return newest
        number = fb["attempt"] if newest is None else newest.key.attempt + 1
        key = AttemptKey(fb["run_id"], fb["node_id"], fb["iteration"], number)
        req.run_id, req.node_id, req.attempt = key.run_id, key.node_id, key.attempt
        root = self.checked_root(Path(fb["worktree"]), req)
        self._refuse_zero_setup(root, req)
        return self._new_attempt(key, root, zero_setup=True, owner_pid=owner_pid)

    def find_attempt(self, run_id: str, node_id: str, iteration: int,
                     number: object) -> Attempt:
        """The attempt ``number`` of the node (its newest when None), or ``not-found``."""
        if number is None:
            attempt = self.newest_attempt(run_id, node_id, iteration)
        else:
            n = int_value("attempt", number, 1)
            attempt = self.ledger.get_attempt(AttemptKey(run_id, node_id, iteration, n))
        if attempt is None:
            raise ServiceError(NOT_FOUND,
                               f"no attempt for run {run_id!r} node {node_id!r} iteration "
                               f"{iteration}" + (f" attempt {number}" if number else ""))
        return attempt

    def newest_attempt(self, run_id: str, node_id: str, iteration: int) -> Attempt | None:
        number = self.ledger.last_attempt_number(run_id, node_id, iteration)
        if number == 0:
            return None
        return self.ledger.get_attempt(AttemptKey(run_id, node_id, iteration, number))

    def active_for(self, cwd: Path, *, registered_only: bool = False) -> Attempt | None:
        """The active attempt whose worktree is ``cwd`` or its nearest registered ancestor;
        with ``registered_only``, among attempts begun by ``attempt_begin`` (not zero-setup)."""
        path = resolve(cwd)
        best: Attempt | None = None
        for attempt in self.ledger.active_attempts():
            if (registered_only and attempt.zero_setup) or attempt.elsewhere(self.ledger.host):
                continue
            root = Path(attempt.worktree)
            if path == root or root in path.parents:
                if best is None or len(str(root)) > len(best.worktree) or (
                        str(root) == best.worktree and attempt.pk > best.pk):
                    best = attempt
        return best

    def worktree_from_cwd(self, fields: dict) -> Path:
        """The worktree an ``attempt_begin`` names in ``cwd``, checked like a capture's (but no
        gap: there is no capture request to attribute one to)."""
        cwd = abs_path_field(fields, "cwd")
        if cwd is None:
            raise ServiceError(BAD_REQUEST, "cwd must be an absolute path")
        return self.checked_root(cwd, None)

    def checked_root(self, path: Path, req: SnapshotRequest | None) -> Path:
        """``path`` resolved, when it may be a worktree; else a gap (for a request) and a
        ``worktree-missing``/``worktree-refused`` error."""
        root = resolve(path)
        if not root.is_dir():
            self._refuse(req, WORKTREE_MISSING, f"{path} is not a directory",
                         f"{path} does not exist or is not a directory")
        if root == Path("/") or any(root == p or p in root.parents for p in PSEUDO_FS):
            detail = f"{root} is the filesystem root or a pseudo filesystem; it cannot be captured"
            self._refuse(req, WORKTREE_REFUSED, detail, detail)
        home = resolve(self.home)
        if root == home or root in home.parents or home in root.parents:
            self._refuse(req, WORKTREE_REFUSED,
                         f"{root} holds or is inside the snapshotd home {home}",
                         f"{root} holds or is inside the snapshotd home {home}; set "
                         "SNAPSHOTD_HOME elsewhere")
        return root

    # -- helpers ---------------------------------------------------------------------------

    def _named(self, req: SnapshotRequest) -> Attempt:
        assert req.run_id is not None and req.node_id is not None
        if req.attempt is None:
            found = self.newest_attempt(req.run_id, req.node_id, req.iteration)
            if found is not None:
                return found
            key = AttemptKey(req.run_id, req.node_id, req.iteration, 1)
        else:
            key = AttemptKey(req.run_id, req.node_id, req.iteration, req.attempt)
            found = self.ledger.get_attempt(key)
            if found is not None:
                return found
        registered = self.active_for(req.cwd)
        root = Path(registered.worktree) if registered else self.checked_root(req.cwd, req)
        return self._new_attempt(key, root, zero_setup=False)

    def _new_attempt(self, key: AttemptKey, root: Path, *, zero_setup: bool,
                     owner_pid: int | None = None) -> Attempt:
        self.ledger.ensure_worktree(self.caches.worktree(root).id, str(root))
        attempt = self.ledger.create_attempt(key, str(root), zero_setup=zero_setup,
                                             owner_pid=owner_pid)
        self.announce_active(attempt)
        return attempt

    def _refuse(self, req: SnapshotRequest | None, code: str, gap_detail: str,
                message: str, *, reason: str | None = None,
                attempt: Attempt | None = None) -> NoReturn:
        if req is not None:
            self.record_gap(req, attempt, reason or code, gap_detail)
        raise ServiceError(code, message)

    def _outside_gap(self, req: SnapshotRequest, attempt: Attempt) -> None:
        """A session's tool call whose project is outside its attempt's worktree (resumed in
        another project while the attempt runs, or an agent that names only its cwd and moved
        to another repository): the attempt's worktree is captured, and a gap says that
        project's changes are not (``outside-worktree``)."""
        assert req.fallback is not None
        if req.fallback["worktree"] == attempt.worktree:  # the usual case: no path resolved
            return
        project = resolve(Path(req.fallback["worktree"]))
        root = Path(attempt.worktree)
        if project == root or root in project.parents:
            return
        self.record_gap(req, attempt, "outside-worktree",
                        f"this tool call ran in {project}, outside {root}, the worktree of its "
                        f"session's attempt {attempt.key}: {root} is captured, {project}'s "
                        f"changes are not; run the agent there in a session of its own, or "
                        f"`snapshotd attempt begin` for it")

    def _refuse_outside(self, req: SnapshotRequest, attempt: Attempt) -> None:
        """A request naming its attempt from a directory outside that attempt's worktree (a
        hook inheriting ``SNAPSHOTD_RUN_ID`` in another checkout, or on another host sharing the
        ledger): capturing the attempt's
        worktree would acknowledge a tree without the tool call's change, so it is an
        ``outside-worktree`` gap and a ``worktree-refused`` reply (the hook still exits 0)."""
        cwd = resolve(req.cwd)
        root = resolve(Path(attempt.worktree))
        if attempt.elsewhere(self.ledger.host):
            # A ledger shared by several hosts: that path names a directory on another host,
            # and the attempt's chain is in that host's store.
            detail = (f"attempt {attempt.key} works on another host ({attempt.host}), in its "
                      f"{root}: this daemon ({self.ledger.host}) captured nothing of {cwd}; "
                      f"name an attempt begun on this host")
            self._refuse(req, WORKTREE_REFUSED, detail, detail, reason="outside-worktree",
                         attempt=attempt)
        if cwd == root or root in cwd.parents:
            return
        detail = (f"this request ran in {cwd}, outside {root}, the worktree of the attempt "
                  f"{attempt.key} it names: nothing was captured; run it there, or name an "
                  f"attempt begun for {cwd}")
        self._refuse(req, WORKTREE_REFUSED, detail, detail, reason="outside-worktree",
                     attempt=attempt)

    def _refuse_zero_setup(self, root: Path, req: SnapshotRequest) -> None:
        reason = None
        if root == Path("/"):
            reason = "it is the filesystem root"
        elif root == resolve(Path.home()):
            reason = "it is your home directory"
        else:
            limit = self.max_zero_setup_files
            if count_files(root, limit) > limit:
                reason = (f"it holds more than {limit} files (raise max_zero_setup_files in "
                          "config.toml, or run `snapshotd attempt begin` for it)")
        if reason is not None:
            detail = (f"refusing to adopt {root} as a zero-setup worktree: {reason}; begin an "
                      "attempt for a project directory instead")
            self._refuse(req, WORKTREE_REFUSED, detail, detail)


def resolve(path: Path) -> Path:
    """``path`` with symlinks resolved, or made absolute when it cannot be resolved."""
    try:
        return path.resolve(strict=False)
    except (OSError, RuntimeError):
        return Path(os.path.abspath(path))


def count_files(root: Path, limit: int) -> int:
    """Files under root (skipping .git and dependency folders), counting stops past ``limit``.
    A directory that cannot be read counts nothing: it cannot be captured either."""
    count = 0
    for _entry in files_under(root, skip=_UNCOUNTED_DIRS):
        count += 1
        if count > limit:
            break
    return count
