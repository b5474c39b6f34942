"""The web app's guard on a shared machine: sign-in, Host header, CSRF, response headers.

Owns ``Guard``, an ASGI middleware in front of every route, and ``safe_next``.
Promises (every request, static files included):
- The Host header must be exactly ``127.0.0.1:PORT``, the loopback address the app serves: a
  page on another origin that rebinds its DNS name to 127.0.0.1 is refused (403).
- A browser signs in at ``/login?code=C`` with a one-time code (``snapshotd.ui.sessions``): it
  gets an HttpOnly, SameSite=Strict cookie holding a random session id and is sent on to
  ``next`` only when that is a path on this app (else to ``/``). No URL ever carries the token.
- Any other request needs that cookie or ``Authorization: Bearer <token>`` (scripts; the token
  is in a 0600 file; ``POST /login/code`` with it mints a code): 403 otherwise.
- Only GET, HEAD and POST; a POST with a cookie must carry ``X-CSRF-Token`` equal to its
  session's own random value (the page's meta tag); any POST with an ``Origin`` not this app's
  is refused (403).
- Every response forbids framing, sniffing, referrers and any script or style from elsewhere.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, unquote

from snapshotd.ui.sessions import Session, Sessions

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

SECURITY_HEADERS = [
    (b"content-security-policy",
     b"default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
     b"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cache-control", b"no-store"),
]
CSRF_SCOPE_KEY = "snapshotd.csrf"  # the session's CSRF value, for the page ("" for a script)
# A path on this app: one leading "/", then no "/" or "\" (browsers read "/\host" as "//host"),
# and only characters that cannot start another scheme or authority (no controls: browsers drop
# tabs and newlines, so "/\t/host" would become "//host").
_SAFE_NEXT = re.compile(r"/(?![/\\])[A-Za-z0-9._~!$&'()*+,;=:@%/?#-]*")


def safe_next(value: str | None) -> str:
    """``value`` when it is a path on this app, however often it is percent-decoded; else ``/``."""
    if not value or not _SAFE_NEXT.fullmatch(value):
        return "/"
    seen = value
    for _ in range(4):  # a browser or proxy decoding it again must not find "//" either
        decoded = unquote(seen)
        if decoded[1:2] in ("/", "\\") or any(c < " " or c in "\\\x7f" for c in decoded):
            return "/"
        if decoded == seen:
            return value
        seen = decoded
    return "/"


def cookie_name(port: int) -> str:
    # Cookies are not separated by port: one name per port keeps two instances apart.
    return f"snapshotd_ui_{port}"


class Guard:
    """Refuses what the module docstring says; passes the rest to ``app``."""

    def __init__(self, app: ASGIApp, *, token: str, port: int,
                 sessions: Sessions | None = None) -> None:
        self.app = app
        self.token = token
        self.port = port
        self.sessions = sessions or Sessions()
        self.host = f"127.0.0.1:{port}".encode()
        self.origin = f"http://127.0.0.1:{port}"
        self.cookie = cookie_name(port)

    def mint_code(self) -> str:
        """A one-time sign-in code; the browser opens ``/login?code=`` with it."""
        return self.sessions.mint_code()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            if scope["type"] == "lifespan":
                await self.app(scope, receive, send)
            return
        headers = {k.lower(): v for k, v in scope.get("headers", [])}
        refusal = self._refusal(scope, headers)
        if refusal is not None:
            await _plain(send, 403, refusal)
            return
        path = scope.get("path", "/")
        if path == "/login":
            await self._login(scope, send)
            return
        bearer = self._bearer(headers)
        if path == "/login/code" and bearer:
            body = json.dumps({"code": self.mint_code()}).encode()
            await _reply(send, 200, body, b"application/json")
            return
        session = None if bearer else self.sessions.get(_cookie(headers, self.cookie))
        refusal = self._refusal_for(scope, headers, bearer, session)
        if refusal is not None:
            await _plain(send, 403, refusal)
            return
        scope[CSRF_SCOPE_KEY] = session.csrf if session else ""

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)

    def _refusal(self, scope: Scope, headers: dict[bytes, bytes]) -> str | None:
        if headers.get(b"host") != self.host:
            return (f"refused: this snapshotd ui answers only to Host 127.0.0.1:{self.port} "
                    "(open the URL `snapshotd ui` printed)")
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD", "POST"):
            return f"refused: method {method} is not served"
        origin = headers.get(b"origin")
        if method == "POST" and origin is not None and origin.decode("latin-1") != self.origin:
            return "refused: a change from another origin"
        return None

    def _bearer(self, headers: dict[bytes, bytes]) -> bool:
        given = headers.get(b"authorization", b"").decode("latin-1")
        scheme, _, value = given.partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(value.strip().encode(),
                                                                  self.token.encode())

    def _refusal_for(self, scope: Scope, headers: dict[bytes, bytes], bearer: bool,
                     session: Session | None) -> str | None:
        if not bearer and session is None:
            return ("refused: sign in by opening the URL `snapshotd ui` printed (its code "
                    "works once; the session is kept in a cookie)")
        if scope.get("method") == "POST" and session is not None:
            sent = headers.get(b"x-csrf-token", b"")
            if not hmac.compare_digest(sent, session.csrf.encode()):
                return "refused: a change needs the page's CSRF token"
        return None

    async def _login(self, scope: Scope, send: Send) -> None:
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        session, why = self.sessions.redeem(query.get("code", ""))
        if session is None:
            await _plain(send, 403, "refused: " + why)
            return
        cookie = f"{self.cookie}={session.sid}; Path=/; HttpOnly; SameSite=Strict"
        location = safe_next(query.get("next"))
        await send({"type": "http.response.start", "status": 303,
                    "headers": [(b"location", location.encode()),
                                (b"set-cookie", cookie.encode()),
                                (b"content-length", b"0"), *SECURITY_HEADERS]})
        await send({"type": "http.response.body", "body": b""})


def _cookie(headers: dict[bytes, bytes], name: str) -> str | None:
    raw = headers.get(b"cookie")
    if not raw:
        return None
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw.decode("latin-1"))
    except CookieError:  # a malformed cookie header is simply no session
        return None
    morsel = jar.get(name)
    return morsel.value if morsel else None


async def _plain(send: Send, status: int, text: str) -> None:
    await _reply(send, status, (text + "\n").encode(), b"text/plain; charset=utf-8")


async def _reply(send: Send, status: int, body: bytes, ctype: bytes) -> None:
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", ctype),
                            (b"content-length", str(len(body)).encode()), *SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": body})
