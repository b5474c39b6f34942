"""Connection threads that stay for the next connection.

Owns ``Workers``, the pool both transports serve connections on (the control socket,
``snapshotd.daemon.server``; the HTTP hook, ``snapshotd.daemon.http_hook``): a connection is handed to an idle
thread, or to a new one when none is idle, so it is never queued behind a busy connection.

Promises:
- A submitted job starts at once, on an idle worker or a new thread (``started`` counts those).
- At most ``keep`` idle workers wait; a thread beyond that ends after its job. A thread per
  connection would cost a thread start per tool call and, on the capture path, a new store
  handle read cold (each thread opens its own).
- A job's exception is logged with the pool's name, never raised: the worker goes on.
- Every worker is a daemon thread: one stuck in a system call never keeps the process alive.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger("snapshotd.workers")


class Workers:
    """Threads that serve connections and stay for the next one."""

    def __init__(self, keep: int, name: str) -> None:
        self.keep = keep
        self.name = name
        self.started = 0
        self._lock = threading.Lock()
        self._idle = 0
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()

    def submit(self, job: Callable[[], None]) -> None:
        with self._lock:
            if self._idle:
                self._idle -= 1
                self._jobs.put(job)
                return
        threading.Thread(target=self._work, args=(job,), name=self.name, daemon=True).start()
        with self._lock:
            self.started += 1  # once it did start: a start that fails raises to the caller

    def stop(self) -> None:
        """Let the idle workers end (busy ones end after their connection)."""
        with self._lock:
            self.keep = 0
            for _ in range(self._idle):
                self._jobs.put(None)
            self._idle = 0

    def idle(self) -> int:
        with self._lock:
            return self._idle

    def _work(self, job: Callable[[], None] | None) -> None:
        while job is not None:
            try:
                job()
            except Exception:  # noqa: BLE001 - logged; the worker serves the next connection
                log.exception("%s: a connection failed", self.name)
            with self._lock:
                if self._idle >= self.keep:
                    return
                self._idle += 1
            job = self._jobs.get()
