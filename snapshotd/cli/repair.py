"""``snapshotd repair``: rebuild a damaged ledger from the store (``snapshotd.features.repair``).

Owns the command's surface: the report as text or ``--json``, ``--dry-run``, and the exit
status (0: repaired, or nothing to repair; 1: refused, e.g. a daemon runs; 2: bad configuration).
"""

from __future__ import annotations

from pathlib import Path

import click

from snapshotd.cli.common import (
    call_or_fail,
    fail,
    home_option,
    json_option,
    print_json,
    resolve_home,
)


@click.command()
@click.option("--dry-run", is_flag=True,
              help="Diagnose and count what a rebuild recovers; change nothing.")
@home_option
@json_option
def repair(dry_run: bool, home: Path | None, as_json: bool) -> None:
    """Rebuild a damaged ledger from the store's commits; the damaged file is kept, renamed.

    Stop the daemon first. The rebuilt ledger holds every attempt with a ref in the store and
    one row per checkpoint on its chain (seq, commit, label, tool call id, ...).
    """
    from snapshotd.core import load_config
    from snapshotd.features import repair_ledger
    from snapshotd.ledger import LedgerError

    home_path = resolve_home(home)
    try:
        report = call_or_fail(lambda: repair_ledger(home_path, load_config(), dry_run=dry_run))
    except (LedgerError, OSError) as exc:
        fail(f"the ledger could not be rebuilt: {exc}")
    if as_json:
        print_json(report)
        return
    _print(report)


def _print(report: dict) -> None:
    if report["damage"] is None and report["rebuilt"] is None:
        click.echo(f"the ledger {report['ledger']} reads whole; nothing to repair")
        return
    if report["damage"] is not None:
        click.echo(f"the ledger {report['ledger']} is damaged: {report['damage']}")
    rebuilt = report["rebuilt"]
    if rebuilt is not None:
        verb = "would rebuild" if report["dry_run"] else "rebuilt"
        click.echo(f"{verb} {rebuilt['attempts']} attempt(s) and {rebuilt['checkpoints']} "
                   f"checkpoint(s) from the store (attempt states from the "
                   f"{rebuilt['states_from']})")
        for problem in rebuilt["problems"]:
            click.echo(f"  could not rebuild {problem['run_id']}/{problem['node_id']}/"
                       f"{problem['iteration']}/{problem['attempt']}: {problem['detail']}")
    for kept in report["kept"]:
        click.echo(f"kept the damaged file as {kept}")
