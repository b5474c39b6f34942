"""The gap record and the gap spool (DESIGN §8, docs/protocol.md "Gap records").

Owns the record's shape (``make_gap``), the torn-line-free append (``append_gap``) and a tolerant
reader (``read_gaps``). The daemon imports these: there is one definition of the format.

Promises:
- A record is one line of compact JSON with exactly the keys ``ts, run_id, node_id, iteration,
  attempt, worktree, tier, source, tool_use_id, reason, detail``; ``ts`` is ISO-8601 UTC with
  milliseconds and a ``Z``.
- ``append_gap`` writes the whole line with one ``write`` on an ``O_APPEND`` descriptor while
  holding ``flock(LOCK_EX)``: concurrent writers (hooks, wraps, the daemon) never interleave or
  tear lines. It raises ``OSError`` if the spool cannot be written; callers decide whether that
  matters.
- ``read_gaps`` never fails on a damaged spool: a torn or invalid line is skipped.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

from .paths import gaps_path


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


def append_gap(record: dict, path: Path | None = None) -> None:
    """Append ``record`` as one line to the spool at ``path`` (default ``gaps_path()``)."""
    target = Path(path) if path is not None else gaps_path()
    # default=str: a stray Path or exception object must not cost the record.
    # backslashreplace: a lone surrogate (an undecodable file name) becomes a JSON \udcXX escape,
    # which json.loads reads back, instead of failing the encode.
    line = json.dumps(record, ensure_ascii=False, separators=(",", ":"), default=str) + "\n"
    data = line.encode("utf-8", "backslashreplace")
    parent = target.parent
    if not parent.is_dir():
        os.makedirs(parent, mode=0o700, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        # O_APPEND makes each write land at the end; the lock makes a write that the kernel
        # splits (large lines, NFS, signals) still land contiguously.
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def read_gaps(path: Path | None = None) -> list[dict]:
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


def _utc_now_ms() -> str:
    # time.gmtime + strftime rather than datetime: one less import on the hook's path.
    # Seconds and milliseconds come from one integer so float rounding cannot make them disagree.
    seconds, millis = divmod(int(time.time() * 1000), 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"
