"""``snapshotd fetch RUN``: bring a run's checkpoints from the configured remote.

Owns the command-line face of ``snapshotd.features.replication.fetch.fetch_run``: the run's attempt refs are
fetched (git checks every object), verified against the ledger, adopted only forward, and the
ledger rows rebuilt from their commit trailers, so ``snapshots``, ``restore`` and ``diff`` then
work on this host. Through the daemon when one answers, else directly on the home.

Promises: exit 0 when every ref was adopted; 1 with a sentence on stderr when no remote is set,
the remote cannot be reached, it holds nothing of the run, or any ref was refused (each refused
ref is named with the reason; the others are still adopted); ``--json`` prints the result map.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from snapshotd.cli.common import daemon_or_local, op_options, print_json


@click.command()
@click.argument("run_id")
@op_options
def fetch(run_id: str, home: Path | None, socket_: Path | None, as_json: bool) -> None:
    """Fetch RUN's checkpoints from the configured remote into the local store."""

    def direct(service: object) -> dict:
        from snapshotd.features.replication import fetch_run

        return fetch_run(service, run_id)  # type: ignore[arg-type]

    result = daemon_or_local(socket_, home, "fetch", direct, run_id=run_id)
    if as_json:
        print_json(result)
    else:
        click.echo(f"fetched {len(result['refs'])} attempt ref(s) of {run_id} from "
                   f"{result['remote']}; {result['rebuilt_rows']} checkpoint row(s) rebuilt, "
                   f"{result['checkpoints']} known")
        for ref in result["refs"]:
            click.echo(f"  {ref['node_id']} iteration {ref['iteration']} attempt "
                       f"{ref['attempt']}: {ref['action']} at {ref['commit'][:12]}")
    for c in result.get("conflicts", []):
        click.echo(f"snapshotd: refused {c['ref']} from the remote: {c['reason']}", err=True)
    if result.get("conflicts"):
        sys.exit(1)
