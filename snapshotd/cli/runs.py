"""``snapshotd runs``: every run the ledger knows, newest activity first (``--json``: last).

Owns the table of the run summary (``snapshotd.service.listing.collect_runs``): per run its nodes,
attempts (by state), checkpoints, tool calls (and how many deduplicated onto an earlier
checkpoint), gaps (and how many are unresolved), coverage (tool calls captured of those seen),
worktrees and last activity. Reads the configured ledger (SQLite WAL or PostgreSQL, both safe beside a running
daemon) and the gap spool; needs no daemon.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from snapshotd.cli.common import (
    fail,
    home_option,
    json_option,
    print_json,
    read_ledger_or_fail,
    resolve_home,
)
from snapshotd.cli.terminal import field
from snapshotd.cli.texts import age


@click.command()
@home_option
@json_option
def runs(home: Path | None, as_json: bool) -> None:
    """List runs with their node and attempt counts, worktrees and last activity."""
    home_path = resolve_home(home)
    from snapshotd.service import collect_runs

    try:
        summary = read_ledger_or_fail(collect_runs, home_path)
    except OSError as exc:
        fail(f"could not read the gap spool: {exc}")
    if as_json:
        print_json({"runs": summary})
        return
    if not summary:
        click.echo(f"no runs yet in {home_path}")
        return
    _print_table(summary)


def _print_table(summary: list[dict]) -> None:
    now = time.time()
    rows = [("RUN", "NODES", "ATTEMPTS", "STATES", "CHECKPOINTS", "CALLS", "GAPS", "COVERAGE",
             "LAST", "WORKTREE")]
    for r in reversed(summary):  # newest activity first: the session just used is on top
        counts = dict(r["states"])
        if r.get("idle") and counts.get("active"):  # an active session waiting for its user
            counts["active"] -= r["idle"]
            counts = {k: v for k, v in counts.items() if v} | {"idle": r["idle"]}
        states = ",".join(f"{k}={v}" for k, v in sorted(counts.items()))
        if r.get("damaged_attempts"):
            states += f",DAMAGED={len(r['damaged_attempts'])}"
        gaps = str(r["gaps"]) + (f" ({r['unresolved_gaps']} open)" if r["unresolved_gaps"] else "")
        worktree = r["worktrees"][0] if len(r["worktrees"]) == 1 else (
            f"{r['worktrees'][0]} (+{len(r['worktrees']) - 1})" if r["worktrees"] else "-")
        calls = str(r.get("tool_calls", 0)) + (f" ({r['tool_calls_deduped']} deduplicated)"
                                                if r.get("tool_calls_deduped") else "")
        rows.append((field(r["run_id"]), str(r["nodes"]), str(r["attempts"]), states,
                     str(r["checkpoints"]), calls, gaps, coverage_cell(r.get("coverage")),
                     age(now - r["last_activity"]) + " ago",
                     field(worktree)))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(row[:-1], widths, strict=True))
                   + "  " + row[-1])


def coverage_cell(cov: dict | None) -> str:
    """``11/12 (92 %), 1 gap``: a run's tool calls captured of those seen (issue 43)."""
    if not cov:
        return "-"
    if not cov.get("tool_calls_seen"):
        text = "no tool calls"
    else:
        text = f"{cov['tool_calls_captured']}/{cov['tool_calls_seen']} ({cov['percent']} %)"
    gaps = cov.get("gaps") or 0
    return text + (f", {gaps} gap{'' if gaps == 1 else 's'}" if gaps else "")
