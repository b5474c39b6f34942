"""``snapshotd purge RUN PATH``: take a path out of every checkpoint of a run (docs/secrets.md).

Owns the command-line face of ``snapshotd.features.purge``: through the daemon when one answers, else on
the home directly under the daemon's lock.

Promises: exits 0 with what was rewritten (``--json``: the result map); 1 with a sentence on
stderr for an unknown run or a path that is not worktree-relative.
"""

from __future__ import annotations

from pathlib import Path

import click

from snapshotd.cli.common import (
    daemon_or_local,
    home_option,
    json_option,
    print_json,
    socket_option,
)


@click.command()
@click.argument("run_id")
@click.argument("path")
@home_option
@socket_option
@json_option
def purge(run_id: str, path: str, home: Path | None, socket_: Path | None,
          as_json: bool) -> None:
    """Remove PATH (worktree-relative) from every checkpoint of RUN."""

    def direct(service: object) -> dict:
        from snapshotd.features import purge_op, recover_journal

        recover_journal(service)  # type: ignore[arg-type]
        return purge_op(service, {"run_id": run_id, "path": path})  # type: ignore[arg-type]

    result = daemon_or_local(socket_, home, "purge", direct, run_id=run_id, path=path)
    if as_json:
        print_json(result)
        return
    total = sum(a["rewritten"] for a in result["attempts"])
    click.echo(f"purged {result['path']} from {total} checkpoint(s) of {result['run_id']}"
               + ("" if total else " (no checkpoint held it)"))
    for a in result["attempts"]:
        click.echo(f"  {a['node_id']} iteration {a['iteration']} attempt {a['attempt']}: "
                   f"{a['rewritten']} rewritten")
    if total:
        click.echo("the old commits go at the next gc past its safety interval (1h); "
                   "`snapshotd gc --prune-grace 0s` reclaims them now. Delete or move the file "
                   "in the worktree, or the next capture takes it again")
