"""``snapshotd checkout RUN --node X --seq N DIR``: one checkpoint, read-only, in a directory.

Owns the command line of checkout. The work is ``snapshotd.ops.Operations.checkout``: read
only on the ledger and the store, here (no daemon needed). Promises: DIR must be new or empty
and outside the snapshotd home; files are 0444 (0555 when executable) and directories 0555
unless ``--writable``; ``--json`` prints the result map; errors go to stderr with exit 1.
"""

from __future__ import annotations

from pathlib import Path

import click

from snapshotd.cli.common import (
    attempt_options,
    home_option,
    json_option,
    node_or_only,
    operations,
    print_json,
    run_call,
)
from snapshotd.cli.terminal import field


@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", default=None,
              help="The node of the checkpoint (default: the run's only node).")
@click.option("--seq", type=click.IntRange(min=0), required=True, help="The checkpoint's seq.")
@attempt_options
@click.option("--writable", is_flag=True,
              help="Files and directories writable (git's modes under your umask).")
@home_option
@json_option
@click.argument("target", type=click.Path(path_type=Path))
def checkout(run_id: str, node_id: str | None, seq: int, iteration: int | None, attempt: int | None,
             writable: bool, home: Path | None, as_json: bool, target: Path) -> None:
    """Materialize checkpoint --seq of RUN into the new or empty directory TARGET, read-only.

    For looking, building or running tests at that point; `restore --to` keeps its meaning.
    Symlinks stay symlinks; nothing is written outside TARGET.
    """
    node_id = node_or_only(home, run_id, node_id)
    fields = {"run_id": run_id, "node_id": node_id, "seq": seq, "iteration": iteration,
              "attempt": attempt, "target": str(target.absolute()), "writable": writable}
    result = run_call(operations(home, None).checkout, fields)
    if as_json:
        print_json(result)
        return
    mode = "writable" if writable else "read-only"
    click.echo(f"checked out seq {result['seq']} of {field(result['run_id'])}/"
               f"{field(result['node_id'])} iteration {result['iteration']} attempt "
               f"{result['attempt']} ({result['commit'][:10]}) into {field(result['target'])}: "
               f"{result['files']} file(s), {mode}")
    for row in result["not_written"]:
        click.echo(field(f"snapshotd: not written {row['path']}: {row['reason']}"), err=True)
