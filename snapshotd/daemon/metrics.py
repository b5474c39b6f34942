"""What ``status`` adds beyond the service's counters: sizes, process cost, policy, worktrees.

Owns the fields ``snapshotd status`` documents (docs/service.md) that are not the service's own:
``store_bytes``, ``stat_cache_bytes``, ``ledger_bytes``, ``gap_spool`` (path, bytes, every
record in the spool by reason, including the ones the hook wrote while the daemon was down),
``process`` (RSS, CPU, threads, fds; psutil), ``config`` (the effective policy and where each
value came from), ``log_level``, ``worktrees``: one row per active attempt with the age of its
last checkpoint, joined with the watcher's ``watched`` rows (state, degraded reason) when the
watcher reports them, and ``coverage``: each active attempt's figures and their total.

Promises: computing status never raises because of a vanished file or a busy process table
(the field is then ``None``); reading the gap spool is incremental, so a long spool costs once;
directory sizes are at most ``SIZE_TTL_S`` old.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import psutil

from snapshotd.core import Config, Registry, files_under
from snapshotd.service import GapFollower, Service, active_coverage

log = logging.getLogger("snapshotd.metrics")

# Directory sizes are recomputed at most this often.
SIZE_TTL_S = 5.0


def attach(service: Service, server: Registry, config: Config) -> None:
    metrics = Metrics(service, config)

    def status(fields: dict, base: Callable[[dict], dict]) -> dict:
        # A wrapper (the outermost layer) rather than a status_extras entry: the worktree rows
        # are joined with whatever the watcher's extra reported, so it runs after every extra.
        out = base(fields)
        out.update(metrics.fields())
        out["worktrees"] = join_watched(out["worktrees"], out.get("watched"))
        return out

    server.wrap("status", status, layer="metrics")


class Metrics:
    """The figures of ``status`` that cost a walk or a query, cached for ``SIZE_TTL_S``."""

    def __init__(self, service: Service, config: Config) -> None:
        self.service = service
        self.config = config
        self.process = psutil.Process()
        self._cpu_mark: tuple[float, float] | None = None
        self._spool = _SpoolCounter(Path(service.gaps.path))
        self._gaps = GapFollower(Path(service.gaps.path))
        self._lock = threading.Lock()
        self._sizes: dict[Path, tuple[float, int | None]] = {}

    def fields(self) -> dict:
        home = Path(self.service.home)
        store_path = Path(self.service.store.path)
        return {
            "store_bytes": self._tree_bytes(store_path),
            "stat_cache_bytes": self._tree_bytes(home / "worktrees"),
            "ledger_bytes": self._ledger_bytes(),
            "gap_spool": self._spool.summary(),
            "process": self._process(),
            "config": {**_plain(self.config.as_dict()),
                       "sources": dict(self.config.sources)},
            "log_level": logging.getLevelName(
                logging.getLogger("snapshotd").getEffectiveLevel()).lower(),
            "worktrees": self._worktrees(),
            "coverage": self._coverage(),
        }

    def _coverage(self) -> dict:
        """Each active attempt's coverage figures and their total (issue 43)."""
        attempts = self.service.ledger.active_attempts()
        gaps = self._gaps.gaps({a.key.run_id for a in attempts})
        return active_coverage(self.service.ledger, attempts, gaps)

    def _ledger_bytes(self) -> int | None:
        # A PostgreSQL size is a query: reused for SIZE_TTL_S like the tree walks.
        key = Path("<ledger>")
        now = time.monotonic()
        cached = self._sizes.get(key)
        if cached is not None and now - cached[0] < SIZE_TTL_S:
            return cached[1]
        size = self.service.ledger.size_bytes()
        self._sizes[key] = (now, size)
        return size

    def _tree_bytes(self, path: Path) -> int | None:
        # A walk of a store with many loose objects costs tens of ms; `watch snapshotd status`
        # must not turn that into a steady load, so a size is reused for SIZE_TTL_S.
        now = time.monotonic()
        with self._lock:
            cached = self._sizes.get(path)
            if cached is not None and now - cached[0] < SIZE_TTL_S:
                return cached[1]
        size = tree_bytes(path)
        with self._lock:
            self._sizes[path] = (now, size)
        return size

    def _process(self) -> dict:
        try:
            with self.process.oneshot():
                times = self.process.cpu_times()
                rss = self.process.memory_info().rss
                threads = self.process.num_threads()
                fds = self.process.num_fds() if hasattr(self.process, "num_fds") else None
                started = self.process.create_time()
        except (psutil.Error, OSError) as exc:
            return {"error": f"{type(exc).__name__}: {exc}"}
        cpu = times.user + times.system
        now = time.time()
        with self._lock:
            # "Recent" CPU is measured since the previous status call, the way `top` does; the
            # first call has no mark and reports the average over the process's life.
            mark_wall, mark_cpu = self._cpu_mark or (started, 0.0)
            self._cpu_mark = (now, cpu)
        lifetime = max(now - started, 1e-6)
        window = max(now - mark_wall, 1e-6)
        return {
            "rss_bytes": rss,
            "cpu_user_s": round(times.user, 3),
            "cpu_system_s": round(times.system, 3),
            "cpu_percent": round(100.0 * (cpu - mark_cpu) / window, 2),
            "cpu_percent_avg": round(100.0 * cpu / lifetime, 2),
            "threads": threads,
            "open_fds": fds,
        }

    def _worktrees(self) -> list[dict]:
        now = time.time()
        rows = []
        for attempt in self.service.ledger.active_attempts():
            last = self.service.ledger.last_checkpoint(attempt.pk)
            key = attempt.key
            rows.append({
                "path": attempt.worktree,
                "attempt": str(key),
                "run_id": key.run_id, "node_id": key.node_id,
                "iteration": key.iteration, "attempt_number": key.attempt,
                "state": attempt.state,
                "zero_setup": attempt.zero_setup,
                "started_at": attempt.started_at,
                "last_seq": last["seq"] if last else None,
                "last_checkpoint_at": last["created_at"] if last else None,
                "last_checkpoint_age_s": round(now - last["created_at"], 3) if last else None,
                "watch": None,
                "degraded_reason": None,
            })
        return rows


def join_watched(rows: list[dict], watched: object) -> list[dict]:
    """Attach each watcher row to the attempt row of the same worktree (by path)."""
    if not isinstance(watched, list):
        return rows
    by_path = {row["path"]: row for row in rows}
    for entry in watched:
        if not isinstance(entry, dict):
            continue
        path = entry.get("path") or entry.get("worktree") or entry.get("root")
        row = by_path.get(path) if isinstance(path, str) else None
        if row is None:
            row = {"path": path, "attempt": None, "state": None, "last_seq": None,
                   "last_checkpoint_at": None, "last_checkpoint_age_s": None}
            rows.append(row)
            if isinstance(path, str):
                by_path[path] = row
        row["watch"] = entry
        row["degraded_reason"] = degraded_reason(entry)
    return rows


def degraded_reason(entry: dict) -> str | None:
    """The watcher's reason a worktree is degraded, whichever key it uses for it."""
    for key in ("degraded_reason", "reason"):
        value = entry.get(key)
        if isinstance(value, str) and value:
            return value
    degraded = entry.get("degraded")
    if isinstance(degraded, str) and degraded:
        return degraded
    if isinstance(degraded, dict):
        inner = degraded.get("reason")
        return str(inner) if inner else "degraded"
    if degraded is True:
        return "degraded"
    return None


def tree_bytes(path: Path) -> int | None:
    """Apparent size of every file under ``path`` (``du --apparent-size``); None if absent."""
    if not path.exists():
        return None
    total = 0
    for entry in files_under(path):
        try:
            total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue  # removed meanwhile (gc, ref packing)
    return total


class _SpoolCounter:
    """Gap records in the spool by reason, read incrementally from the last offset."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._identity: tuple[int, int] | None = None
        self._counts: Counter[str] = Counter()
        self._records = 0
        self._lock = threading.Lock()

    def summary(self) -> dict:
        with self._lock:
            size = self._advance()
            return {"path": str(self.path), "bytes": size, "records": self._records,
                    "by_reason": dict(sorted(self._counts.items()))}

    def _advance(self) -> int | None:
        try:
            st = os.stat(self.path)
        except OSError:
            self._reset(None)
            return None
        identity = (st.st_dev, st.st_ino)
        if identity != self._identity or st.st_size < self._offset:
            self._reset(identity)  # replaced or truncated: count again from the start
        if st.st_size > self._offset:
            try:
                with open(self.path, "rb") as f:
                    f.seek(self._offset)
                    data = f.read(st.st_size - self._offset)
            except OSError:
                return st.st_size
            # Only whole lines: a writer may be half-way through its append.
            end = data.rfind(b"\n") + 1
            for line in data[:end].splitlines():
                if not line.strip():
                    continue
                try:
                    reason = json.loads(line).get("reason") or "unknown"
                except (ValueError, AttributeError):
                    reason = "unreadable-record"
                self._counts[str(reason)] += 1
                self._records += 1
            self._offset += end
        return st.st_size

    def _reset(self, identity: tuple[int, int] | None) -> None:
        self._identity = identity
        self._offset = 0
        self._counts.clear()
        self._records = 0


def _plain(value: dict) -> dict:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in value.items()}
