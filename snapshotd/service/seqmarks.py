"""Seq reservations: a durable high-water mark per attempt, so a seq is never handed out twice.

Owns ``<home>/seqmarks/``: one small file per attempt holding the lowest seq the attempt may
hand out next. Seqs are reserved in blocks of ``BLOCK``: before a seq at or past the mark is
used, the mark moves ``BLOCK`` past it and is fsynced (file and directory), at most one fsync
per ``BLOCK`` captures; a clean stop writes the exact next seq. Each mark records its boot
(``/proc/sys/kernel/random/boot_id``, or ``SNAPSHOTD_BOOT_ID`` for tests): within a boot the page
cache outlives a daemon crash, so only after a reboot is the mark the floor (docs/durability.md).

Promises: a seq handed out (and so possibly acknowledged) is below the durable mark before the
capture that uses it writes anything; after a reboot the next seq is at least the mark. With
``durability = "process"`` a power cut can take the ledger's and the ref's newest checkpoints,
but never make their seqs available again: numbering resumes at the mark (skipping at most
``BLOCK`` - 1 numbers that were never handed out). A daemon crash without a reboot, or a clean
stop, numbers on without a skip.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path

from snapshotd.core import AttemptKey, boot_id, make_dirs, write_file

log = logging.getLogger("snapshotd.seqmarks")

BLOCK = 32


class SeqMarks:
    """The reserved marks of one home. Thread-safe; callers hold the attempt's worktree lock."""

    def __init__(self, home: Path, block: int = BLOCK) -> None:
        self.dir = home / "seqmarks"
        self.block = block
        self._lock = threading.Lock()
        self._floor: dict[str, int] = {}  # the mark found on disk at first use this run
        self._reserved: dict[str, int] = {}  # the durable mark now
        self._next: dict[str, int] = {}  # one past the last seq handed out this run
        self._keys: dict[str, AttemptKey] = {}

    def floor(self, key: AttemptKey) -> int:
        """The lowest seq ``key`` may hand out by the marks of earlier runs (0 when none, or
        when the mark was written in this boot)."""
        name = str(key)
        with self._lock:
            if name not in self._floor:
                mark, boot = self._read(key)
                self._reserved[name] = mark
                self._floor[name] = 0 if boot and boot == boot_id() else mark
            return self._floor[name]

    def reserve(self, key: AttemptKey, seq: int) -> None:
        """Make ``seq`` durable as handed out before it is used (raises ``OSError`` if the mark
        cannot be written: the capture then fails rather than risk a reuse)."""
        self.floor(key)
        name = str(key)
        with self._lock:
            if seq >= self._reserved[name]:
                mark = seq + self.block
                self._write(key, mark)
                self._reserved[name] = mark
            self._next[name] = max(self._next.get(name, 0), seq + 1)
            self._keys[name] = key

    def close(self) -> None:
        """A clean stop: every attempt's mark is exactly its next seq, so numbering goes on
        without a skip. A mark that cannot be written keeps its reserved (higher) value."""
        with self._lock:
            pending = [(self._keys[name], seq) for name, seq in self._next.items()
                       if seq < self._reserved.get(name, 0)]
        for key, seq in pending:
            try:
                self._write(key, seq)
            except OSError as exc:
                log.warning("could not write the exact seq mark of %s (%s); it keeps its "
                            "reservation, and its next seq skips ahead", key, exc)

    def _path(self, key: AttemptKey) -> Path:
        return self.dir / hashlib.sha256(str(key).encode()).hexdigest()[:40]

    def _read(self, key: AttemptKey) -> tuple[int, str]:
        path = self._path(key)
        try:
            text = path.read_text()
        except FileNotFoundError:
            return 0, ""
        except OSError as exc:
            raise OSError(f"cannot read the seq mark of {key} ({path}): {exc}") from exc
        lines = text.splitlines()
        if len(lines) not in (2, 3) or lines[0] != str(key) or not lines[1].isdigit():
            # write_file replaces atomically: a damaged mark is not a state we produce.
            raise OSError(f"the seq mark of {key} ({path}) is damaged: {text[:80]!r}")
        return int(lines[1]), lines[2] if len(lines) == 3 else ""

    def _write(self, key: AttemptKey, mark: int) -> None:
        make_dirs(self.dir)
        write_file(self._path(key), f"{key}\n{mark}\n{boot_id()}\n".encode())
