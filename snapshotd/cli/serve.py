"""``snapshotd serve``: run the daemon in the foreground."""

from __future__ import annotations

from pathlib import Path

import click

from snapshotd.cli.common import fail, home_option, resolve_home, resolve_socket, socket_option
from snapshotd.config import ConfigError, load_config


def register(group: click.Group) -> None:
    group.add_command(serve)


@click.command()
@home_option
@socket_option
@click.option("--log-level", type=click.Choice(["debug", "info", "warning", "error"]),
              default=None, help="Log verbosity (default info).")
@click.option("--durability", type=click.Choice(["process", "full"]), default=None,
              help="full: fsync objects, refs and ledger before each reply.")
def serve(home: Path | None, socket_: Path | None, log_level: str | None,
          durability: str | None) -> None:
    """Run the daemon in the foreground until SIGTERM."""
    from snapshotd.daemon import run_daemon, setup_logging
    from snapshotd.server import DaemonLockError

    try:
        config = load_config({"log_level": log_level, "durability": durability})
    except ConfigError as exc:
        fail(str(exc), 2)
    setup_logging(config.log_level)
    listener = None
    try:
        from snapshotd.activation import listen_fds
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
    raise SystemExit(code)
