"""The git commands that write ``store.git``: a remote's refs fetched, refs adopted, ``git gc``.

Owns ``run_store_git`` (``git -C <store> …`` through ``core.run_git``: scrubbed environment,
no terminal prompt, a timeout as a failed result) and the writing commands ``Store`` runs through it: ``fetch_staged``, ``adopt_ref``, ``drop_staged`` and
``collect_garbage``. Their callers read the ``CompletedProcess`` for git's own words.

Promises: no other module of snapshotd runs a git command that writes the store
(``tests/test_boundaries.py`` checks it); fetched refs land only under the namespace the caller
names, objects only after git's ``transfer.fsckObjects`` checks; a ref is adopted only by a
compare-and-swap from the value the caller saw; refs stay loose through a gc.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from snapshotd.core import last_lines, run_git

_ZERO = "0" * 40


def run_store_git(store: Path, args: list[str], *, timeout: float | None,
                  stdin: bytes | None = None,
                  env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``git -C <store> *args`` through ``core.run_git`` (scrubbed environment, plus ``env``)."""
    return run_git(["-C", str(store), *args], timeout=timeout, stdin=stdin, env=env)


def fetch_staged(store: Path, url: str, src: str, dst: str,
                 timeout: float) -> subprocess.CompletedProcess:
    """Fetch the remote's ``src`` (a ref or a ``…/*`` pattern) into ``dst``, every object
    checked by git on its way in; no tags, no FETCH_HEAD, no automatic gc."""
    return run_store_git(store, ["-c", "transfer.fsckObjects=true", "-c",
                                 "fetch.fsckObjects=true", "fetch", "--no-tags",
                                 "--no-write-fetch-head", "--no-auto-gc", url, f"+{src}:{dst}"],
                         timeout=timeout)


def adopt_ref(store: Path, ref: str, tip: str, current: str | None) -> subprocess.CompletedProcess:
    """Point ``ref`` at ``tip`` only if it still names ``current`` (None: it does not exist)."""
    return run_store_git(store, ["update-ref", ref, tip, current or _ZERO], timeout=60.0)


def drop_staged(store: Path, staging: str) -> str | None:
    """Remove every ref under ``staging``; what went wrong, or None. A failure leaves them
    behind (they only pin objects until the next gc): the caller logs it, never raises."""
    proc = run_store_git(store, ["for-each-ref", "--format=%(refname)", staging], timeout=60.0)
    if proc.returncode != 0:
        return f"could not list staging refs {staging}: {last_lines(proc)}"
    names = proc.stdout.decode(errors="replace").split()
    if names:
        script = "".join(f"delete {n}\n" for n in names).encode()
        proc = run_store_git(store, ["update-ref", "--stdin"], timeout=60.0, stdin=script)
        if proc.returncode != 0:
            return f"could not remove staging refs {staging}: {last_lines(proc)}"
    return None


def collect_garbage(store: Path, prune_grace_s: float) -> subprocess.CompletedProcess:
    """``git gc`` of the store, pruning unreachable objects older than ``prune_grace_s``."""
    # Refs stay loose: packing them could race the daemon's ref updates.
    return run_store_git(store, ["-c", "gc.packRefs=false", "-c", "gc.autoDetach=false",
                                 "-c", "gc.reflogExpire=now",
                                 "-c", "gc.reflogExpireUnreachable=now", "gc", "--quiet",
                                 f"--prune={int(prune_grace_s)}.seconds.ago"],
                         timeout=None, env={"GIT_CONFIG_NOSYSTEM": "1"})
