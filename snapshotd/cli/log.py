"""``snapshotd log RUN``: a run's checkpoints newest first, each with its tool call and diffstat.

Owns the command line of log: ``--node`` keeps one node, ``--path`` the checkpoints that changed
a file or directory, ``--since`` those taken after a time, ``-S TEXT`` those that changed how
often TEXT occurs (git's pickaxe). Reads the home directly, with or without a daemon.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from snapshotd.cli.common import home_option, json_option, print_json
from snapshotd.cli.show import describe_call, echo_change, read_only
from snapshotd.cli.terminal import field


@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", default=None, help="Only this node (default: all).")
@click.option("--iteration", type=click.IntRange(min=0), default=None,
              help="Only this iteration.")
@click.option("--attempt", type=click.IntRange(min=1), default=None,
              help="Only this attempt number.")
@click.option("--path", "path", default=None,
              help="Only checkpoints that changed this file or directory (relative to the "
                   "worktree).")
@click.option("--since", default=None,
              help="Only checkpoints taken since this long ago (90s, 2h, 7d) or this ISO time.")
@click.option("-S", "pickaxe", default=None, metavar="TEXT",
              help="Only checkpoints that changed the number of occurrences of TEXT.")
@click.option("-n", "--max-count", "limit", type=click.IntRange(min=1), default=None,
              help="At most this many checkpoints.")
@click.option("--stat", "fmt", flag_value="stat", default=True,
              help="Each checkpoint's diffstat (default).")
@click.option("--patch", "fmt", flag_value="patch", help="Each checkpoint's patch.")
@click.option("--root", is_flag=True,
              help="Also show the diff of a first checkpoint whose worktree had no known "
                   "earlier state (its whole worktree against the empty tree).")
@home_option
@json_option
def log(run_id: str, node_id: str | None, iteration: int | None, attempt: int | None,
        path: str | None, since: str | None, pickaxe: str | None, limit: int | None, fmt: str,
        root: bool, home: Path | None, as_json: bool) -> None:
    """List the run's checkpoints newest first across nodes and attempts, each with its tool
    call and what it changed."""
    from snapshotd.features.review import log_run
    from snapshotd.service import set_turns

    def call(view: Any) -> dict:
        result = log_run(view, run_id=run_id, node_id=node_id, iteration=iteration,
                         attempt=attempt, path=path, since=since, pickaxe=pickaxe,
                         patch=fmt == "patch", limit=limit, root=root)
        set_turns(view.ledger, result["entries"])  # issue 44: each entry names its turn
        return result

    result = read_only(home, call)
    if as_json:
        print_json(result)
        return
    for entry in result["entries"]:
        click.echo(f"seq {entry['seq']}  {field(entry['run_id'])}/{field(entry['node_id'])}/"
                   f"{entry['iteration']}/{entry['attempt']}  {describe_call(entry)}")
        if entry.get("diff_omitted"):
            click.echo(f" ({field(entry['diff_omitted'])})")
        else:
            if entry.get("base_note"):
                click.echo(f" ({field(entry['base_note'])})")
            echo_change(entry, fmt)
        click.echo("")
    if not result["entries"]:
        click.echo("no checkpoint matches", err=True)
