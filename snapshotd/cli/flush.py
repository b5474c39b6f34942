"""``snapshotd flush``: wait until the daemon has every change of a worktree in a checkpoint.

Promises: exits 0 once the daemon's ``flush`` op replied, that is once every change made in the
worktree before the command ran is in a checkpoint of the attempt watching it (nothing to do, and
exit 0, when no active attempt watches it); exits 3 when no daemon runs, 1 on any other error,
each time with a sentence on stderr that says what to do.
"""

from __future__ import annotations

import os
from pathlib import Path

import click

from snapshotd.cli.common import call_daemon, json_option, print_json, socket_option


@click.command()
@click.option("--cwd", "cwd", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="The worktree (or a directory inside it); default: the current directory.")
@socket_option
@json_option
def flush(cwd: Path | None, socket_: Path | None, as_json: bool) -> None:
    """Return once every change seen so far in the worktree is in a checkpoint."""
    target = os.path.abspath(cwd if cwd is not None else os.getcwd())
    result = call_daemon(socket_, "flush", cwd=target)
    if as_json:
        print_json(result)
        return
    click.echo(f"flushed {result.get('worktree', target)}")
