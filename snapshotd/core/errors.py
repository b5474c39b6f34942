"""The daemon's error type and the validation of request fields.

Owns ``ServiceError`` (an error carrying a protocol error code) and the one way a request's ids,
counters and paths are checked before use: the service, restore, replication, the engine, the MCP
server and the CLI all call these. The codes themselves are constants in
``snapshotd_client.protocol`` (the client exposes them; docs/protocol.md lists them; a test checks
the three agree), re-exported here so daemon code raises ``ServiceError(errors.NOT_FOUND, ...)``.

Promises: a value that passes ``id_field``/``int_field`` can be used verbatim in ref names,
trailers and ledger rows; every refusal is a ``ServiceError`` with ``bad-id`` or ``bad-request``.
"""

from __future__ import annotations

import os
from pathlib import Path

from snapshotd_client import (  # noqa: F401  (the vocabulary, re-exported)
    BAD_FRAME,
    BAD_ID,
    BAD_REQUEST,
    BUSY,
    CAPTURE_FAILED,
    CONFLICT,
    ERROR_CODES,
    FENCED,
    FETCH_FAILED,
    FORBIDDEN,
    FRAME_TOO_LARGE,
    INTERNAL,
    NO_REMOTE,
    NOT_FOUND,
    PUSH_FAILED,
    RESTORE_FAILED,
    SECRET_HELD,
    SHUTTING_DOWN,
    UNKNOWN_OP,
    UNSUPPORTED_VERSION,
    VERIFY_FAILED,
    WORKTREE_MISSING,
    WORKTREE_REFUSED,
    WORKTREE_REPLACED,
    validate_id,
    validate_int,
)


class ServiceError(Exception):
    """An error with a protocol error code (docs/protocol.md); ``code`` is in ``ERROR_CODES``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def id_field(name: str, value: object) -> str:
    """A run or node id from a request, or ``ServiceError(bad-id)``."""
    try:
        return validate_id(name, value)
    except ValueError as exc:
        raise ServiceError(BAD_ID, str(exc)) from None


def int_field(fields: dict, name: str, default: int, minimum: int) -> int:
    """``fields[name]`` as a bounded integer (``default`` when absent or nil)."""
    value = fields.get(name, default)
    if value is None:
        value = default
    return int_value(name, value, minimum)


def int_value(name: str, value: object, minimum: int) -> int:
    """``value`` as a bounded integer, or ``ServiceError(bad-request)``."""
    try:
        return validate_int(name, value, minimum)
    except ValueError as exc:
        raise ServiceError(BAD_REQUEST, str(exc)) from None


def opt_int_field(fields: dict, name: str, minimum: int) -> int | None:
    """``fields[name]`` as a bounded integer, or None when absent or nil."""
    value = fields.get(name)
    return None if value is None else int_value(name, value, minimum)


def opt_id_field(fields: dict, name: str) -> str | None:
    """``fields[name]`` as an id, or None when absent or nil."""
    value = fields.get(name)
    return None if value is None else id_field(name, value)


def abs_path_field(fields: dict, name: str) -> Path | None:
    """``fields[name]`` as an absolute path (no NUL), or None when absent."""
    value = fields.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or not os.path.isabs(value) or "\0" in value:
        raise ServiceError(BAD_REQUEST, f"{name} must be an absolute path")
    return Path(value)


def bool_field(fields: dict, name: str) -> bool:
    """``fields[name]`` as a bool (absent or nil is False)."""
    value = fields.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ServiceError(BAD_REQUEST, f"{name} must be a boolean")
    return value
