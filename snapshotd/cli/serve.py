"""``snapshotd serve``: run the daemon in the foreground."""

from __future__ import annotations

import gc
from pathlib import Path

import click

from snapshotd.cli.common import (
    fail,
    home_option,
    ledger_failure,
    resolve_home,
    resolve_socket,
    socket_option,
)
from snapshotd.core import ConfigError, load_config


@click.command()
@home_option
@socket_option
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default=None, help="Log verbosity (default info).")
@click.option("--durability", type=click.Choice(["process", "full"]), default=None,
              help="full: fsync objects, refs and ledger before each reply.")
@click.option("--ledger", "ledger_url", metavar="URL", default=None,
              help="Ledger: postgresql://… to share one with other hosts (default $SNAPSHOTD_"
                   "LEDGER_URL, ledger_url in config.toml, else SQLite in the home).")
def serve(home: Path | None, socket_: Path | None, log_level: str | None,
          durability: str | None, ledger_url: str | None) -> None:
    """Run the daemon in the foreground until SIGTERM."""
    # Start-up makes long-lived objects (modules, classes, the service): a collection while
    # they are made frees next to nothing and costs about 5 % of the start's CPU. run_daemon
    # freezes them and turns collection back on once the daemon is wired.
    gc.disable()
    from snapshotd.core import DaemonLockError
    from snapshotd.daemon import run_daemon, setup_logging
    from snapshotd.ledger import LedgerError

    try:
        config = load_config({"log_level": log_level, "durability": durability,
                              "ledger_url": ledger_url})
    except ConfigError as exc:
        fail(str(exc), 2)
    setup_logging(config.log_level)
    listener = None
    try:
        from snapshotd.daemon import listen_fds
    except ModuleNotFoundError:
        listen_fds = None
    if listen_fds is not None:
        sockets = listen_fds()
        listener = sockets[0] if sockets else None
    try:
        code = run_daemon(resolve_home(home), resolve_socket(socket_), config, listener)
    except DaemonLockError as exc:
        fail(str(exc), 1)
    except PermissionError as exc:
        fail(f"{exc}; fix the permissions or pass --socket", 1)
    except LedgerError as exc:
        ledger_failure(exc, "opened")
    raise SystemExit(code)
