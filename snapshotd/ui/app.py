"""The web app: an ASGI application (starlette) over the reader and the restore/export ops.

Owns ``create_app`` (the routes, behind ``snapshotd.ui.security.Guard``) and ``serve`` (uvicorn
on a socket bound to 127.0.0.1 only). The page is one HTML shell with hand-written script and
style from ``static/`` in the package: nothing is fetched from elsewhere, so it works offline.

Routes: ``GET /`` the page; ``GET /api/runs``, ``/api/run``, ``/api/version`` (live updates
poll it), ``/api/gaps``, ``/api/checkpoint``, ``/api/diff``, ``/api/tree``, ``/api/blame`` (a
page: ``offset``/``limit``) (read only); ``POST /api/restore`` and ``/api/export`` (without
``confirm`` they change nothing and return the plan; with it they act and return the undo).

Promises: every failure is JSON ``{"error": code, "message": ...}`` with a 4xx status for a
``ServiceError`` (the message says what to do) and 500 for anything else, which is also logged.
Restore and export go through ``snapshotd.ops.operations.Operations``: the daemon when one answers,
else the home under the daemon's lock, with every rule of the ``restore`` op.
"""

from __future__ import annotations

import json
import logging
import socket as socketlib
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from snapshotd.core import BAD_REQUEST, CONFLICT, INTERNAL, NOT_FOUND, ServiceError
from snapshotd.ops import Operations
from snapshotd.ui import actions
from snapshotd.ui.data import Reader
from snapshotd.ui.security import CSRF_SCOPE_KEY, Guard

log = logging.getLogger("snapshotd.ui")

STATUS_OF = {NOT_FOUND: 404, CONFLICT: 409}


def create_app(*, home: Path, socket: Path | None, token: str, port: int,
               explicit_home: bool = False) -> Guard:
    """The guarded app for ``home`` served on 127.0.0.1:``port``. ``socket`` (and ``home``
    when ``explicit_home``) are passed on to restore and export, and to their undo commands."""
    ops = Operations(home=home if explicit_home else None, socket=socket)
    # Reads name the home always; the acting ops name it only when the user did, so an undo
    # command carries --home only then.
    reader = Reader(home, Operations(home=home, socket=socket))
    static = resources.files("snapshotd.ui") / "static"
    shell = (static / "index.html").read_text()

    def page(request: Request) -> Response:
        # The signed-in session's own CSRF value (random per session, not the token's).
        return HTMLResponse(shell.replace("{{csrf}}", request.scope.get(CSRF_SCOPE_KEY, "")))

    routes = [
        Route("/", page),
        Route("/api/runs", _api(lambda q: reader.runs())),
        Route("/api/run", _api(lambda q: reader.timeline(q.get("run", "")))),
        Route("/api/version", _api(lambda q: {"version": reader.version(q.get("run", ""))})),
        Route("/api/gaps", _api(lambda q: reader.gaps(q.get("run") or None))),
        Route("/api/checkpoint", _api(lambda q: reader.checkpoint(_sel(q)))),
        Route("/api/diff", _api(lambda q: reader.diff(_sel(q), _sel(q, "a_") if q.get("a_seq")
                                                      else None))),
        Route("/api/tree", _api(lambda q: reader.tree(_sel(q), q.get("path", "")))),
        Route("/api/blame", _api(lambda q: actions.blame(
            ops, _sel(q), q.get("path", ""), _int("offset", q.get("offset") or 0),
            _int("limit", q.get("limit") or actions.BLAME_PAGE)))),
        Route("/api/restore", _api(lambda b: actions.restore(ops, b), post=True),
              methods=["POST"]),
        Route("/api/revert", _api(lambda b: actions.revert(ops, b), post=True),
              methods=["POST"]),
        Route("/api/export", _api(lambda b: actions.export(ops, reader, b), post=True),
              methods=["POST"]),
        Mount("/static", app=StaticFiles(directory=str(static)), name="static"),
    ]
    return Guard(Starlette(routes=routes), token=token, port=port)


def bind(port: int) -> socketlib.socket:
    """A listening socket on 127.0.0.1 only (``port`` 0: any free port)."""
    sock = socketlib.socket(socketlib.AF_INET, socketlib.SOCK_STREAM)
    sock.setsockopt(socketlib.SOL_SOCKET, socketlib.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    sock.listen(128)
    return sock


def serve(app: Guard, sock: socketlib.socket, *, log_level: str = "warning") -> None:
    """Serve ``app`` on ``sock`` until interrupted."""
    import uvicorn

    config = uvicorn.Config(app, log_level=log_level, access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


# -- helpers -------------------------------------------------------------------------------------


def _sel(query: Any, prefix: str = "") -> dict:
    out: dict[str, Any] = {"run": query.get(prefix + "run") or query.get("run"),
                           "node": query.get(prefix + "node")}
    for name in ("seq", "iteration", "attempt"):
        value = query.get(prefix + name)
        out[name] = _int(prefix + name, value) if value not in (None, "") else None
    return out


def _int(name: str, value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ServiceError(BAD_REQUEST, f"{name} must be an integer, not {value!r}"
                           ) from None


def _api(call: Callable[[Any], dict], *, post: bool = False) -> Callable:
    """A sync endpoint (starlette runs it in its thread pool) answering JSON."""

    if post:
        async def endpoint(request: Request) -> Response:
            try:
                body = json.loads(await request.body() or b"{}")
            except ValueError:
                return _error(ServiceError(BAD_REQUEST, "the body must be JSON"))
            if not isinstance(body, dict):
                return _error(ServiceError(BAD_REQUEST, "the body must be an object"))
            from starlette.concurrency import run_in_threadpool

            return await run_in_threadpool(_answer, call, body)
        return endpoint

    def get_endpoint(request: Request) -> Response:
        return _answer(call, request.query_params)
    return get_endpoint


def _answer(call: Callable[[Any], dict], arg: Any) -> Response:
    try:
        return JSONResponse(call(arg))
    except ServiceError as exc:
        return _error(exc)
    except Exception as exc:  # noqa: BLE001 - one failed view, never a dead server
        log.exception("ui request failed")
        return JSONResponse({"error": INTERNAL, "message": f"{type(exc).__name__}: {exc}"},
                            status_code=500)


def _error(exc: ServiceError) -> Response:
    return JSONResponse({"error": exc.code, "message": exc.message},
                        status_code=STATUS_OF.get(exc.code, 400))
