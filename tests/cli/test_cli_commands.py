"""The command line's table of commands (``snapshotd.cli.COMMANDS``): every entry is the
command it names, every command a module defines is reachable, and a command imports only its
own module."""

from __future__ import annotations

import importlib
import json
import pkgutil
import subprocess
import sys

import click

import snapshotd.cli
from snapshotd.cli import COMMANDS, main


def test_every_entry_is_the_command_it_names() -> None:
    ctx = click.Context(main)
    assert main.list_commands(ctx) == sorted(COMMANDS)
    for name in COMMANDS:
        command = main.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name
    assert main.get_command(ctx, "no-such-command") is None


def test_every_command_a_module_defines_is_in_the_table() -> None:
    ctx = click.Context(main)
    reachable: set[int] = set()
    pending = [main.get_command(ctx, name) for name in COMMANDS]
    while pending:
        command = pending.pop()
        reachable.add(id(command))
        if isinstance(command, click.Group):
            pending.extend(command.commands.values())
    for info in pkgutil.iter_modules(snapshotd.cli.__path__):
        module = importlib.import_module(f"snapshotd.cli.{info.name}")
        for attribute, value in vars(module).items():
            if isinstance(value, click.Command) and value.callback is not None \
                    and value.callback.__module__ == module.__name__:
                assert id(value) in reachable, f"snapshotd.cli.{info.name}.{attribute}"


def test_a_command_loads_only_its_own_module() -> None:
    probe = ("import json, sys\n"
             "from snapshotd.cli import main\n"
             "try:\n"
             "    main(['show', '--help'])\n"
             "except SystemExit:\n"
             "    pass\n"
             "print(json.dumps(sorted(sys.modules)))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         check=True).stdout
    loaded = set(json.loads(out.splitlines()[-1]))
    assert "snapshotd.cli.show" in loaded
    others = {f"snapshotd.cli.{target.split(':')[0]}" for target in COMMANDS} - {
        "snapshotd.cli.show", "snapshotd.cli.common"}
    assert loaded & others == set()
    assert {"snapshotd.daemon.daemon", "snapshotd.daemon.http_hook", "http.server"} & loaded == set()
