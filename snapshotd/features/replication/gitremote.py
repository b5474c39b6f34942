"""The git command line against a replication remote: reachability, listing, pushing.

Owns how snapshotd runs git for replication (``run_git``: scrubbed environment, no terminal
prompt, a timeout that becomes a failed result instead of an exception carrying the command
line), how a remote setting is normalised (``normalize_remote``), ``ls_remote``, ``push_refs``,
and the ancestry test the pusher and the fetcher share (``descends``).

Promises: nothing here returns or raises text with a credential in it: every error text is built
from git's stderr passed through ``redact_text`` and from the remote passed through
``redact_url``.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

import pygit2

from snapshotd.core import (
    PUSH_FAILED,
    REF_PREFIX,
    AttemptKey,
    RedactingFilter,
    ServiceError,
    redact_text,
    redact_url,
)

# Every replication module logs to this logger; the filter redacts whatever a message or a
# logged exception echoes (a URL, git's stderr) on top of the redaction at each call site.
logging.getLogger("snapshotd.replication").addFilter(RedactingFilter())

GIT_TIMEOUT_S = 300.0
NO_REMOTE_HINT = ("no remote is configured: set remote = \"<git url or path>\" in config.toml "
                  "or SNAPSHOTD_REMOTE")
_NICE = shutil.which("nice") is not None


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


def run_git(args: list[str], *, timeout: float, stdin: bytes | None = None,
            background: bool = False) -> subprocess.CompletedProcess:
    """``git *args``; a timeout is returned as a failed result (exit -1, a stderr line saying
    so), because ``TimeoutExpired`` would carry the command line, remote URL included."""
    # The daemon's environment must not redirect git (GIT_DIR, GIT_INDEX_FILE…), and a remote
    # that wants a password fails instead of waiting on a terminal that is not there.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    env.setdefault("SSH_ASKPASS_REQUIRE", "never")
    # Background pushes yield the CPU to captures (the budget is capture latency, not lag).
    nice = ["nice", "-n", "10"] if background and _NICE else []
    command = [*nice, "git", *args]
    try:
        return subprocess.run(command, env=env, capture_output=True, timeout=timeout,
                              input=stdin,
                              stdin=None if stdin is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(
            command, -1, exc.stdout or b"",
            f"git {_verb(args)} timed out after {timeout:.0f}s".encode())


def last_lines(proc: subprocess.CompletedProcess, n: int = 4) -> str:
    """The last ``n`` non-blank lines of git's stderr on one line, credentials redacted."""
    text = (proc.stderr or b"").decode(errors="replace").splitlines()
    lines = [line.strip() for line in text if line.strip()]
    joined = " | ".join(lines[-n:]) or f"git exited {proc.returncode}"
    return redact_text(joined)


def _verb(args: list[str]) -> str:
    i = 0
    while i < len(args) and args[i] in ("-C", "-c"):
        i += 2
    return args[i] if i < len(args) else ""
