"""The ``snapshotd`` command line, one module per command group; every command has ``--help``,
read commands take ``--json``, errors go to stderr as a sentence that says what to do."""

from __future__ import annotations

import importlib
from typing import Any

import click

from snapshotd import __version__

# Command name -> "module:attribute" under snapshotd.cli. A command's module is imported only
# when that command runs: ``snapshotd show`` does not load the HTTP server, the service installer
# or the daemon, and ``snapshotd serve`` not the review commands, so each start costs what its
# command needs (agents' runners call the CLI often, and so does the test suite).
COMMANDS: dict[str, str] = {
    "attempt": "attempt:attempt",
    "bisect": "bisect:bisect",
    "blame": "blame:blame",
    "checkout": "checkout:checkout",
    "config": "config:config",
    "diff": "diff:diff",
    "du": "du:du",
    "exec": "exec:exec_command",
    "export": "export:export",
    "fetch": "fetch:fetch",
    "find": "find:find",
    "flush": "flush:flush",
    "gc": "gc:gc",
    "handoff": "handoff:handoff",
    "http-hook": "http_hook:http_hook",
    "install-service": "install:install_service",
    "uninstall-service": "install:uninstall_service",
    "log": "log:log",
    "mcp": "mcp:mcp",
    "native-hook": "native_hook:native_hook",
    "purge": "purge:purge",
    "push": "push:push",
    "repair": "repair:repair",
    "restore": "restore:restore",
    "revert": "revert:revert",
    "runs": "runs:runs",
    "serve": "serve:serve",
    "show": "show:show",
    "snapshots": "snapshots:snapshots",
    "status": "status:status",
    "turns": "turns:turns",
    "ui": "ui:ui",
}


# Commands whose stdout is a protocol (msgpack, MCP), not text for a reader: their streams stay
# as they are; every other command's output passes ``terminal.guard_output``.
RAW_OUTPUT = frozenset({"serve", "mcp"})


class LazyGroup(click.Group):
    """A group whose subcommands are imported by name when asked for (click's documented
    lazy-loading pattern), whose text output has its control characters escaped."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        from snapshotd.cli.terminal import guard_output, unguard_output

        guard_output()
        try:
            return super().main(*args, **kwargs)
        finally:
            unguard_output()

    def resolve_command(self, ctx: click.Context,
                        args: list[str]) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if name in RAW_OUTPUT:
            from snapshotd.cli.terminal import unguard_output

            unguard_output()
        return name, command, rest

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = COMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attribute = target.split(":")
        command = getattr(importlib.import_module(f"snapshotd.cli.{module_name}"), attribute)
        if not isinstance(command, click.Command) or command.name != cmd_name:
            raise RuntimeError(f"snapshotd.cli.{target} is not the {cmd_name!r} command")
        return command


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="snapshotd")
def main() -> None:
    """Durable, restorable history of the worktrees where coding agents work."""
