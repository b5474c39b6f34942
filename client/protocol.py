"""The snapshotd wire format (docs/protocol.md, v1): one definition, shared by daemon and client.

Owns the frame layout (4-byte big-endian body length + one msgpack map), the frame size limit,
the error-code vocabulary and the validation of the ids and counters that end up in ref names,
trailers and ledger rows. Promises:
- ``encode_frame`` never produces a frame the peer must refuse (it raises ``ValueError`` first).
- ``read_frame`` returns exactly one decoded map, ``None`` on a clean end of stream, and raises
  ``ProtocolError`` (with ``.code``) for anything else; it never reads past the frame it returns.
- Text that is not UTF-8 (a ``str`` with surrogate escapes, as ``os.fsdecode`` makes of a file
  name) is packed as an ``EXT_FS_TEXT`` value and read back by ``read_frame`` as the same ``str``.
- ``validate_id`` / ``validate_int`` accept a value only if the daemon can use it verbatim.
Imports only the stdlib and msgpack, the latter on first use: until then requests of plain types
are packed here byte for byte as ``msgpack.packb`` does, so the hook sends first and imports
msgpack while the daemon captures (``Client`` calls ``preload_codec`` between sending and
reading; the cost: docs/performance.md, "client/protocol.py").
"""

from __future__ import annotations

import time

# Annotations are never evaluated (PEP 563); `typing` costs milliseconds on the hook's path.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PROTOCOL_VERSION = 1
MAX_FRAME = 1 << 20  # bytes of msgpack body, header excluded
HEADER_SIZE = 4
# msgpack extension type of a text value that is not valid Unicode: a file name whose bytes are
# not UTF-8, held in Python as ``os.fsdecode`` does (surrogate escapes). Its data is those bytes
# (docs/protocol.md, "Text that is not UTF-8").
EXT_FS_TEXT = 1

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
WORKTREE_REPLACED = "worktree-replaced"
NOT_FOUND = "not-found"
CONFLICT = "conflict"
CAPTURE_FAILED = "capture-failed"
RESTORE_FAILED = "restore-failed"
BUSY = "busy"
SHUTTING_DOWN = "shutting-down"
NO_REMOTE = "no-remote"
PUSH_FAILED = "push-failed"
FETCH_FAILED = "fetch-failed"
VERIFY_FAILED = "verify-failed"
# An export would write a file holding a secret no one released (docs/secrets.md).
SECRET_HELD = "secret-held"
INTERNAL = "internal"

ERROR_CODES = frozenset({
    BAD_FRAME, FRAME_TOO_LARGE, BAD_REQUEST, BAD_ID, UNKNOWN_OP, UNSUPPORTED_VERSION, FORBIDDEN,
    FENCED, WORKTREE_REFUSED, WORKTREE_MISSING, WORKTREE_REPLACED, NOT_FOUND, CONFLICT,
    CAPTURE_FAILED, RESTORE_FAILED, BUSY, SHUTTING_DOWN, NO_REMOTE, PUSH_FAILED, FETCH_FAILED,
    VERIFY_FAILED, SECRET_HELD, INTERNAL,
})

# Codes the client side produces itself; they are also gap reasons written by the hook/wrap.
DAEMON_UNAVAILABLE = "daemon-unavailable"
TIMEOUT = "timeout"
PROTOCOL_ERROR = "protocol-error"
BAD_PAYLOAD = "bad-payload"
# The socket, its directory or the process listening on it is not the current user's: the
# client refused to talk to it (see ``paths.socket_problem`` and ``Client``).
SOCKET_UNTRUSTED = "socket-untrusted"
CLIENT_CODES = frozenset({
    DAEMON_UNAVAILABLE, TIMEOUT, PROTOCOL_ERROR, BAD_PAYLOAD, SOCKET_UNTRUSTED,
})

# Codes the daemon records no gap for. The rule: every reply to a snapshot that is not a
# checkpoint is a gap, written exactly once. The daemon writes it when it can attribute the
# failure to an attempt (fenced, worktree-refused, worktree-missing, capture-failed, ...); for
# the codes here it cannot or does not (a refusal before the request is read or validated, a
# full connection table, a daemon that is stopping, an unexpected error), so the caller (hook,
# wrap) writes the gap. A code outside ``ERROR_CODES`` (a newer daemon's) is treated the same
# way: a gap written twice is noise, a gap never written is a lost guarantee.
NO_DAEMON_GAP_CODES = frozenset({
    BAD_FRAME, FRAME_TOO_LARGE, BAD_REQUEST, BAD_ID, UNKNOWN_OP, UNSUPPORTED_VERSION, FORBIDDEN,
    BUSY, SHUTTING_DOWN, INTERNAL,
})


def daemon_records_gap(code: str) -> bool:
    """Whether the daemon has itself recorded the gap for an ``ok: false`` reply with ``code``."""
    return code in ERROR_CODES and code not in NO_DAEMON_GAP_CODES


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
    # Once msgpack is loaded (always in the daemon), its C packer makes the same bytes in a
    # seventh of the time; before, packing here spares the hook the import.
    body = pack_plain(obj) if _MSGPACK is None else None
    if body is None:
        try:
            body = _codec().packb(obj, use_bin_type=True)
        except UnicodeEncodeError:  # text holding surrogate escapes: see EXT_FS_TEXT
            body = _codec().packb(_fs_text(obj), use_bin_type=True)
    if len(body) > MAX_FRAME:
        raise ValueError(f"frame body of {len(body)} bytes exceeds the {MAX_FRAME}-byte limit")
    return len(body).to_bytes(HEADER_SIZE, "big") + body


def decode_body(data: bytes, *, fs_text: bool = False) -> dict:
    """Unpack one frame body; ``ProtocolError`` unless it is exactly one msgpack map.

    ``fs_text`` (a client reading a reply): an ``EXT_FS_TEXT`` value becomes the ``str`` it
    stands for. The daemon leaves it an ``ExtType``, which no request field accepts."""
    msgpack = _codec()
    try:
        obj = msgpack.unpackb(data, raw=False, strict_map_key=False,
                              ext_hook=_ext_text if fs_text else msgpack.ExtType)
    except Exception as exc:  # msgpack raises a zoo of types (ExtraData, FormatError, ValueError…)
        raise ProtocolError(f"frame body is not valid msgpack: {exc}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"frame body is a {type(obj).__name__}, not a map")
    return obj


def _fs_text(obj: object) -> object:
    """A copy of ``obj`` in which every ``str`` that is not valid Unicode is an ``EXT_FS_TEXT``."""
    if isinstance(obj, str):
        try:
            obj.encode("utf-8")
        except UnicodeEncodeError:
            try:
                return _codec().ExtType(EXT_FS_TEXT, obj.encode("utf-8", "surrogateescape"))
            except UnicodeEncodeError:  # a surrogate no byte stands for: made visible, lossily
                return obj.encode("utf-8", "backslashreplace").decode("ascii")
        return obj
    if isinstance(obj, dict):
        return {_fs_text(k): _fs_text(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_fs_text(v) for v in obj]
    return obj


def _ext_text(code: int, data: bytes) -> object:
    if code == EXT_FS_TEXT:
        return data.decode("utf-8", "surrogateescape")  # os.fsdecode on a UTF-8 system
    return _codec().ExtType(code, data)


def preload_codec() -> None:
    """Import msgpack now (a client calls this while it waits for a reply)."""
    _codec()


_MSGPACK: Any = None


def _codec() -> Any:
    global _MSGPACK
    if _MSGPACK is None:
        import msgpack

        _MSGPACK = msgpack
    return _MSGPACK


def pack_plain(obj: object) -> bytes | None:
    """``msgpack.packb(obj, use_bin_type=True)`` for values made of exactly ``dict``, ``list``,
    ``tuple``, ``str``, ``bytes``, ``int``, ``float``, ``bool`` and ``None`` (what requests
    carry), without importing msgpack; the same bytes, since msgpack's packer always picks the
    shortest form. None for anything else (a subclass, an int out of range, text that is not
    valid Unicode, deep nesting): the caller then asks msgpack, which packs it or raises."""
    out = bytearray()
    try:
        return bytes(out) if _pack_into(out, obj, 0) else None
    except (UnicodeEncodeError, OverflowError):
        return None


def _pack_into(out: bytearray, obj: object, depth: int) -> bool:
    kind = type(obj)
    if depth > 64:
        return False
    if obj is None:
        out.append(0xC0)
    elif kind is bool:
        out.append(0xC3 if obj else 0xC2)
    elif kind is int:
        _pack_int(out, obj)  # type: ignore[arg-type]
    elif kind is str:
        data = obj.encode("utf-8")  # type: ignore[union-attr]
        n = len(data)
        if n < 32:
            out.append(0xA0 | n)
        elif n < 0x100:
            out += b"\xd9" + n.to_bytes(1, "big")
        elif n < 0x10000:
            out += b"\xda" + n.to_bytes(2, "big")
        else:
            out += b"\xdb" + n.to_bytes(4, "big")
        out += data
    elif kind is float:
        from struct import pack  # not at module level: requests rarely carry a float

        out += b"\xcb" + pack(">d", obj)
    elif kind is bytes:
        n = len(obj)  # type: ignore[arg-type]
        if n < 0x100:
            out += b"\xc4" + n.to_bytes(1, "big")
        elif n < 0x10000:
            out += b"\xc5" + n.to_bytes(2, "big")
        else:
            out += b"\xc6" + n.to_bytes(4, "big")
        out += obj  # type: ignore[operator]
    elif kind is dict:
        _pack_length(out, len(obj), 0x80, b"\xde", b"\xdf")  # type: ignore[arg-type]
        for key, value in obj.items():  # type: ignore[union-attr]
            if not (_pack_into(out, key, depth + 1) and _pack_into(out, value, depth + 1)):
                return False
    elif kind is list or kind is tuple:
        _pack_length(out, len(obj), 0x90, b"\xdc", b"\xdd")  # type: ignore[arg-type]
        for item in obj:  # type: ignore[union-attr]
            if not _pack_into(out, item, depth + 1):
                return False
    else:
        return False
    return True


def _pack_int(out: bytearray, n: int) -> None:
    if n >= 0:
        if n < 0x80:
            out.append(n)
        elif n < 0x100:
            out += b"\xcc" + n.to_bytes(1, "big")
        elif n < 0x10000:
            out += b"\xcd" + n.to_bytes(2, "big")
        elif n < 0x100000000:
            out += b"\xce" + n.to_bytes(4, "big")
        else:
            out += b"\xcf" + n.to_bytes(8, "big")  # OverflowError past 2**64 - 1
    elif n >= -32:
        out.append(n & 0xFF)
    elif n >= -0x80:
        out += b"\xd0" + n.to_bytes(1, "big", signed=True)
    elif n >= -0x8000:
        out += b"\xd1" + n.to_bytes(2, "big", signed=True)
    elif n >= -0x80000000:
        out += b"\xd2" + n.to_bytes(4, "big", signed=True)
    else:
        out += b"\xd3" + n.to_bytes(8, "big", signed=True)  # OverflowError below -2**63


def _pack_length(out: bytearray, n: int, fix: int, w16: bytes, w32: bytes) -> None:
    if n < 16:
        out.append(fix | n)
    elif n < 0x10000:
        out += w16 + n.to_bytes(2, "big")
    else:
        out += w32 + n.to_bytes(4, "big")


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
    return decode_body(body, fs_text=True)


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
