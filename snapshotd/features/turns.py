"""Recording a session's turns: the ``turn`` of a ``session`` op's ``working`` event.

Owns what a prompt leaves in the ledger (docs/review.md, "Turns"; docs/protocol.md, "Ops"): the
turn's number and time always; its first line redacted (``core.redacted_line``, the labels'
rules) and cut to ``FIRST_LINE_MAX`` characters, and its transcript file, size and the agent's
turn id, as ``record_prompts`` allows: ``"local"`` in a ledger on this host only (SQLite; a
shared PostgreSQL ledger gets number, time and session id), ``"remote"`` in any ledger, ``"off"``
nowhere. Promises: no prompt text is ever written to the store (commits, trailers, refs), so
nothing replicated carries it; a malformed ``turn`` is a bad request, not a partial row.
"""

from __future__ import annotations

import time

from snapshotd.core import BAD_REQUEST, ServiceError, redacted_line
from snapshotd.ledger import Attempt, Ledger

FIRST_LINE_MAX = 200
_TEXT_MAX = 1000
_TEXT_FIELDS = ("prompt", "session_id", "agent_turn_id", "transcript_path")


def turn_request(raw: object) -> dict | None:
    """The ``turn`` field of a ``session`` request, checked: a map of optional strings
    (``_TEXT_FIELDS``, each at most ``_TEXT_MAX`` bytes) and ``transcript_pos`` (an int >= 0)."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise ServiceError(BAD_REQUEST, "turn must be a map of the prompt's fields")
    out: dict = {}
    for name in _TEXT_FIELDS:
        value = raw.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or len(value.encode(errors="replace")) > _TEXT_MAX \
                or "\0" in value:
            raise ServiceError(BAD_REQUEST, f"turn.{name} must be text of at most {_TEXT_MAX} "
                                            "bytes")
        out[name] = value
    pos = raw.get("transcript_pos")
    if pos is not None:
        if isinstance(pos, bool) or not isinstance(pos, int) or not 0 <= pos < 1 << 62:
            raise ServiceError(BAD_REQUEST, "turn.transcript_pos must be a whole number >= 0")
        out["transcript_pos"] = pos
    return out


def record_turn(ledger: Ledger, mode: str, attempt: Attempt, turn: dict) -> int:
    """Record the attempt's next turn from a checked ``turn`` (``turn_request``) under the
    ``record_prompts`` ``mode``; its number."""
    keep_text = mode == "remote" or (mode == "local" and ledger.dialect == "sqlite")
    text: dict = {}
    if keep_text:
        prompt = turn.get("prompt")
        text = {"first_line": redacted_line(prompt, FIRST_LINE_MAX) if prompt else None,
                "transcript_path": turn.get("transcript_path"),
                "transcript_pos": turn.get("transcript_pos"),
                "agent_turn_id": turn.get("agent_turn_id")}
    return ledger.record_turn(attempt, time.time(), agent_session=turn.get("session_id"), **text)
