"""The ``snapshot`` op's request: its wire fields, validated into a ``SnapshotRequest``.

Owns the checks a capture request passes before anything is attributed or captured (cwd, tier,
source, ids, label and tool call id, the zero-setup ``fallback``), and ``gap_fields``: which run,
node, attempt and worktree a gap about a request names when it is recorded.

Promises: ``SnapshotRequest.from_fields`` either returns a request whose every field can be used
verbatim (ref names, trailers, ledger rows) or raises ``ServiceError`` with ``bad-request`` or
``bad-id``; ``full`` is never set from the wire. A request's ``label``, ``tool_use_id``,
``tool_aliases`` and failed call's ``error`` never hold a token ``secrets.redact_secrets`` finds
(however the request was made), and a hook's label and an error are redacted whole before they
are cut (``HOOK_LABEL_MAX``, ``ERROR_MAX``): this is the one point where they enter the system,
so commit messages, ledger rows, listings, MCP replies and exports never show one.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from snapshotd.core import (
    BAD_REQUEST,
    ServiceError,
    cut_line,
    id_field,
    int_field,
    redact_secrets,
    redacted_line,
)
from snapshotd.ledger import Attempt

if TYPE_CHECKING:
    from snapshotd.service.change_source import OffLockScan

SOURCES = ("hook", "wrap", "watch", "restore", "cli", "outside", "guard")
MAX_TEXT_BYTES = 1000
# A hook's label kept (commit messages, ledger rows, listings): its first characters once the
# whole of what the hook sent is redacted. The hook sends the command whole (its first 800
# bytes, never a piece of a word): a cut before redaction splits a token no rule recognises.
HOOK_LABEL_MAX = 100
# The most other ids a tool call may name (``tool_aliases``): Qwen Code sends one.
MAX_TOOL_ALIASES = 4
# A failed tool call's error text kept (docs/protocol.md): redacted whole, then cut.
ERROR_MAX = 200


@dataclass
class SnapshotRequest:
    cwd: Path
    tier: int = 1
    source: str = "wrap"
    run_id: str | None = None
    node_id: str | None = None
    iteration: int = 0
    attempt: int | None = None
    label: str | None = None
    tool_use_id: str | None = None
    fallback: dict | None = None
    tool_aliases: list[str] | None = None  # the call's other ids (each looked up as its own)
    outcome: dict | None = None  # a failed tool call: {"failed", "exit_code"?, "error"?}
    full: bool = False  # internal: force a full stat scan (never set from the wire)
    # internal: a hook's label redacted but not cut, so the recorder can name its path
    # relative to the worktree before cutting (``label`` is the cut one everything else keeps)
    label_whole: str | None = None
    prescan: OffLockScan | None = None  # internal: a verification's off-lock scan

    def __post_init__(self) -> None:
        # A hook's label is the start of a shell command: ``export OPENAI_API_KEY=sk-…`` is as
        # common there as in a terminal.
        if self.label:
            self.label = redact_secrets(self.label)
        if self.tool_use_id:
            self.tool_use_id = redact_secrets(self.tool_use_id)
        if self.tool_aliases:
            self.tool_aliases = [redact_secrets(a) for a in self.tool_aliases]
        if self.outcome and self.outcome.get("error"):
            self.outcome = dict(self.outcome, error=redact_secrets(self.outcome["error"]))

    @classmethod
    def from_fields(cls, fields: dict) -> SnapshotRequest:
        """Validate a request's fields; raises ServiceError(bad-request | bad-id)."""
        cwd = fields.get("cwd")
        if not isinstance(cwd, str) or not cwd or "\0" in cwd:
            raise ServiceError(BAD_REQUEST, "cwd must be a non-empty path string")
        if not os.path.isabs(cwd):
            raise ServiceError(BAD_REQUEST, f"cwd must be an absolute path, got {cwd!r}")
        tier = int_field(fields, "tier", 1, 1)
        if tier not in (1, 2):
            raise ServiceError(BAD_REQUEST, f"tier must be 1 or 2, got {tier}")
        source = fields.get("source", "wrap")
        if source not in SOURCES:
            raise ServiceError(BAD_REQUEST,
                               f"source must be one of {', '.join(SOURCES)}")
        req = cls(cwd=Path(cwd), tier=tier, source=source)
        run_id, node_id = fields.get("run_id"), fields.get("node_id")
        if (run_id is None) != (node_id is None):
            raise ServiceError(BAD_REQUEST,
                               "run_id and node_id go together: name both or neither")
        if run_id is not None:
            req.run_id = id_field("run_id", run_id)
            req.node_id = id_field("node_id", node_id)
        req.iteration = int_field(fields, "iteration", 0, 0)
        if fields.get("attempt") is not None:
            req.attempt = int_field(fields, "attempt", 1, 1)
        if fields.get("label") is not None:
            label = _text_field("label", fields["label"])
            if source == "hook":  # redacted whole once; the cut label is a prefix of it
                req.label_whole = redacted_line(label, MAX_TEXT_BYTES)
                req.label = cut_line(req.label_whole, HOOK_LABEL_MAX)
            else:
                req.label = redact_secrets(label)
        if fields.get("tool_use_id") is not None:
            req.tool_use_id = redact_secrets(_text_field("tool_use_id", fields["tool_use_id"]))
        fallback = fields.get("fallback")
        if fallback is not None:
            req.fallback = _fallback(fallback)
        req.outcome = _outcome(fields)
        req.tool_aliases = _aliases(fields.get("tool_aliases"))
        return req


def gap_fields(req: SnapshotRequest, attempt: Attempt | None) -> dict:
    """What a gap about ``req`` names: the attempt it was attributed to, else what the request
    (or its zero-setup fallback) proposed."""
    key = attempt.key if attempt else None
    fb = req.fallback or {}
    return {
        "run_id": key.run_id if key else (req.run_id or fb.get("run_id")),
        "node_id": key.node_id if key else (req.node_id or fb.get("node_id")),
        "iteration": key.iteration if key else req.iteration,
        "attempt": key.attempt if key else (req.attempt or fb.get("attempt")),
        "worktree": attempt.worktree if attempt else str(fb.get("worktree") or req.cwd),
        "tier": req.tier, "source": req.source, "tool_use_id": req.tool_use_id,
    }


def tool_ids_of(req: SnapshotRequest) -> list[str]:
    """Every id of ``req``'s tool call, its own first (none without its own)."""
    return [req.tool_use_id, *(req.tool_aliases or ())] if req.tool_use_id else []


def _aliases(value: object) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or len(value) > MAX_TOOL_ALIASES:
        raise ServiceError(BAD_REQUEST,
                           f"tool_aliases must be a list of at most {MAX_TOOL_ALIASES} strings")
    return [redact_secrets(_text_field("tool_aliases", v)) for v in value] or None


def outcome_json(req: SnapshotRequest) -> str | None:
    """The ledger's ``outcome`` column for ``req``'s tool call (``None``: not said to fail)."""
    return json.dumps(req.outcome, sort_keys=True) if req.outcome else None


def _text_field(name: str, value: object) -> str:
    if not isinstance(value, str) or len(value.encode()) > MAX_TEXT_BYTES or "\0" in value:
        raise ServiceError(BAD_REQUEST,
                           f"{name} must be a string under {MAX_TEXT_BYTES} bytes")
    return value


def _outcome(fields: dict) -> dict | None:
    """``failed``, ``exit_code``, ``error`` checked: ``None`` for a call not said to fail."""
    failed = fields.get("failed")
    if failed is not None and not isinstance(failed, bool):
        raise ServiceError(BAD_REQUEST, "failed must be a boolean")
    if not failed:
        return None
    outcome: dict = {"failed": True}
    if fields.get("exit_code") is not None:
        outcome["exit_code"] = int_field(fields, "exit_code", 0, -(1 << 31))
    if fields.get("error") is not None:
        # The error is a command's output: a token in it is as likely as in a label.
        outcome["error"] = redacted_line(_text_field("error", fields["error"]), ERROR_MAX)
    return outcome


def _fallback(fallback: object) -> dict:
    if not isinstance(fallback, dict):
        raise ServiceError(BAD_REQUEST, "fallback must be a map")
    wt = fallback.get("worktree")
    if not isinstance(wt, str) or not os.path.isabs(wt) or "\0" in wt:
        raise ServiceError(BAD_REQUEST, "fallback.worktree must be an absolute path")
    return {
        "run_id": id_field("fallback.run_id", fallback.get("run_id")),
        "node_id": id_field("fallback.node_id", fallback.get("node_id")),
        "iteration": int_field(fallback, "iteration", 0, 0),
        "attempt": int_field(fallback, "attempt", 1, 1),
        "worktree": wt,
    }
