"""Assembling and running the daemon: home, lock, logging, service, server, watcher.

Owns the order of start-up (lock the home, open store and ledger, reconcile, bind or adopt the
socket, then serve) and of shutdown (stop accepting, finish in-flight work, capture pending
tier-2 windows, persist stat caches, release the lock).

Promises: one daemon per home; a second one exits non-zero naming the pid that holds it. The
whole stop, from the signal to the process's exit, takes at most ``STOP_LIMIT_S``: past the
deadlines of its parts (``snapshotd.daemon.server``) only closing the store and ledger and the
interpreter's exit remain, and either could wait on a thread a stuck request holds; past the
limit every thread's stack is written to the log (stderr, by ``faulthandler``, below a line
``Timeout (0:00:47)!``) and the process exits 1, which lets go of the home for the next daemon.
libgit2's cache of parsed objects is capped at ``OBJECT_CACHE_BYTES`` for the process, and its
pack mappings at ``PACK_MAPPED_BYTES`` (see docs/performance.md, "Scale").
"""

from __future__ import annotations

import faulthandler
import gc
import importlib
import logging
import os
import socket
import sys
from pathlib import Path

import pygit2

from snapshotd.core import (
    Config,
    HomeLock,
    RedactingFilter,
    injected_delay,
    secure_home,
    stop_limit_s,
)
from snapshotd.daemon.listener import bind_socket
from snapshotd.daemon.server import STOP_CUT_S, STOP_GRACE_S, STOP_HOOKS_S, Server
from snapshotd.service import Service

log = logging.getLogger("snapshotd")

# The parts that extend the core, attached at start-up when installed.
OPTIONAL_PARTS = ("snapshotd.watch.watcher", "snapshotd.features.restore.restore", "snapshotd.features.engine",
                  "snapshotd.features.restore.revert",
                  "snapshotd.daemon.sdnotify", "snapshotd.daemon.metrics", "snapshotd.features.gc",
                  "snapshotd.features.replication.replication", "snapshotd.features.review.diff",
                  "snapshotd.features.review.blame", "snapshotd.features.review.export",
                  "snapshotd.features.review.bracket", "snapshotd.features.guard.guard",
                  "snapshotd.features.sessions", "snapshotd.features.purge",
                  "snapshotd.daemon.http_hook", "snapshotd.daemon.hook_relay", "snapshotd.daemon.fifo_guard")

# libgit2 keeps every tree and commit it parses, up to 256 MiB per process by default: a full
# walk of a million-file tree leaves over 100 MiB of trees behind that no capture reads again
# (the fast path reads raw tree bytes, a full scan reads the worktree). Re-reading an evicted
# tree costs an inflate; this bounds what the daemon holds for it.
OBJECT_CACHE_BYTES = 16 << 20
# libgit2 maps pack files in windows of 1 GiB, up to 8 GiB mapped, and unmaps none below that:
# every page a first capture of a large tree touched (the user's pack and the store's copy)
# stays in the daemon's resident set. Smaller windows under a cap are unmapped, least
# recently used first, once the cap is reached; the pages stay in the kernel's cache.
PACK_WINDOW_BYTES = 16 << 20
PACK_MAPPED_BYTES = 48 << 20
# The longest a stop may take (s): its parts' deadlines, then time to close and exit.
STOP_LIMIT_S = STOP_GRACE_S + STOP_CUT_S + STOP_HOOKS_S + 15.0


def prepare_home(home: Path) -> Path:
    home = home.expanduser()
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(home, 0o700)
    return home.resolve()


def setup_logging(level: str) -> None:
    under_systemd = bool(os.environ.get("JOURNAL_STREAM") or os.environ.get("INVOCATION_ID"))
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JournalFormatter() if under_systemd else logging.Formatter(
        "%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # On the handler, not a logger: every record of every snapshotd logger passes through it.
    handler.addFilter(RedactingFilter())
    root = logging.getLogger("snapshotd")
    root.handlers[:] = [handler]
    root.setLevel(getattr(logging, level.upper(), logging.INFO))
    root.propagate = False


def run_daemon(home: Path, socket_path: Path, config: Config,
               listener: socket.socket | None = None) -> int:
    """Serve until stopped; returns the process exit status."""
    home = prepare_home(home)
    cap_object_cache(OBJECT_CACHE_BYTES)
    lock = HomeLock(home)
    lock.acquire()
    secure_home(home)
    try:
        service = Service(home, config)
        if listener is None:
            listener = bind_socket(socket_path)
            owned_path: Path | None = socket_path
        else:
            owned_path = None
        server = Server(service, listener, idle_timeout_s=config.idle_timeout_s,
                        max_connections=config.max_connections)
        attach_optional_parts(service, server, config)
        server.on_stopping.append(_arm_stop_limit)
        # What start-up made lives as long as the daemon: frozen, no later full collection
        # walks it again. `serve` turned collection off while it was made.
        gc.freeze()
        gc.enable()
        try:
            server.run()
        finally:
            injected_delay("close")
            service.close()
            if owned_path is not None:
                try:
                    owned_path.unlink()
                except OSError:
                    pass
    finally:
        lock.release()
    if server.abandoned:
        # A thread stuck in a system call would keep the interpreter from exiting (it joins
        # every worker thread at exit): leave without it, the stop is otherwise complete.
        log.error("stopped; abandoned at exit: %s", "; ".join(server.abandoned))
        logging.shutdown()
        os._exit(0)
    log.info("stopped")
    return 0


def cap_object_cache(limit: int) -> None:
    """Cap libgit2's parsed-object cache (process-wide) at ``limit`` bytes, logged as libgit2
    reads it back, and its pack mappings (``PACK_WINDOW_BYTES``, ``PACK_MAPPED_BYTES``)."""
    pygit2.settings.mwindow_size = PACK_WINDOW_BYTES
    pygit2.settings.mwindow_mapped_limit = PACK_MAPPED_BYTES
    pygit2.settings.cache_max_size(limit)
    used, cap = pygit2.settings.cached_memory
    log.info("libgit2 object cache capped at %d bytes (%d in use); pack maps at %d bytes in "
             "windows of %d", cap, used, pygit2.settings.mwindow_mapped_limit,
             pygit2.settings.mwindow_size)


def attach_optional_parts(service: Service, server: Server, config: Config,
                          parts: tuple[str, ...] = OPTIONAL_PARTS) -> dict[str, list[str]]:
    """Wire the parts that extend the core when present; each defines ``attach(service, server,
    config)``. Their order here is free: ops they extend compose by the server's ``LAYERS``. A
    part that is not installed is logged at warning and listed in ``status`` (``parts``), since
    what it provides (tier 2, restore, liveness, …) is then missing."""
    attached: list[str] = []
    missing: list[str] = []
    for name in parts:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            log.warning("%s is not installed: the daemon runs without it", name)
            missing.append(name)
            continue
        attach = getattr(module, "attach", None)
        if attach is not None:
            attach(service, server, config)
            attached.append(name)
    summary = {"attached": attached, "missing": missing}
    server.status_extras.append(lambda: {"parts": summary})
    return summary


class _JournalFormatter(logging.Formatter):
    _PRIORITY = {logging.ERROR: 3, logging.CRITICAL: 2, logging.WARNING: 4, logging.INFO: 6,
                 logging.DEBUG: 7}

    def format(self, record: logging.LogRecord) -> str:
        return f"<{self._PRIORITY.get(record.levelno, 6)}>{record.name}: {record.getMessage()}"


def _arm_stop_limit() -> None:
    """From the stop's start: past ``STOP_LIMIT_S``, dump every thread's stack and exit 1
    (a C watchdog thread: it fires even while a stuck thread holds the interpreter lock)."""
    limit = stop_limit_s() or STOP_LIMIT_S
    log.info("stopping within %gs", limit)
    faulthandler.dump_traceback_later(limit, exit=True, file=sys.stderr)
