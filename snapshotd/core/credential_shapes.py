"""Credential shapes: where text carries a password or token by its syntax, whatever it looks like.

Owns ``secret_name`` (which assignment and flag names hold a secret: a name whose last word ends
with ``password``, ``passwd``, ``passphrase``, ``pass``, ``pwd``, ``token``, ``secret``,
``credential(s)`` or ``auth`` in any joined form, ``PGPASSWORD``, ``HFTOKEN``, ``PG_PASS``; or
is ``key`` or ``<api|access|secret|private|client|...>key``), ``secret_value`` (which values
of such a name are secrets, not placeholders, paths or variable references) and
``shape_spans``: long flags (``--password X``, ``--token=X``, ``--api-key X``), the glued
``-pX`` of mysql/mariadb clients and ``sshpass -p X``, ``Authorization:`` headers and
``curl -u user:pass``. The rules are docs/secrets.md's table, one test row per shape
(tests/core/test_redaction.py).

Promises: a span never starts with ``…`` (a redaction marker is never matched again, so
redaction stays idempotent); each rule runs only when the text holds its literal.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

_PASSWORD_ENDINGS = ("password", "passwd", "passphrase", "pass", "pwd")
_OTHER_ENDINGS = ("token", "secret", "credential", "credentials", "auth")
# ``<qualifier>key`` joined (``APIKEY``, ``apiKey``): a bare ``...key`` ending is mostly an
# ordinary word (monkey, hotkey, turkey), so only these qualify.
_KEY_QUALIFIERS = frozenset({"", "api", "access", "secret", "private", "client", "auth", "master",
                             "signing", "encryption", "session", "app", "ssh", "license",
                             "account", "service", "deploy"})
# Words that end like a password name and are not one; ``PWD``/``OLDPWD`` are the shell's
# working directories (only as the whole name: ``DB_PWD`` is a password).
_NOT_PASSWORDS = frozenset({"bypass", "compass", "surpass", "encompass", "overpass", "underpass",
                            "trespass", "impass"})
_SHELL_DIRS = (["pwd"], ["oldpwd"])
# A value opening with one of these is a reference, a placeholder, another flag or a marker.
_NOT_VALUES = ("$", "<", "{", "[", "-", "…", "%", "/", "./", "../", "~/")
_SCHEMES = frozenset({"bearer", "basic", "token", "digest", "negotiate", "bot"})
_VALUE = r"""(?:"(?P<dq>[^"\n]+)"|'(?P<sq>[^'\n]+)'|(?P<bare>[^\s"'`;|&<>()]+))"""


def secret_name(name: str) -> str | None:
    """``"password"`` or ``"other"`` when the name ``name`` holds a secret, else None."""
    words = [w for w in re.split(r"[^a-z0-9]+", name.lower()) if w]
    if not words or words in _SHELL_DIRS:
        return None
    last = words[-1]
    if last.endswith(_PASSWORD_ENDINGS) and last not in _NOT_PASSWORDS:
        return "password"
    if last.endswith(_OTHER_ENDINGS):
        return "other"
    if last.endswith("key") and last[:-3] in _KEY_QUALIFIERS:
        return "other"
    return None


def secret_value(kind: str, value: str) -> bool:
    """Whether ``value``, given to a name of ``kind`` (``secret_name``), is a secret: a password
    of 6+ characters (8+ when all letters) that is not a placeholder (``changeme`` scores low);
    any other secret 12+ characters and random-looking. References (``$X``, ``${X}``), ``<x>``,
    paths and flags are not values."""
    if not value or value.startswith(_NOT_VALUES):
        return False
    if kind == "password":
        return len(value) >= 6 and (len(value) >= 8 or not value.isalpha()) \
            and entropy(value) >= 2.5
    return len(value) >= 12 and entropy(value) >= 3.0


def entropy(value: str) -> float:
    """Shannon entropy in bits per character: placeholders (``changeme``, ``xxxxxxxx``) score
    low, generated tokens high."""
    counts = Counter(value)
    n = len(value)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


@dataclass(frozen=True)
class _Shapes:
    flag: re.Pattern[Any]       # on lowered text
    header: re.Pattern[Any]     # on lowered text
    curl: re.Pattern[Any]       # on lowered text (curl's -U, the proxy's user:pass, too)
    mysql: re.Pattern[Any]      # on the text as is: -p is the password, -P the port
    sshpass: re.Pattern[Any]    # on the text as is: -p is the password, -P the prompt
    lits: tuple[Any, ...]       # flag, header, curl, mysql, mariadb, sshpass


@functools.cache
def _shapes(as_bytes: bool) -> _Shapes:
    def c(pattern: str) -> re.Pattern[Any]:
        return re.compile(pattern.encode() if as_bytes else pattern)

    # A command's arguments: up to the end of its line or its shell statement.
    args = r"[^\n;|&]*?[ \t]"
    return _Shapes(
        flag=c(r"--(?P<name>[a-z0-9][a-z0-9_-]*)(?:=|[ \t]+)" + _VALUE),
        header=c(r"authorization[\"']?[ \t]*[:=][ \t]*[\"']?(?:(?P<scheme>[a-z]+)[ \t]+)?"
                 + _VALUE),
        curl=c(r"\bcurl\b" + args + r"(?:-u|--user|--proxy-user)(?:[ \t]+|=)?[\"']?"
               r"[^\s:\"']+:(?P<bare>[^\s\"'`;|&<>()]+)"),
        mysql=c(r"\b(?:mysql[a-z]*|mariadb[a-z-]*)\b" + args + r"-p" + _VALUE),
        sshpass=c(r"\bsshpass\b" + args + r"-p[ \t]*" + _VALUE),
        lits=tuple(x.encode() if as_bytes else x
                   for x in ("--", "authorization", "curl", "mysql", "mariadb", "sshpass")))


def shape_spans(text: Any, lowered: Any | None) -> list[tuple[int, int, str]]:
    """``(start, end, kind)`` of each secret the shapes find in ``text`` (``str`` or ``bytes``);
    ``lowered`` is its lowered copy of the same length, or None (then the case-insensitive
    shapes are not looked for)."""
    shapes = _shapes(isinstance(text, bytes))
    flag, header, curl, mysql, mariadb, sshpass = shapes.lits
    found: list[tuple[int, int, str]] = []
    if lowered is not None:
        if flag in lowered:
            for m in shapes.flag.finditer(lowered):
                kind = secret_name(_str(m.group("name")))
                if kind is not None:
                    found.extend(_value_span(m, text, kind, "credential-flag"))
        if header in lowered:
            for m in shapes.header.finditer(lowered):
                scheme = m.group("scheme")
                if scheme is not None and _str(scheme) not in _SCHEMES:
                    continue  # ``Authorization: <word> <word>``: not a header value
                # Without a scheme, only a random-looking value: ``authorization: str`` and
                # ``Optional[str]`` are type annotations.
                found.extend(_value_span(m, text, "any" if scheme else "random", "authorization"))
        if curl in lowered:
            for m in shapes.curl.finditer(lowered):
                found.extend(_value_span(m, text, "any", "basic-auth"))
    for literals, pattern in (((mysql, mariadb), shapes.mysql), ((sshpass,), shapes.sshpass)):
        if any(lit in text for lit in literals):
            for m in pattern.finditer(text):
                found.extend(_value_span(m, text, "any", "credential-flag"))
    return found


def _value_span(m: re.Match[Any], text: Any, kind: str, label: str) -> list[tuple[int, int, str]]:
    """The span of the match's value (inside its quotes) when it is a secret: for ``kind``
    ``any`` every value that is not a reference or placeholder, ``random`` only a random-looking
    one, else ``secret_value``'s rule."""
    group = next((g for g in ("dq", "sq", "bare") if g in m.re.groupindex and m.group(g)), None)
    if group is None:
        return []
    start, end = m.span(group)
    value = _str(text[start:end])
    if "[redacted:" in value or any(c.isspace() for c in value):
        # Redacted already (a token rule's marker after its prefix), or quotes around
        # something that is no one value (``"Bearer " + token``).
        return []
    if kind in ("any", "random"):
        ok = bool(value) and not value.startswith(_NOT_VALUES[:6]) \
            and value.lower() not in _SCHEMES
        if kind == "random":
            ok = ok and len(value) >= 8 and entropy(value) >= 3.0 \
                and any(c.isdigit() for c in value)
    else:
        ok = secret_value(kind, value)
    return [(start, end, label)] if ok else []


def _str(value: Any) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value
