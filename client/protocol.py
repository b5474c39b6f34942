"""The snapshotd wire format (docs/protocol.md, v1): one definition, shared by daemon and client.

Owns the frame layout (4-byte big-endian body length + one msgpack map), the frame size limit,
the error-code vocabulary and the validation of the ids and counters that end up in ref names,
trailers and ledger rows.

Promises:
- ``encode_frame`` never produces a frame the peer must refuse (it raises ``ValueError`` first).
- ``read_frame`` returns exactly one decoded map, ``None`` on a clean end of stream, and raises
  ``ProtocolError`` (with ``.code``) for anything else; it never reads past the frame it returns.
- ``validate_id`` / ``validate_int`` accept a value only if the daemon can use it verbatim.

Imports only the stdlib and msgpack: the hook loads this module after every tool call.
"""

from __future__ import annotations

import time

import msgpack

# Annotations are never evaluated (PEP 563); `typing` costs milliseconds on the hook's path.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROTOCOL_VERSION = 1
MAX_FRAME = 1 << 20  # bytes of msgpack body, header excluded
HEADER_SIZE = 4

# Error codes a daemon reply may carry (docs/protocol.md, "Error codes").
BAD_FRAME = "bad-frame"
FRAME_TOO_LARGE = "frame-too-large"
BAD_REQUEST = "bad-request"
BAD_ID = "bad-id"
UNKNOWN_OP = "unknown-op"
UNSUPPORTED_VERSION = "unsupported-version"
FORBIDDEN = "forbidden"
FENCED = "fenced"
WORKTREE_REFUSED = "worktree-refused"
WORKTREE_MISSING = "worktree-missing"
NOT_FOUND = "not-found"
CONFLICT = "conflict"
CAPTURE_FAILED = "capture-failed"
RESTORE_FAILED = "restore-failed"
INTERNAL = "internal"

ERROR_CODES = frozenset({
    BAD_FRAME, FRAME_TOO_LARGE, BAD_REQUEST, BAD_ID, UNKNOWN_OP, UNSUPPORTED_VERSION, FORBIDDEN,
    FENCED, WORKTREE_REFUSED, WORKTREE_MISSING, NOT_FOUND, CONFLICT, CAPTURE_FAILED,
    RESTORE_FAILED, INTERNAL,
})

# Codes the client side produces itself; they are also gap reasons written by the hook/wrap.
DAEMON_UNAVAILABLE = "daemon-unavailable"
TIMEOUT = "timeout"
PROTOCOL_ERROR = "protocol-error"
BAD_PAYLOAD = "bad-payload"

# Refusals that happen before the daemon knows which attempt a request belongs to: the daemon
# cannot have written an attributed gap for them, so the caller (hook, wrap) writes one. For every
# other ok:false reply the daemon has already recorded its own gap and the caller must not add a
# second.
UNATTRIBUTED_CODES = frozenset({
    BAD_FRAME, FRAME_TOO_LARGE, BAD_REQUEST, BAD_ID, UNKNOWN_OP, UNSUPPORTED_VERSION, FORBIDDEN,
})

MAX_ID_BYTES = 200
# Ledger rows are SQLite INTEGERs: anything wider cannot be stored.
MAX_INT = (1 << 63) - 1


class ProtocolError(Exception):
    """A frame that breaks the wire format; ``code`` is the error code to reply with."""

    def __init__(self, message: str, code: str = BAD_FRAME) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def encode_frame(obj: dict) -> bytes:
    """Pack ``obj`` as one frame; ``ValueError`` if its body would exceed ``MAX_FRAME``."""
    if not isinstance(obj, dict):
        raise TypeError(f"a frame carries a map, not {type(obj).__name__}")
    body = msgpack.packb(obj, use_bin_type=True)
    if len(body) > MAX_FRAME:
        raise ValueError(f"frame body of {len(body)} bytes exceeds the {MAX_FRAME}-byte limit")
    return len(body).to_bytes(HEADER_SIZE, "big") + body


def decode_body(data: bytes) -> dict:
    """Unpack one frame body; ``ProtocolError`` unless it is exactly one msgpack map."""
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=False)
    except Exception as exc:  # msgpack raises a zoo of types (ExtraData, FormatError, ValueError…)
        raise ProtocolError(f"frame body is not valid msgpack: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"frame body is a {type(obj).__name__}, not a map")
    return obj


def read_frame(sock: Any, deadline: float | None = None) -> dict | None:
    """Read one frame from a blocking socket.

    Returns ``None`` on a clean end of stream before the first byte. ``deadline`` (a
    ``time.monotonic()`` value) bounds the whole frame, not each ``recv``; past it, raises
    ``TimeoutError``, as a socket timeout does.
    """
    header = _recv_exact(sock, HEADER_SIZE, deadline, eof_ok=True)
    if header is None:
        return None
    length = int.from_bytes(header, "big")
    if length > MAX_FRAME:
        # Not reading the body: the stream cannot be resynchronised, the peer must close.
        raise ProtocolError(
            f"frame announces {length} bytes, over the {MAX_FRAME}-byte limit", FRAME_TOO_LARGE)
    body = _recv_exact(sock, length, deadline, eof_ok=False)
    assert body is not None  # eof_ok=False never returns None
    return decode_body(body)


def validate_id(kind: str, value: object) -> str:
    """Return ``value`` if it is usable as a run/node id (a ref-name component), else ValueError."""
    if not isinstance(value, str):
        raise ValueError(f"{kind} must be a string, not {type(value).__name__}")
    if not value:
        raise ValueError(f"{kind} must not be empty")
    shown = _shown(value)
    if value == ".":
        raise ValueError(f"{kind} {shown} is invalid: it must not be '.'")
    for bad in ("/", "\\"):
        if bad in value:
            raise ValueError(f"{kind} {shown} is invalid: it must not contain {bad!r}")
    if ".." in value:
        raise ValueError(f"{kind} {shown} is invalid: it must not contain '..'")
    for ch in value:
        if ord(ch) < 0x20 or ord(ch) == 0x7F:
            raise ValueError(
                f"{kind} {shown} is invalid: it must not contain control characters "
                f"(found U+{ord(ch):04X})")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:  # lone surrogates: no ref name or trailer can hold them
        raise ValueError(f"{kind} {shown} is invalid: it is not valid Unicode text") from None
    if size > MAX_ID_BYTES:
        raise ValueError(
            f"{kind} is invalid: it is {size} bytes of UTF-8, over the {MAX_ID_BYTES}-byte limit")
    return value


def validate_int(kind: str, value: object, minimum: int) -> int:
    """Return ``value`` if it is an int (not a bool) in ``[minimum, 2**63-1]``, else ValueError.

    Use ``minimum=0`` for an iteration and ``minimum=1`` for an attempt.
    """
    # bool is a subclass of int; True as an attempt number is a caller bug, not attempt 1.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{kind} must be an integer, not {type(value).__name__}")
    if value < minimum:
        raise ValueError(f"{kind} must be >= {minimum}, got {value}")
    if value > MAX_INT:
        raise ValueError(f"{kind} must be <= {MAX_INT}, got {value}")
    return value


def _recv_exact(sock: Any, n: int, deadline: float | None, *, eof_ok: bool) -> bytes | None:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("timed out reading a frame")
            sock.settimeout(remaining)
        k = sock.recv_into(view[got:])
        if k == 0:
            if got == 0 and eof_ok:
                return None
            what = "frame header" if eof_ok else "frame body"
            raise ProtocolError(f"truncated {what}: end of stream after {got} of {n} bytes")
        got += k
    return bytes(buf)


def _shown(value: str) -> str:
    # Error messages name the offending value, but a 10 kB id must not become a 10 kB message.
    return repr(value) if len(value) <= 60 else repr(value[:57]) + "…"
