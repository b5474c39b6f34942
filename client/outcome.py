"""How a tool call ended, and every id it goes by, read from a payload in the hook's shape.

Owns ``outcome_fields`` (``failed``, ``exit_code``, ``error`` of the ``snapshot`` request:
docs/protocol.md) and ``tool_aliases`` (the payload's other tool call ids). A call failed when
its event is ``PostToolUseFailure`` (Claude Code, Qwen Code, Copilot, Goose, Amp once
normalized) or its ``tool_response`` says so (``is_error``, an ``error``, ``success: false``:
Gemini CLI, Kiro). The exit code is the payload's own where it has one, else the one its error
text names (``Exit code 3``, ``Exit Code: 3``). The error text is sent bounded, never cut inside
a word: the daemon redacts it whole before it cuts it (docs/secrets.md). Never raises on odd input;
imports nothing (no ``re``: this runs after every tool call).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

FAILURE_EVENT = "PostToolUseFailure"
# The fields besides ``tool_use_id`` that name the same tool call (Qwen Code: the model's).
ALIAS_FIELDS = ("tool_call_id",)


def outcome_fields(payload: Mapping[str, Any]) -> dict[str, Any]:
    """``{"failed": True, "exit_code"?, "error"?}`` for a failed call, ``{}`` for any other."""
    response = payload.get("tool_response")
    response = response if isinstance(response, dict) else {}
    error = _error_text(payload.get("error")) or _error_text(response.get("error"))
    failed = (payload.get("hook_event_name") == FAILURE_EVENT or response.get("is_error") is True
              or payload.get("is_error") is True or response.get("success") is False or
              bool(_error_text(response.get("error"))))
    if not failed:
        return {}
    fields: dict[str, Any] = {"failed": True}
    code = _exit_code(payload, response, error)
    if code is not None:
        fields["exit_code"] = code
    if error:
        fields["error"] = error  # the hook bounds it (``hook.word_cut``), never inside a word
    return fields


def tool_aliases(payload: Mapping[str, Any], primary: str | None) -> list[str]:
    """The payload's other ids of the tool call (not ``primary``), each once, in order."""
    found: list[str] = []
    for key in ALIAS_FIELDS:
        value = payload.get(key)
        if isinstance(value, str) and value and value != primary and value not in found:
            found.append(value)
    return found


def _error_text(value: Any) -> str:
    if isinstance(value, dict):  # {"message": ...} (Gemini CLI's error object)
        value = value.get("message")
    return value.strip() if isinstance(value, str) else ""


def _exit_code(payload: Mapping[str, Any], response: Mapping[str, Any], error: str) -> int | None:
    for value in (payload.get("exit_code"), response.get("exit_code"), response.get("exitCode"),
                  _kiro_status(response)):
        code = _as_int(value)
        if code is not None:
            return code
    lowered = error.lower()
    at = lowered.find("exit code")
    if at < 0:
        return None
    rest = lowered[at + len("exit code"):].lstrip(": ")
    digits = rest[:len(rest) - len(rest.lstrip("-0123456789"))]
    return _as_int(digits)


def _kiro_status(response: Mapping[str, Any]) -> Any:
    result = response.get("result")
    if isinstance(result, list) and result and isinstance(result[0], dict):
        return result[0].get("exit_status")
    return None


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if -(1 << 31) <= value < 1 << 31 else None
    if isinstance(value, str) and value.strip().lstrip("-").isdigit() and len(value) < 12:
        return int(value.strip())
    return None
