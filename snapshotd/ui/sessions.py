"""The web app's sign-in: one-time codes, cookie sessions and their CSRF values.

Owns ``Sessions``. A browser never sees the long-lived token: ``snapshotd ui`` opens it on
``/login?code=C``, and C is random, works once and only for ``CODE_TTL_S`` seconds. Redeeming
it opens a session: a random id (the cookie) and a random CSRF value, neither derived from the
token nor from each other. A code redeemed a second time was seen by someone else (argv is
public: ``ps``): the second use is refused and the session the first use opened is closed, so
a thief who beat the browser loses the session as soon as the browser arrives.
Memory is bounded: at most ``MAX_CODES`` live codes and ``MAX_SESSIONS`` sessions (oldest go).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

CODE_TTL_S = 60.0
USED_CODE_KEPT_S = 600.0  # how long a redeemed code is remembered, to catch its replay
MAX_CODES = 64
MAX_SESSIONS = 64


@dataclass(frozen=True)
class Session:
    sid: str
    csrf: str


@dataclass
class _Code:
    expires: float
    sid: str | None = None  # the session its (first) use opened


class Sessions:
    """Codes and sessions of one ``snapshotd ui`` process (nothing is kept on disk)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._codes: OrderedDict[str, _Code] = OrderedDict()  # keyed by the code's hash
        self._sessions: OrderedDict[str, Session] = OrderedDict()

    def mint_code(self) -> str:
        code = secrets.token_urlsafe(24)
        with self._lock:
            self._purge()
            self._codes[_digest(code)] = _Code(self._clock() + CODE_TTL_S)
            while len(self._codes) > MAX_CODES:
                self._codes.popitem(last=False)
        return code

    def redeem(self, code: str) -> tuple[Session | None, str]:
        """The new session, or None and why not (a sentence for the page)."""
        with self._lock:
            self._purge()
            entry = self._codes.get(_digest(code)) if code else None
            if entry is None:
                return None, ("this sign-in code is not valid (codes work once, for "
                              f"{CODE_TTL_S:.0f} s): run `snapshotd ui` again for a new one")
            if entry.sid is not None:
                self._sessions.pop(entry.sid, None)
                return None, ("this sign-in code was already used, so someone else may have "
                              "seen it; the session it opened is closed: run `snapshotd ui` "
                              "again for a new code")
            if self._clock() > entry.expires:
                return None, (f"this sign-in code has expired (codes work for {CODE_TTL_S:.0f}"
                              " s): run `snapshotd ui` again for a new one")
            session = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32))
            entry.sid = session.sid
            entry.expires = self._clock() + USED_CODE_KEPT_S
            self._sessions[session.sid] = session
            while len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
            return session, ""

    def get(self, sid: str | None) -> Session | None:
        if not sid:
            return None
        with self._lock:
            return self._sessions.get(sid)

    def _purge(self) -> None:
        now = self._clock()
        for key in [k for k, c in self._codes.items() if now > c.expires + USED_CODE_KEPT_S]:
            del self._codes[key]


def _digest(code: str) -> str:
    # Kept hashed: a lookup's timing says nothing about a live code's characters.
    return hashlib.sha256(code.encode()).hexdigest()
