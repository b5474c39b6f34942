"""Shared pieces of the CLI: where the home and socket are, the option stacks commands share
(``op_options``, ``attempt_options``), how to talk to the daemon, how to fail (``call_or_fail``,
``read_ledger_or_fail``: a core call's errors as one sentence and an exit status)."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from snapshotd.ops import DaemonSilent, NoLedger
from snapshotd.ops import run_op as backend_run_op
from snapshotd_client import Client, DaemonUnavailable, SnapshotdError, home_dir, socket_path

if TYPE_CHECKING:
    from snapshotd.ops import Operations

F = TypeVar("F", bound=Callable[..., Any])
T = TypeVar("T")


def home_option(fn: F) -> F:
    return click.option("--home", type=click.Path(path_type=Path), default=None,
                        help="State directory (default $SNAPSHOTD_HOME or "
                             "$XDG_STATE_HOME/snapshotd).")(fn)


def socket_option(fn: F) -> F:
    return click.option("--socket", "socket_", type=click.Path(path_type=Path), default=None,
                        help="Control socket (default $SNAPSHOTD_SOCKET or "
                             "$XDG_RUNTIME_DIR/snapshotd/snapshotd.sock).")(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


def op_options(fn: F) -> F:
    """``--home``, ``--socket`` and ``--json``: what every command that runs an op through the
    daemon, or on the home when none answers, takes."""
    return home_option(socket_option(json_option(fn)))


def attempt_options(fn: F) -> F:
    """``--iteration`` and ``--attempt``, each defaulting to the newest with checkpoints."""
    fn = click.option("--attempt", type=click.IntRange(min=1), default=None,
                      help="Attempt number (default: the newest with checkpoints).")(fn)
    return click.option("--iteration", type=click.IntRange(min=0), default=None,
                        help="Iteration (default: the newest with checkpoints).")(fn)


def resolve_home(home: Path | None) -> Path:
    return (home or home_dir()).expanduser()


def resolve_socket(sock: Path | None) -> Path:
    return sock or socket_path()


def fail(message: str, code: int = 1) -> None:
    """Print one sentence to stderr and exit non-zero."""
    click.echo(f"snapshotd: {message}", err=True)
    sys.exit(code)


def ledger_failure(exc: Exception, doing: str = "read") -> None:
    """Fail on a ledger error: a damaged ledger's own sentence (what, where, ``snapshotd
    repair``), else "the ledger cannot be <doing>: ..."."""
    from snapshotd.ledger import LedgerDamaged

    if isinstance(exc, LedgerDamaged):
        fail(str(exc))
    fail(f"the ledger cannot be {doing}: {exc}")


def read_ledger_or_fail(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` reading the configured ledger directly, without a daemon; a bad
    ledger configuration or a ledger error printed as a sentence (``ledger_failure``), exit 1."""
    from snapshotd.core import ConfigError
    from snapshotd.ledger import LedgerError

    try:
        return fn(*args, **kwargs)
    except ConfigError as exc:
        fail(f"the ledger cannot be read: {exc}")
    except LedgerError as exc:
        ledger_failure(exc)
    raise AssertionError("unreachable")


def node_or_only(home: Path | None, run_id: str, node_id: str | None) -> str:
    """``node_id``, or when None the run's one node (every zero-setup session has one,
    ``session``); a run with several nodes (or none known) is a usage error naming them."""
    if node_id is not None:
        return node_id
    from snapshotd.service import open_ledger_if_any

    def nodes() -> list[str]:
        with open_ledger_if_any(resolve_home(home)) as ledger:
            if ledger is None:
                return []
            return sorted({a.key.node_id for a in ledger.attempts(run_id)})

    found = read_ledger_or_fail(nodes)
    if len(found) == 1:
        return found[0]
    if not found:
        raise click.UsageError(f"Missing option '--node' (the ledger knows no run {run_id!r}).")
    raise click.UsageError(f"Missing option '--node': run {run_id!r} has nodes "
                           f"{', '.join(found)}.")


def print_json(value: object) -> None:
    """``value`` as JSON text that is always valid UTF-8: a byte of a name that is not UTF-8
    appears as the escape ``\\udcNN`` (the lone surrogate ``os.fsdecode`` makes of byte NN), so
    ``os.fsencode(json.loads(...)[...])`` gives the name's bytes back."""
    text = json.dumps(value, indent=2, ensure_ascii=False, default=str)
    click.echo(text.encode("utf-8", "backslashreplace").decode("utf-8"))


def shown(text: str) -> str:
    """``text`` printable whatever the locale: the bytes of a name that are not UTF-8 (surrogate
    escapes, as ``os.fsdecode`` makes them) appear as ``\\xNN``."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def daemon_client(sock: Path | None, timeout: float = 60.0) -> Client:
    return Client(resolve_socket(sock), timeout=timeout)


def call_daemon(sock: Path | None, op: str, **fields: Any) -> dict:
    """Ask the daemon or fail with a sentence that says what to do."""
    try:
        with daemon_client(sock) as client:
            return client.request(op, **fields)
    except DaemonUnavailable:
        fail(f"no daemon answers on {resolve_socket(sock)}; start it with `snapshotd serve` "
             "(or `snapshotd install-service`)", 3)
    except SnapshotdError as exc:
        fail(f"{exc.message} ({exc.code})")
    raise AssertionError("unreachable")


def run_op(home: Path | None, sock: Path | None, op: str, fields: dict[str, Any],
           local: Callable[[Any], dict], *, timeout: float = 60.0,
           via_daemon: Callable[[Client], dict] | None = None,
           require_ledger: bool = True) -> dict:
    """``snapshotd.ops.backend.run_op`` (the daemon when one answers, else the home directly under
    its lock), its failures printed as a sentence: a bad config exits 2, anything else 1."""
    from snapshotd.ledger import LedgerError
    pass

    try:
        return call_or_fail(backend_run_op, op, fields, local, home=home, socket=sock,
                            timeout=timeout, via_daemon=via_daemon,
                            require_ledger=require_ledger)
    except LedgerError as exc:
        ledger_failure(exc)
    raise AssertionError("unreachable")


def operations(home: Path | None, sock: Path | None) -> Operations:
    """The front ends' one operations surface on the home and socket the options named."""
    from snapshotd.ops import Operations

    return Operations(home=home, socket=sock)


def run_call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``call_or_fail`` for an op that may open the ledger here: a ledger that cannot be read
    is said the way ``run_op`` says it."""
    from snapshotd.ledger import LedgerError

    try:
        return call_or_fail(fn, *args, **kwargs)
    except LedgerError as exc:
        ledger_failure(exc)
    raise AssertionError("unreachable")


def call_or_fail(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)``, its failure printed as one sentence: a bad configuration exits
    2; a refused op (``ServiceError``) exits 1 with ``message (code)``, or, when the home holds
    nothing or its daemon is silent, with the option that names another home or socket."""
    from snapshotd.core import ConfigError, ServiceError
    pass

    try:
        return fn(*args, **kwargs)
    except ConfigError as exc:
        fail(str(exc), 2)
    except NoLedger as exc:
        fail(f"{exc.message} (pass --home, or set SNAPSHOTD_HOME)")
    except DaemonSilent as exc:
        fail(f"{exc.message}, or pass the socket it listens on with --socket")
    except ServiceError as exc:
        fail(f"{exc.message} ({exc.code})")
    raise AssertionError("unreachable")


def daemon_or_local(sock: Path | None, home: Path | None, op: str,
                    local: Callable[[Any], dict], **fields: Any) -> dict:
    """``run_op`` for commands that may start a new home (push, fetch, gc, handoff): the home
    is created when missing rather than refused."""
    return run_op(home, sock, op, fields, local, require_ledger=False)
