"""The one way a front end (the CLI, the MCP server) runs an op: through the daemon, or locally.

Owns ``run_op``: a daemon that answers gets the op (serialized with that worktree's captures);
else the home is opened here, under the daemon's own home lock, and the op's local twin runs on a
``Service``. Also ``request`` (one daemon round trip), ``complete_diff`` (a patch too large for a
frame rendered from the store), ``with_location`` (an undo command naming the caller's home and
socket) and ``read_home`` (ledger, store read handle, gap spool for read-only ops, never through
the daemon). Promises:
- The daemon is pinged first: once it has the request, a lost daemon is ``daemon-unavailable``,
  never a second, local run. A held home lock with no answer is retried for ``LOCK_RETRY_S``,
  then ``DaemonSilent``.
- With ``require_ledger`` (restore, diff) a home where nothing was captured is ``NoLedger``
  (``not-found``), not created; else it is created as the daemon creates it.
- Every failure is a ``ServiceError`` with the same code from daemon or local run (or
  ``daemon-unavailable``, ``timeout``), a bad configuration ``ConfigError``; nothing here prints.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from snapshotd.core import NOT_FOUND, UNKNOWN_OP, ServiceError
from snapshotd_client import (
    DAEMON_UNAVAILABLE,
    Client,
    DaemonUnavailable,
    SnapshotdError,
    gaps_path,
    home_dir,
    socket_path,
)

if TYPE_CHECKING:
    from snapshotd.features.review import HomeView
    from snapshotd.service import Service

# How long a held home lock with a silent socket is taken for a daemon still starting up.
LOCK_RETRY_S = 5.0
LOCK_POLL_S = 0.2
# The ping that decides between daemon and local: a live daemon answers it at once.
PING_TIMEOUT_S = 10.0
DEFAULT_TIMEOUT_S = 60.0


class NoLedger(ServiceError):
    """Nothing has been captured with this home: there is no ledger to run the op on."""


class DaemonSilent(ServiceError):
    """A daemon holds the home's lock but does not answer on the socket."""


def run_op(op: str, fields: dict[str, Any], local: Callable[[Service], dict], *,
           home: Path | None = None, socket: Path | None = None,
           timeout: float = DEFAULT_TIMEOUT_S,
           via_daemon: Callable[[Client], dict] | None = None,
           require_ledger: bool = True) -> dict:
    """Run ``op`` with ``fields`` in the daemon when one answers on ``socket`` (``via_daemon``,
    if given, talks to it instead of one plain request), else ``local(service)`` on ``home``
    under the home lock. ``home``/``socket`` default the way every client's do."""
    home_path = resolve_home(home)
    sock = socket_path(socket)
    deadline = time.monotonic() + LOCK_RETRY_S
    while True:
        reply = _through_daemon(op, fields, sock, timeout, via_daemon)
        if reply is not None:
            return reply
        if require_ledger:
            _require_ledger(home_path)
        else:
            from snapshotd.daemon import prepare_home

            home_path = prepare_home(home_path)
        from snapshotd.core import DaemonLockError, HomeLock

        lock = HomeLock(home_path)
        try:
            lock.acquire()
        except DaemonLockError:
            if time.monotonic() > deadline:
                raise DaemonSilent(DAEMON_UNAVAILABLE,
                                   f"a daemon holds {home_path} but does not answer on {sock}; "
                                   "check `snapshotd status`") from None
            time.sleep(LOCK_POLL_S)
            continue
        try:
            return run_locally(home_path, local)
        finally:
            lock.release()


def run_locally(home_path: Path, call: Callable[[Service], dict]) -> dict:
    """Open the home without a daemon (the caller holds its lock) and run ``call(service)``."""
    from snapshotd.core import load_config
    from snapshotd.daemon import guarding
    from snapshotd.service import Service

    # The op may read a worktree (restore's capture, a diff against it) as a daemon does.
    with guarding():
        service = Service(home_path, load_config())
        try:
            return call(service)
        finally:
            service.close()


def read_home(call: Callable[[HomeView], dict], *, home: Path | None = None) -> dict:
    """``call(view)`` on the home opened for reading, beside a running daemon or without one:
    the ledger (SQLite WAL or PostgreSQL) and git objects are safe to read while a daemon
    writes, and nothing here writes. A home where nothing was captured is ``NoLedger``."""
    from snapshotd.features.review import HomeView
    from snapshotd.ledger import open_ledger
    from snapshotd.service import GapSpool
    from snapshotd.store import Store

    home_path = resolve_home(home)
    _require_ledger(home_path)
    if not (home_path / "store.git" / "HEAD").exists():
        raise NoLedger(NOT_FOUND, f"no store at {home_path / 'store.git'}: nothing has been "
                                  "captured with this home yet")
    ledger = open_ledger(home_path)
    try:
        view = HomeView(home_path, ledger, Store(home_path).reader(),
                        GapSpool(gaps_path(home_path)))
        return call(view)
    finally:
        ledger.close()


def request(op: str, *, socket: Path | None = None, timeout: float = DEFAULT_TIMEOUT_S,
            **fields: Any) -> dict:
    """One daemon round trip. ``DaemonUnavailable`` propagates (nothing was run: a caller may
    fall back); every other failure is a ``ServiceError`` with the reply's code."""
    return _round_trip(Client.request, op, socket, timeout, fields)


def request_pages(op: str, *, socket: Path | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                  **fields: Any) -> dict:
    """``request`` for a paged op (``list``): every page, joined (``Client.pages``)."""
    return _round_trip(Client.pages, op, socket, timeout, fields)


def resolve_home(home: Path | None) -> Path:
    return (home or home_dir()).expanduser()


def with_location(command: str, home: Path | None, socket: Path | None) -> str:
    """``command`` carrying ``--home``/``--socket`` when the caller was given them, so an undo
    command reaches the same home and daemon."""
    extra = ""
    if home is not None:
        extra += f" --home {shlex.quote(str(home.expanduser().absolute()))}"
    if socket is not None:
        extra += f" --socket {shlex.quote(str(socket.absolute()))}"
    return command + extra


def complete_diff(result: dict, patch: bool) -> dict:
    """A diff reply whose patch or file list was left out of the frame (too large), rendered
    here from the two tree ids it names, reading the store it names; other replies as they are.
    """
    if not (result.get("patch_omitted") or result.get("files_truncated")):
        return result
    from snapshotd.features.review import render_trees
    from snapshotd.store import Store

    store_path = Path(result["store"])
    if store_path.name != "store.git" or not (store_path / "HEAD").exists():
        raise ServiceError(NOT_FOUND, f"the store {store_path} named by the daemon's reply is "
                                      "not readable here")
    repo = Store(store_path.parent).reader()
    out = dict(result)
    out.update(render_trees(repo, result["from"]["tree"], result["to"]["tree"], patch=patch))
    for key in ("patch_omitted", "files_truncated", "files_total"):
        out.pop(key, None)
    return out


# -- helpers -------------------------------------------------------------------------------------


def _through_daemon(op: str, fields: dict[str, Any], sock: Path, timeout: float,
                    via_daemon: Callable[[Client], dict] | None) -> dict | None:
    """The op's reply from the daemon, or None when no daemon answers the ping."""
    with Client(sock, timeout=PING_TIMEOUT_S) as client:
        try:
            client.ping()
        except DaemonUnavailable:
            return None
        except SnapshotdError as exc:
            raise _as_service_error(exc, "ping", sock) from None
        client.timeout = timeout
        try:
            if via_daemon is not None:
                return via_daemon(client)
            return client.request(op, **fields)
        except DaemonUnavailable as exc:
            # The request may have reached it: running it again here could do it twice.
            raise ServiceError(DAEMON_UNAVAILABLE,
                               f"the daemon went away during `{op}` ({exc.message}); check "
                               "`snapshotd status` and the run's checkpoints before retrying"
                               ) from None
        except SnapshotdError as exc:
            raise _as_service_error(exc, op, sock) from None


def _require_ledger(home_path: Path) -> None:
    from snapshotd.ledger import describe_ledger, ledger_exists

    if not ledger_exists(home_path):
        raise NoLedger(NOT_FOUND, f"no ledger at {describe_ledger(home_path)}: nothing has been "
                                  "captured with this home yet")
    if not home_path.is_dir():
        # A shared (PostgreSQL) ledger exists apart from any one home: with no home here, this
        # host has no store, so nothing was captured with it.
        raise NoLedger(NOT_FOUND, f"no snapshotd home at {home_path}: nothing has been captured "
                                  "with this home yet")


def _round_trip(send: Callable[..., dict], op: str, socket: Path | None, timeout: float,
                fields: dict[str, Any]) -> dict:
    """``send(client, op, **fields)`` on a new connection, failures mapped as ``request`` says."""
    sock = socket_path(socket)
    with Client(sock, timeout=timeout) as client:
        try:
            return send(client, op, **fields)
        except DaemonUnavailable:
            raise
        except SnapshotdError as exc:
            raise _as_service_error(exc, op, sock) from None


def _as_service_error(exc: SnapshotdError, op: str, sock: Path) -> ServiceError:
    if exc.code == UNKNOWN_OP and exc.remote:
        return ServiceError(UNKNOWN_OP, f"the daemon on {sock} does not serve `{op}`; upgrade "
                                        "and restart it (`snapshotd serve`)")
    return ServiceError(exc.code, exc.message)
