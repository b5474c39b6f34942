"""The gap record and the gap spool (docs/durability.md "Gaps", docs/protocol.md "Gap records").

Owns the record's shape (``make_gap``), the torn-line-free append (``append_gap``) and a tolerant
reader (``read_gaps``). The daemon imports these: there is one definition of the format.
Promises:
- A record is one line of compact JSON with exactly the keys ``ts, run_id, node_id, iteration,
  attempt, worktree, tier, source, tool_use_id, reason, detail``; ``ts`` is ISO-8601 UTC with
  milliseconds and a ``Z``.
- ``append_gap`` writes the whole line with one ``write`` on an ``O_APPEND`` descriptor, under
  ``flock(LOCK_EX)`` when it gets the lock by its ``deadline`` (default ``LOCK_WAIT_S``), else in
  one unlocked ``O_APPEND`` write: never waits past it, never loses the record (why a write stays
  whole: docs/protocol.md, "Gap records"). It refuses (``OSError``) a spool that is not a regular
  file, never blocks opening one, and raises ``OSError`` if it cannot be written.
- ``read_gaps`` never fails on a damaged spool: a torn or invalid line is skipped.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time
from pathlib import Path

from .paths import gaps_path, gaps_path_str

# How long ``append_gap`` waits for the spool's lock when its caller gives no deadline. Writers
# hold it for one small write; a lock held this long is stuck, not busy.
LOCK_WAIT_S = 2.0


def make_gap(*, run_id: str | None, node_id: str | None, iteration: int | None,
             attempt: int | None, worktree: str | None, tier: int | None, source: str | None,
             tool_use_id: str | None, reason: str, detail: str | None) -> dict:
    """Build one gap record, stamped now."""
    return {
        "ts": _utc_now_ms(),
        "run_id": run_id,
        "node_id": node_id,
        "iteration": iteration,
        "attempt": attempt,
        "worktree": None if worktree is None else os.fspath(worktree),
        "tier": tier,
        "source": source,
        "tool_use_id": tool_use_id,
        "reason": reason,
        "detail": detail,
    }


def append_gap(record: dict, path: str | os.PathLike[str] | None = None, *,
               deadline: float | None = None) -> bool:
    """Append ``record`` as one line to the spool at ``path`` (default ``gaps_path()``).

    Returns True when the line was written under the spool's lock, False when the lock could not
    be had by ``deadline`` and the line went out in one unlocked ``O_APPEND`` write."""
    target = os.fspath(path) if path is not None else gaps_path_str()
    # default=str: a stray Path or exception object must not cost the record.
    # backslashreplace: a lone surrogate (an undecodable file name) becomes a JSON \udcXX escape,
    # which json.loads reads back, instead of failing the encode.
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
    data = line.encode("utf-8", "backslashreplace")
    parent = os.path.dirname(target)
    if parent and not os.path.isdir(parent):
        os.makedirs(parent, mode=0o700, exist_ok=True)
    # O_NONBLOCK: opening a FIFO planted at the spool's path must fail, not wait for a reader.
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NONBLOCK,
                 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, f"the gap spool {target} is not a regular file")
        give_up = deadline if deadline is not None else time.monotonic() + LOCK_WAIT_S
        locked = _lock(fd, give_up)
        try:
            # O_APPEND makes each write land at the end; the lock makes a write that the kernel
            # splits (large lines, NFS, signals) still land contiguously.
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        finally:
            if locked:
                fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
    return locked


def read_gaps(path: str | os.PathLike[str] | None = None) -> list[dict]:
    """All records in the spool, in order; a missing spool is empty, damaged lines are skipped."""
    target = Path(path) if path is not None else gaps_path()
    try:
        data = target.read_bytes()
    except FileNotFoundError:
        return []
    records: list[dict] = []
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw)
        except ValueError:  # JSONDecodeError and UnicodeDecodeError both subclass it
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


def _lock(fd: int, deadline: float) -> bool:
    # Polled rather than a blocking flock: a blocking one has no timeout, and a signal-based
    # one would disturb the host process (wrap runs inside agents).
    pause = 0.001
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        except OSError:  # no locks on this file system (ENOLCK): the O_APPEND write still works
            return False
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        time.sleep(min(pause, remaining))
        pause = min(pause * 2, 0.02)


def _utc_now_ms() -> str:
    # time.gmtime + strftime rather than datetime: one less import on the hook's path.
    # Seconds and milliseconds come from one integer so float rounding cannot make them disagree.
    seconds, millis = divmod(int(time.time() * 1000), 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
