"""Hook payloads run in the daemon: the ``hook`` op of ``snapshot-hook-native`` and the HTTP hook.

Owns the ``hook`` op (docs/protocol.md, "hook"): the native hook sends the agent's payload, its
working directory and the variables ``snapshot-hook`` reads (``RELAYED_ENV``), and the daemon does
what ``snapshot-hook`` would have done, with the very functions it uses (``route``,
``snapshot_fields``, ``before_tool_fields``). Also owns ``HookRunner``, shared by both relayed
transports: run the op a payload asks for, record the gap ``snapshot-hook`` would have written.
Promises:
- A payload this op does not take (not a JSON object, no absolute working directory, a session
  lifecycle event) is answered ``{"fallback": true}`` before anything runs; the native hook then
  hands it to ``snapshot-hook``. Nothing is run twice. A malformed request is ``bad-request``.
- Otherwise ``{"fallback": false, "outcome": <"ok" or the failure's code>}`` once the capture is
  over; every outcome that is not a checkpoint is a gap, exactly once: the daemon's own for the
  failures it attributes, this module's for the rest (refusals, ``busy``, ``internal``).
- ``status`` counts relayed hooks under ``native_hook``: requests, fallbacks, gaps.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from snapshotd.core import ServiceError
from snapshotd_client import (
    BAD_REQUEST,
    INTERNAL,
    RELAYED_ENV,
    before_tool_fields,
    daemon_records_gap,
    parse_json,
    route,
    snapshot_fields,
)

if TYPE_CHECKING:
    from snapshotd.core import Config, Registry
    from snapshotd.service import Service

log = logging.getLogger("snapshotd.hook_relay")

OP = "hook"


def attach(service: Service, server: Registry, config: Config) -> None:
    """Serve the ``hook`` op."""
    relay = HookRelay(service, server)
    server.register(OP, relay.handle)
    server.status_extras.append(lambda: {"native_hook": relay.status()})


class HookRunner:
    """Runs one relayed hook's op and writes the gap the hook would have written."""

    def __init__(self, service: Service, server: Registry,
                 on_gap: Callable[[], None] | None = None) -> None:
        self.service = service
        self.server = server
        self.on_gap = on_gap

    def run(self, op: str, fields: dict, env: dict[str, str], *, gap: bool) -> str:
        """Run ``op`` with ``fields``; the outcome ``"ok"`` or the failure's code. With ``gap``,
        a failure the daemon records no gap for gets one here. Never raises."""
        handler = self.server.handler(op)
        if handler is None:  # before_tool without the bracket part: nothing to do
            return "ok"
        try:
            handler({k: v for k, v in fields.items() if v is not None})
        except ServiceError as exc:
            if gap and not daemon_records_gap(exc.code):
                self.gap(fields, env, exc.code, exc.message)
            return exc.code
        except Exception as exc:  # noqa: BLE001 - a failed capture is a gap, never a crash
            log.exception("relayed hook capture failed")
            if gap:
                self.gap(fields, env, INTERNAL, f"{type(exc).__name__}: {exc}")
            return INTERNAL
        return "ok"

    def run_routed(self, payload: dict, kind: str, env: dict[str, str]) -> str:
        """Run what ``hook.route`` said ``payload`` asks for: the bracketing ``before_tool``
        (no gap: the after-tool capture of the same call writes one if it cannot capture),
        else the after-tool ``snapshot``, with its gap when it fails."""
        if kind == "before_tool":
            return self.run("before_tool", before_tool_fields(payload, env), env, gap=False)
        return self.run("snapshot", snapshot_fields(payload, env), env, gap=True)

    def gap(self, fields: dict, env: dict[str, str], reason: str, detail: str) -> None:
        """The gap ``snapshot-hook`` would have written for this payload."""
        if self.on_gap is not None:
            self.on_gap()
        self.service.gaps.record(reason=reason, detail=detail, tier=1, source="hook",
                                 tool_use_id=fields.get("tool_use_id"),
                                 **_gap_attribution(fields, env))


class HookRelay:
    """The ``hook`` op: a native hook's payload, run as ``snapshot-hook`` would run it."""

    def __init__(self, service: Service, server: Registry) -> None:
        self.runner = HookRunner(service, server, on_gap=lambda: self._count("gaps"))
        self.counts = {"requests": 0, "fallbacks": 0, "gaps": 0}
        self._lock = threading.Lock()

    def handle(self, fields: dict) -> dict:
        payload_bytes, env, cwd = _request(fields)
        self._count("requests")
        try:
            payload = parse_json(payload_bytes)
        except Exception:  # noqa: BLE001 - ValueError, RecursionError: the hook says why
            payload = None
        kind = ""
        if isinstance(payload, dict):
            payload, kind = route(payload)
            if not absolute_path(payload.get("cwd")) and cwd is not None:
                payload["cwd"] = cwd  # where snapshot-hook would have fallen back to its own
        if kind not in ("before_tool", "snapshot") or not absolute_path(payload.get("cwd")):
            self._count("fallbacks")
            return {"fallback": True}
        return {"fallback": False, "outcome": self.runner.run_routed(payload, kind, env)}

    def status(self) -> dict:
        with self._lock:
            return dict(self.counts)

    def _count(self, name: str) -> None:
        with self._lock:
            self.counts[name] += 1


def _gap_attribution(fields: dict, env: dict[str, str]) -> dict[str, Any]:
    """The attempt a relayed hook's capture was meant for, as ``snapshot-hook`` names it in a
    gap: the zero-setup fallback's, else the explicit ids and the captured directory."""
    fallback = fields.get("fallback")
    if isinstance(fallback, dict):
        return {k: fallback.get(k) for k in ("run_id", "node_id", "iteration", "attempt",
                                               "worktree")}
    out: dict[str, Any] = {k: fields.get(k) for k in ("run_id", "node_id", "iteration",
                                                      "attempt")}
    out["worktree"] = fields.get("cwd") or env.get("CLAUDE_PROJECT_DIR")
    return out


def _request(fields: dict) -> tuple[bytes, dict[str, str], str | None]:
    """The payload, the relayed environment and the hook's cwd of a ``hook`` request; names
    and values arrive as bytes (the environment need not be UTF-8) and are decoded as
    ``os.environ`` decodes them."""
    payload = fields.get("payload")
    raw_env = fields.get("env", {})
    raw_cwd = fields.get("cwd")
    if not isinstance(payload, bytes):
        raise ServiceError(BAD_REQUEST, "hook needs the payload as bytes")
    if not isinstance(raw_env, dict) or not all(
            isinstance(k, str) and isinstance(v, bytes) for k, v in raw_env.items()):
        raise ServiceError(BAD_REQUEST, "hook's env maps names to bytes")
    if raw_cwd is not None and not isinstance(raw_cwd, bytes):
        raise ServiceError(BAD_REQUEST, "hook's cwd is bytes")
    env = {k: os.fsdecode(v) for k, v in raw_env.items() if k in RELAYED_ENV}
    cwd = os.fsdecode(raw_cwd) if raw_cwd else None
    return payload, env, cwd if absolute_path(cwd) else None


def absolute_path(path: object) -> bool:
    """Whether a payload's ``cwd`` (or the hook's) is a usable absolute path."""
    return isinstance(path, str) and os.path.isabs(path) and "\0" not in path
