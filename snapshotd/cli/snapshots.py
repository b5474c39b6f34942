"""``snapshotd snapshots RUN``: a run's checkpoints with its gaps in line."""

from __future__ import annotations

import time
from pathlib import Path

import click

from snapshotd.cli.common import (
    fail,
    home_option,
    json_option,
    print_json,
    resolve_home,
)


def register(group: click.Group) -> None:
    group.add_command(snapshots)


@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", default=None, help="Only this node.")
@click.option("--attempt", type=int, default=None, help="Only this attempt number.")
@home_option
@json_option
def snapshots(run_id: str, node_id: str | None, attempt: int | None, home: Path | None,
              as_json: bool) -> None:
    """List the checkpoints and gaps of RUN."""
    from snapshotd.gaps import GapSpool
    from snapshotd.ledger import Ledger
    from snapshotd.service import list_run
    from snapshotd_client.paths import gaps_path

    home_path = resolve_home(home)
    db = home_path / "snapshotd.db"
    if not db.exists():
        fail(f"no ledger at {db}: nothing has been captured with this home yet")
    ledger = Ledger(db)
    try:
        known = ledger.run_ids()
        if run_id not in known:
            names = ", ".join(known[-20:]) or "none"
            fail(f"unknown run {run_id!r}; known runs: {names}")
        listing = list_run(ledger, GapSpool(gaps_path(home_path)), run_id, node_id, attempt)
    finally:
        ledger.close()
    if as_json:
        print_json(listing)
        return
    _print_table(listing)


def _print_table(listing: dict) -> None:
    rows = [("SEQ", "NODE", "IT", "ATT", "TIER/SOURCE", "AGE", "COMMIT", "CHANGES", "LABEL")]
    now = time.time()
    for cp in listing["checkpoints"]:
        rows.append((str(cp["seq"]), cp["node_id"], str(cp["iteration"]), str(cp["attempt"]),
                     f"{cp['tier']}/{cp['source']}", _age(now - cp["created_at"]),
                     cp["commit"][:10],
                     f"+{cp['added']} ~{cp['modified']} -{cp['deleted']}", cp["label"] or ""))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for r in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1])
    for gap in listing["gaps"]:
        state = "resolved" if gap.get("resolved") else "UNRESOLVED"
        click.echo(f"gap  {gap.get('ts')}  {gap.get('reason')}  tool={gap.get('tool_use_id')}  "
                   f"{state}  {gap.get('detail')}")


def _age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    if seconds < 129600:
        return f"{seconds / 3600:.0f}h"
    return f"{seconds / 86400:.0f}d"
