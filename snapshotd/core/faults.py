"""Test-only seams for crashes, delays and write faults; inert unless their environment is set.

Owns ``SNAPSHOTD_CRASH_AT=<point>[:<n>]`` (``os._exit`` the n-th time, default the first,
``crash_point(<point>)`` is reached), ``SNAPSHOTD_DELAY_AT=<point>:<ms>`` (``delay(<point>)``
sleeps, widening a race window so a test can show it is closed; ``SNAPSHOTD_DELAY_MARK=<path>``
is created, holding the point's name, as each delay begins), ``SNAPSHOTD_STOP_LIMIT_S=<s>`` (the
daemon's limit on a whole stop shortened) and ``SNAPSHOTD_FAULT_FILE=<path>`` (while it exists,
each line ``<seam>=<ERRNO>`` makes ``check(<seam>)`` raise that ``OSError``; deleting the file
clears the fault at once). The first three are read once at start. Every point and seam, and
what it stands for, is listed in docs/durability.md ("Test seams").

Promises: with no variable set, ``crash_point``, ``delay`` and ``check`` cost one comparison.
"""

from __future__ import annotations

import errno
import os
import threading
import time

CRASH_POINTS = ("after-blobs", "after-tree", "after-commit", "after-ref", "after-row",
                "before-reply", "restore-mid", "purge-after-commits", "purge-after-journal",
                "purge-after-ledger", "gc-after-journal", "gc-after-ledger")
SEAMS = ("objects", "ledger", "gaps", "watch", "notifier-close", "acceptor")
CRASH_EXIT_STATUS = 86


def _parse_crash(value: str | None) -> tuple[str | None, int]:
    if not value:
        return None, 0
    point, _, count = value.partition(":")
    return point, int(count) if count.isdigit() and int(count) > 0 else 1


def _parse_delay(value: str | None) -> tuple[str | None, float]:
    point, _, ms = (value or "").partition(":")
    try:
        return (point or None), max(0.0, float(ms)) / 1000
    except ValueError:
        return None, 0.0


def _parse_seconds(value: str | None) -> float:
    try:
        return max(0.0, float(value or 0))
    except ValueError:
        return 0.0


_CRASH_POINT, _CRASH_AFTER = _parse_crash(os.environ.get("SNAPSHOTD_CRASH_AT"))
_DELAY_POINT, _DELAY_MS = _parse_delay(os.environ.get("SNAPSHOTD_DELAY_AT"))
_DELAY_MARK = os.environ.get("SNAPSHOTD_DELAY_MARK") or None
_FAULT_FILE = os.environ.get("SNAPSHOTD_FAULT_FILE") or None
_STOP_LIMIT_S = _parse_seconds(os.environ.get("SNAPSHOTD_STOP_LIMIT_S"))
_hits = 0
_lock = threading.Lock()


def crash_point(name: str) -> None:
    """Die here, abruptly, if this is the armed crash point (no cleanup, like ``kill -9``)."""
    global _hits
    if _CRASH_POINT is None or name != _CRASH_POINT:
        return
    with _lock:
        _hits += 1
        if _hits >= _CRASH_AFTER:
            os._exit(CRASH_EXIT_STATUS)


def injected_delay(name: str) -> None:
    """Sleep here if this is the armed delay point."""
    if _DELAY_POINT is not None and name == _DELAY_POINT:
        if _DELAY_MARK is not None:
            with open(_DELAY_MARK, "w") as f:
                f.write(name)
        time.sleep(_DELAY_MS)


def stop_limit_s() -> float | None:
    """The shortened stop limit a test set, or None."""
    return _STOP_LIMIT_S or None


def check_fault(seam: str) -> None:
    """Raise the injected ``OSError`` for ``seam`` while the fault file names it."""
    if _FAULT_FILE is None:
        return
    try:
        with open(_FAULT_FILE) as f:
            lines = f.read().splitlines()
    except OSError:
        return
    for line in lines:
        name, _, code = line.partition("=")
        if name.strip() == seam:
            number = getattr(errno, code.strip(), errno.EIO)
            raise OSError(number, f"{os.strerror(number)} (injected at {seam})")
