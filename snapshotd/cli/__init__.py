"""The ``snapshotd`` command line: one module per command group.

Promises: every command has ``--help``; read commands take ``--json``; errors go to
stderr with a non-zero exit and a sentence that says what to do.
"""

from __future__ import annotations

import click

from snapshotd import __version__
from snapshotd.cli import (
    attempt,
    blame,
    config,
    diff,
    exec,
    export,
    fetch,
    find,
    flush,
    gc,
    handoff,
    http_hook,
    install,
    log,
    mcp,
    native_hook,
    purge,
    push,
    repair,
    restore,
    runs,
    serve,
    show,
    snapshots,
    status,
    ui,
)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="snapshotd")
def main() -> None:
    """Durable, restorable history of the worktrees where coding agents work."""


for _module in (attempt, blame, config, diff, exec, export, fetch, find, flush, gc, handoff,
                http_hook, install, log, mcp, native_hook, purge, push, repair, restore, runs, serve, show,
                snapshots, status, ui):
    _module.register(main)
