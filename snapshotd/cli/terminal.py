"""Control characters never reach the terminal raw: labels, tool call ids, file names and ids
come from agents and worktrees, and an escape sequence in one (OSC 52 writes the clipboard,
others retitle, recolour or clear the screen) would act on the reader's terminal.

Owns ``guard_output`` (installed by ``snapshotd.cli.main`` for every command but the protocol
servers ``serve`` and ``mcp``): every text written to ``sys.stdout``/``sys.stderr`` passes
``escape_text``, so no command can forget it, whether piped or on a terminal. Promises: C0
controls but newline and tab, DEL and C1 controls are written as ``\\u00NN`` (inside a JSON
string that escape is the same character, so ``--json`` stays JSON that reads back the same
text); ``field`` also escapes newline and tab, for one value on a line of its own, and shows a
name's bytes that are not UTF-8 as ``\\xNN``. Bytes written on purpose (``snapshotd diff``'s patch)
go through ``raw_stdout`` and keep them.
"""

from __future__ import annotations

import re
import sys
from typing import Any, BinaryIO, TextIO

# Outside a field newline and tab are layout; inside one they are data like any control.
# A lone surrogate U+DC80..U+DCFF is byte 0x80..0xff of a name that is not UTF-8 (as
# ``os.fsdecode`` makes it): a stream with ``surrogateescape`` would write that byte raw.
_STREAM = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\udc80-\udcff]")
_FIELD = re.compile("[\x00-\x1f\x7f-\x9f\udc80-\udcff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code - 0xdc00:02x}" if code >= 0xdc80 else f"\\u{code:04x}"


def escape_text(text: str) -> str:
    """``text`` with every control but newline and tab escaped as ``\\u00NN``, and each byte
    of a name that is not UTF-8 as ``\\xNN``."""
    return _STREAM.sub(_escape, text)


def field(value: object) -> str:
    """One value (a label, an id, a path) for a line of text: every control escaped, newline
    and tab included, and bytes that are not UTF-8 (surrogate escapes) shown as ``\\xNN``."""
    return _FIELD.sub(_escape, value if isinstance(value, str) else str(value))


class GuardedText:
    """A text stream that escapes controls on their way to ``inner``. It has no ``buffer``:
    click would write bytes there, past the escape."""

    def __init__(self, inner: TextIO) -> None:
        self.inner = inner

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        self.inner.write(escape_text(text))
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def flush(self) -> None:
        self.inner.flush()

    def __getattr__(self, name: str) -> Any:
        if name == "buffer":
            raise AttributeError(name)
        return getattr(self.inner, name)


_raw: dict[str, TextIO] = {}


def guard_output() -> None:
    """Route ``sys.stdout`` and ``sys.stderr`` through ``GuardedText`` (once)."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if stream is not None and not isinstance(stream, GuardedText):
            _raw[name] = stream
            setattr(sys, name, GuardedText(stream))


def unguard_output() -> None:
    """Give the protocol servers the streams as they were (their output is a protocol, not
    text for a reader)."""
    for name, stream in _raw.items():
        if isinstance(getattr(sys, name), GuardedText):
            setattr(sys, name, stream)
    _raw.clear()


def raw_text_stdout() -> TextIO:
    """Standard output as it was, for our own terminal control (a progress bar's ``\r`` and
    cursor codes), which carries no text from outside."""
    return _raw.get("stdout", sys.stdout)


def raw_stdout() -> BinaryIO:
    """Standard output's bytes, for output that must keep them (a patch that must apply)."""
    stream = _raw.get("stdout", sys.stdout)
    return stream.buffer
