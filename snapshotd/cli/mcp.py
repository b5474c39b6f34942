"""``snapshotd mcp``: the MCP server (stdio) that gives agents the CLI's listing, diff and restore.

Promises: the MCP SDK is imported only when this command runs, so the core install works without
it; when it is missing the command says to ``pip install 'snapshotd[mcp]'`` and exits 1. While
serving, stdout carries nothing but the protocol; logs go to stderr.
"""

from __future__ import annotations

from pathlib import Path

import click

from snapshotd.cli.common import fail, home_option, socket_option

INSTALL_HINT = "pip install 'snapshotd[mcp]'"


@click.command()
@home_option
@socket_option
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False),
              help="Log level (logs go to stderr).")
def mcp(home: Path | None, socket_: Path | None, log_level: str) -> None:
    """Serve the MCP tools over stdio: list_runs, list_checkpoints, diff_checkpoint,
    restore_checkpoint, list_gaps, status.

    Register it with an MCP client as the command `snapshotd mcp` (the Claude Code plugin does
    this through .mcp.json)."""
    try:
        from snapshotd.mcp import serve_stdio
    except ModuleNotFoundError as exc:
        if exc.name is not None and (exc.name == "mcp" or exc.name.startswith(("mcp.",
                                                                               "mcp_types"))):
            fail(f"the MCP server needs the MCP Python SDK, which is not installed; install it "
                 f"with `{INSTALL_HINT}`")
        raise
    except ImportError as exc:
        fail(f"the MCP Python SDK could not be loaded ({exc}); install a supported version with "
             f"`{INSTALL_HINT}`")
    import sys

    from snapshotd.daemon import setup_logging

    setup_logging(log_level)
    if sys.stdin.isatty():
        click.echo("snapshotd mcp speaks the Model Context Protocol on stdin/stdout; register "
                   "`snapshotd mcp` with an MCP client (see docs/mcp.md). Ctrl-D quits.", err=True)
    serve_stdio(home=home, socket=socket_, log_level=log_level)
