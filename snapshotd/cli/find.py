"""``snapshotd find PATH``: the runs and checkpoints that changed a path of a worktree.

Owns the command line of find. PATH is resolved against ``--cwd`` (default: the current
directory) to a worktree snapshotd has captured and a path inside it. Reads the home directly,
with or without a daemon.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

from snapshotd.cli.common import home_option, json_option, print_json
from snapshotd.cli.show import describe_call, foreign_text, read_only
from snapshotd.cli.terminal import field


@click.command()
@click.argument("path")
@click.option("--since", default=None,
              help="Only checkpoints taken since this long ago (90s, 2h, 7d) or this ISO time.")
@click.option("--cwd", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Resolve PATH against this directory (default: the current one).")
@click.option("-n", "--max-count", "limit", type=click.IntRange(min=1), default=None,
              help="At most this many checkpoints.")
@home_option
@json_option
def find(path: str, since: str | None, cwd: Path | None, limit: int | None,
         home: Path | None, as_json: bool) -> None:
    """List the checkpoints of every run that changed PATH (a file or a directory), newest
    first: A added, M modified, D deleted."""
    from snapshotd.features.review import find_path
    from snapshotd.service import set_turns

    base = os.path.abspath(cwd if cwd is not None else os.getcwd())

    def call(view: Any) -> dict:
        result = find_path(view, path=path, cwd=base, since=since, limit=limit)
        set_turns(view.ledger, result["checkpoints"])  # issue 44: each names its turn
        return result

    result = read_only(home, call)
    if as_json:
        print_json(result)
        return
    click.echo(f"{field(result['relative'] or '.')} in {field(result['worktree'])}: {result['total']} "
               f"checkpoint(s) in {len(result['runs'])} run(s)")
    for cp in result["checkpoints"]:
        click.echo(f"{cp['status']}  {field(cp['run_id'])}/{field(cp['node_id'])}/{cp['iteration']}/"
                   f"{cp['attempt']} seq {cp['seq']}  {describe_call(cp)}")
        if cp.get("foreign"):  # captured here, made by another session's tool call
            click.echo(f"     change {foreign_text(cp['foreign'])}")
