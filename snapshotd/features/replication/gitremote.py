"""The git command line against a replication remote: reachability, listing, pushing.

Owns how a remote setting is normalised (``normalize_remote``), ``ls_remote``, ``push_refs``,
and the ancestry test the pusher and the fetcher share (``descends``).

Promises: nothing here returns or raises text with a credential in it: every error text is built
from git's stderr passed through ``redact_text`` and from the remote passed through
``redact_url``.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pygit2

from snapshotd.core import (
    PUSH_FAILED,
    REF_PREFIX,
    AttemptKey,
    RedactingFilter,
    ServiceError,
    last_lines,
    redact_url,
    run_git,
)

# Every replication module logs to this logger; the filter redacts whatever a message or a
# logged exception echoes (a URL, git's stderr) on top of the redaction at each call site.
logging.getLogger("snapshotd.replication").addFilter(RedactingFilter())

GIT_TIMEOUT_S = 300.0
NO_REMOTE_HINT = ("no remote is configured: set remote = \"<git url or path>\" in config.toml "
                  "or SNAPSHOTD_REMOTE")


def normalize_remote(remote: str | None) -> str:
    """A local path becomes absolute (git runs in the store); URLs and scp-like ``host:path``
    are kept as given."""
    remote = (remote or "").strip()
    if not remote or "://" in remote:
        return remote
    colon, slash = remote.find(":"), remote.find("/")
    if colon > 0 and (slash < 0 or colon < slash):
        return remote  # scp-like ssh: user@host:path
    return os.path.abspath(os.path.expanduser(remote))


def ls_remote(url: str, pattern: str) -> dict[str, str]:
    """The remote's refs matching ``pattern`` (ref -> commit id). ``push-failed`` on failure."""
    proc = run_git(["ls-remote", "--refs", url, pattern], timeout=60.0)
    if proc.returncode != 0:
        raise ServiceError(PUSH_FAILED,
                           f"cannot reach {redact_url(url)}: {last_lines(proc)}")
    out = {}
    for line in proc.stdout.decode(errors="replace").splitlines():
        sha, _, name = line.partition("\t")
        if name:
            out[name] = sha
    return out


def push_refs(store: Path, url: str, refs: dict[str, str], *,
              timeout: float = GIT_TIMEOUT_S) -> tuple[list[str], str | None]:
    """Push each ``ref`` at its commit (forced: this host owns the attempts it captures; a
    retention rewrite is not a fast-forward). Returns the refs now on the remote and an error
    (redacted), or None."""
    if not refs:
        return [], None
    specs = [f"+{sha}:{ref}" for ref, sha in refs.items()]
    proc = run_git(["-C", str(store), "push", "--porcelain", "--no-verify", url, *specs],
                   timeout=timeout, background=True)
    ok = []
    for line in proc.stdout.decode(errors="replace").splitlines():
        parts = line.split("\t")
        if len(parts) >= 2 and parts[0] in (" ", "+", "*", "=") and ":" in parts[1]:
            ok.append(parts[1].rsplit(":", 1)[1])
    if proc.returncode != 0:
        return ok, last_lines(proc)
    return ok, None


def descends(repo: pygit2.Repository, commit: str, ancestor: str) -> bool:
    """``commit`` contains ``ancestor`` (or is it); False when either is unknown locally (the
    callers then refuse to overwrite or adopt, which is the safe side)."""
    if commit == ancestor:
        return True
    try:
        return repo.descendant_of(commit, ancestor)
    except (KeyError, ValueError, pygit2.GitError):
        return False


def run_pattern(run_id: str | None) -> str:
    """The ref pattern of one run's attempt refs, or of every run's."""
    if run_id is None:
        return REF_PREFIX + "*"
    return AttemptKey(run_id, "x", 0, 1).ref.rsplit("/", 3)[0] + "/*"
