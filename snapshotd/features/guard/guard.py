"""The guard checkpoint: before a destructive shell command runs, the worktree and its ignored files.

Owns the ``guard`` layer of the ``before_tool`` op (``attach``). When ``guard`` is on and the
request's ``command`` is destructive (``commands.destructive``), it takes, synchronously and
before the op records the call in flight: an ordinary checkpoint (source ``guard``, labelled with
the tool call id, the forms and the command, redacted), then the files under the worktree that
checkpoint left out (``ignored.collect``, within the ``guard_max_*`` budget) kept on the local
chain ``store.kept_ref`` that replication never pushes. The reply gains ``"guard"``.

Promises: a non-destructive command costs one lexing; a guard that fails is counted, logged and
said in the reply (the checkpoint's own failures are gaps, as any capture's), never raised: the
op's in-flight record still happens. ``status`` → ``guard`` counts what it did (docs/guard.md).
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from snapshotd.core import BAD_REQUEST, AttemptKey, ServiceError, redacted_line
from snapshotd.features.guard.commands import MAX_COMMAND_CHARS, Match, destructive
from snapshotd.features.guard.ignored import SKIP_DIRS, Budget, collect
from snapshotd.store import keep_ignored

if TYPE_CHECKING:
    from snapshotd.core import Config, Handler, Registry
    from snapshotd.service import Service

log = logging.getLogger("snapshotd.guard")

SOURCE = "guard"
LABEL_MAX = 300
# The agents whose shipped hook settings send a before-tool event (``PreToolUse``, Gemini's
# ``BeforeTool``): hooks/hooks.json and contrib/{codex,qwen,gemini}. The others' settings wire
# only the after-tool event, so their commands are not guarded (docs/guard.md).
GUARDED_AGENTS = ("claude", "codex", "qwen", "gemini")


class Guard:
    """The daemon's guard: its settings and counters."""

    def __init__(self, service: Service, config: Config) -> None:
        self.service = service
        self.config = config
        self.budget = Budget(
            file_bytes=config.guard_max_file_bytes, total_bytes=config.guard_max_total_bytes,
            files=config.guard_max_files,
            skip_dirs=frozenset(SKIP_DIRS) - frozenset(config.guard_keep_dirs))
        self._lock = threading.Lock()
        self.counts = {"commands": 0, "destructive": 0, "checkpoints": 0, "ignored_kept": 0,
                       "ignored_skipped": 0, "failed": 0}

    def wrap(self, fields: dict, inner: Handler) -> dict:
        """``before_tool``: the guard first when the command is destructive, then the op."""
        command = fields.get("command")
        if command is not None and (not isinstance(command, str) or "\0" in command
                                    or len(command) > MAX_COMMAND_CHARS):
            raise ServiceError(BAD_REQUEST, f"command must be a string of at most "
                               f"{MAX_COMMAND_CHARS} characters without NUL")
        guarded = None
        if self.config.guard and command:
            self._count("commands")
            cwd = fields.get("cwd")
            matches = destructive(command, cwd if isinstance(cwd, str) else None)
            if matches:
                self._count("destructive")
                guarded = self.checkpoint(fields, command, matches)
        result = inner(fields)
        if guarded is not None:
            result["guard"] = guarded
        return result

    def checkpoint(self, fields: dict, command: str, matches: list[Match]) -> dict:
        """The guard checkpoint and its kept ignored files; what was done, or the failure."""
        started = time.perf_counter()
        forms = sorted({m.form for m in matches})
        call = fields.get("tool_use_id") or "-"
        label = redacted_line(f"guard {call}: {', '.join(forms)}: {command}", LABEL_MAX)
        request = dict(fields, source=SOURCE, tier=1, tool_use_id=None, tool_aliases=None,
                       label=label, failed=None)
        out: dict = {"forms": forms, "reasons": [m.reason for m in matches][:20]}
        try:
            reply = self.service.snapshot(request)
        except ServiceError as exc:
            self._count("failed")
            log.warning("guard checkpoint before %r failed: %s", label, exc.message)
            return dict(out, error=exc.code, message=exc.message)
        self._count("checkpoints")
        out.update(seq=reply["seq"], commit=reply["commit"], deduped=reply["deduped"],
                   checkpoint_ms=reply["elapsed_ms"])
        try:
            out["ignored"] = self.keep(reply, label)
        except Exception as exc:  # noqa: BLE001 - said in the reply, counted, logged
            self._count("failed")
            log.warning("guard: the ignored files before %r were not kept: %s: %s", label,
                        type(exc).__name__, exc)
            out["ignored"] = {"error": f"{type(exc).__name__}: {exc}"}
        out["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
        return out

    def keep(self, reply: dict, label: str) -> dict:
        """The worktree's files the checkpoint left out, kept on the attempt's local chain."""
        store = self.service.store
        key = AttemptKey(reply["run_id"], reply["node_id"], reply["iteration"], reply["attempt"])
        with store.gate.shared():
            t0 = time.perf_counter()
            found = collect(Path(reply["worktree"]), store.thread_reader(), reply["tree"],
                            self.budget)
            t1 = time.perf_counter()
            lines = [f"{s['path']}: {s['reason']}" for s in found.skipped]
            if found.unlisted:
                lines.append(f"... and {found.unlisted} more")
            message = f"{label}\n\nkept {len(found.files)} files, {found.bytes} bytes\n" + (
                "skipped:\n" + "\n".join(lines) if lines else "skipped: none")
            commit = keep_ignored(store, key, reply["seq"], reply["commit"], found.files,
                                  message)
        self._count("ignored_kept", len(found.files))
        self._count("ignored_skipped", len(found.skipped) + found.unlisted)
        return {"commit": commit, "files": len(found.files), "bytes": found.bytes,
                "skipped": found.skipped, "skipped_unlisted": found.unlisted,
                "walk_ms": round((t1 - t0) * 1000, 3),
                "keep_ms": round((time.perf_counter() - t1) * 1000, 3)}

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self.counts[name] += n

    def status(self) -> dict:
        with self._lock:
            return {"guard": dict(self.counts, enabled=self.config.guard,
                                  agents=list(GUARDED_AGENTS) if self.config.guard else [])}


def attach(service: Service, server: Registry, config: Config) -> None:
    """Wrap ``before_tool`` with the guard and add its ``status`` section."""
    guard = Guard(service, config)
    server.wrap("before_tool", guard.wrap, layer="guard")
    server.status_extras.append(guard.status)
