"""The web app's guard on a shared machine: token, Host header, CSRF, response headers.

Owns ``Guard``, an ASGI middleware in front of every route, and ``csrf_token``.

Promises (every request, static files included):
- The Host header must be exactly ``127.0.0.1:PORT``, the loopback address the app serves: a
  page on another origin that rebinds its DNS name to 127.0.0.1 is refused (403).
- The random token must come with it: as ``?token=`` (then it is set as an HttpOnly,
  SameSite=Strict cookie for this port and the browser is sent to the same URL without it, so
  the token stays out of history and logs) or as that cookie. Without it: 403.
- Only GET, HEAD and POST; a POST must carry ``X-CSRF-Token`` (derived from the token, handed
  to the page in a meta tag) and, when the browser sends one, an ``Origin`` of this app: 403
  otherwise.
- Every response forbids framing, sniffing, referrers and any script or style from elsewhere.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Awaitable, Callable, MutableMapping
from http.cookies import CookieError, SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

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


def csrf_token(token: str) -> str:
    """The value a POST must carry in ``X-CSRF-Token``; derived, so it never reveals the token."""
    return hmac.new(token.encode(), b"snapshotd-ui-csrf", hashlib.sha256).hexdigest()


def cookie_name(port: int) -> str:
    # Cookies are not separated by port: one name per port keeps two instances apart.
    return f"snapshotd_ui_{port}"


class Guard:
    """Refuses what the module docstring says; passes the rest to ``app``."""

    def __init__(self, app: ASGIApp, *, token: str, port: int) -> None:
        self.app = app
        self.token = token
        self.port = port
        self.host = f"127.0.0.1:{port}".encode()
        self.origin = f"http://127.0.0.1:{port}"
        self.csrf = csrf_token(token)
        self.cookie = cookie_name(port)

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
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        if "token" in query:
            await self._adopt_token(scope, query, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, with_headers)

    def _refusal(self, scope: Scope, headers: dict[bytes, bytes]) -> str | None:
        if headers.get(b"host") != self.host:
            return (f"refused: this snapshotd ui answers only to Host 127.0.0.1:{self.port} "
                    "(open the URL `snapshotd ui` printed)")
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        given = query.get("token") or _cookie(headers, self.cookie)
        if not given or not hmac.compare_digest(given, self.token):
            return ("refused: open the URL with its token, as `snapshotd ui` printed it "
                    "(the token is asked for on every request)")
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD", "POST"):
            return f"refused: method {method} is not served"
        if method == "POST":
            sent = headers.get(b"x-csrf-token", b"").decode("latin-1")
            if not hmac.compare_digest(sent, self.csrf):
                return "refused: a change needs the page's CSRF token"
            origin = headers.get(b"origin")
            if origin is not None and origin.decode("latin-1") != self.origin:
                return "refused: a change from another origin"
        return None

    async def _adopt_token(self, scope: Scope, query: dict[str, str], send: Send) -> None:
        rest = urlencode({k: v for k, v in query.items() if k != "token"})
        location = scope.get("path", "/") + (f"?{rest}" if rest else "")
        cookie = (f"{self.cookie}={self.token}; Path=/; HttpOnly; SameSite=Strict")
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
    except CookieError:  # a malformed cookie header is simply no token
        return None
    morsel = jar.get(name)
    return morsel.value if morsel else None


async def _plain(send: Send, status: int, text: str) -> None:
    body = (text + "\n").encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"text/plain; charset=utf-8"),
                            (b"content-length", str(len(body)).encode()), *SECURITY_HEADERS]})
    await send({"type": "http.response.body", "body": body})
