"""``snapshotd du``: where the store's bytes are (per run, per worktree, loose and packed, the
largest paths) and what ``gc`` would reclaim (``features.disk_usage``)."""

from __future__ import annotations

from pathlib import Path

import click

from snapshotd.cli.common import daemon_or_local, op_options, print_json


@click.command()
@click.argument("run_id", required=False)
@op_options
def du(run_id: str | None, home: Path | None, socket_: Path | None, as_json: bool) -> None:
    """Show where the store's bytes are, and what `snapshotd gc` would reclaim."""
    from snapshotd.features import du_report

    fields = {"run_id": run_id} if run_id else {}
    report = daemon_or_local(socket_, home, "du",
                             lambda service: du_report(service, run_id), **fields)
    if as_json:
        print_json(report)
        return
    s = report["store"]
    click.echo(f"store: {_size(s['bytes'])} ({_size(s['packed_bytes'])} in {s['packs']} "
               f"pack(s), {_size(s['loose_bytes'])} in {s['loose_objects']} loose objects)")
    for run in report["runs"]:
        click.echo(f"run {run['run_id']}: {_size(run['bytes'])} reached, "
                   f"{_size(run['unique_bytes'])} its own, {run['checkpoints']} checkpoints")
    for wt in report["worktrees"]:
        click.echo(f"worktree {wt['worktree']}: {_size(wt['bytes'])}")
    for item in report["largest_paths"]:
        click.echo(f"  {_size(item['bytes']):>10}  {item['path']}")
    if report["unreachable_bytes"] is not None:
        click.echo(f"gc --prune-grace 0s would reclaim about {_size(report['unreachable_bytes'])}"
                   " (unreachable objects)")


def _size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
