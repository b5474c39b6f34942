"""``snapshotd gc``: apply a retention policy and reclaim space in the store."""

from __future__ import annotations

from pathlib import Path

import click

from snapshotd.cli.common import daemon_or_local, fail, op_options, print_json


@click.command()
@click.option("--keep-last", type=click.IntRange(min=0), default=None,
              help="Keep the N newest checkpoints of each ended attempt.")
@click.option("--older-than", default=None,
              help="Only drop checkpoints older than this (90s, 30m, 12h, 7d, 2w).")
@click.option("--max-store-size", default=None,
              help="Delete the oldest ended runs until the store is under SIZE (500M, 2G).")
@click.option("--run", "run_id", default=None, help="Only this run.")
@click.option("--all", "whole_run", is_flag=True, help="With --run: delete the whole run.")
@click.option("--dry-run", is_flag=True, help="Report what would go; change nothing.")
@click.option("--prune-grace", default=None,
              help="Objects younger than this are never deleted (default 1h), so captures in "
                   "flight keep theirs. Alone (no policy), reclaims unreachable objects only: "
                   "`--prune-grace 0s` after a purge.")
@op_options
def gc(keep_last: int | None, older_than: str | None, max_store_size: str | None,
       run_id: str | None, whole_run: bool, dry_run: bool, prune_grace: str | None,
       home: Path | None,
       socket_: Path | None, as_json: bool) -> None:
    """Drop checkpoints of ended attempts beyond a policy, then reclaim space.

    Never dropped: checkpoints of active attempts, the newest checkpoint of every attempt, an
    attempt's final pointer, and recent restore safety checkpoints.
    """
    from snapshotd.core import parse_duration
    from snapshotd.features import policy_from_fields, run_gc

    grace = None
    if prune_grace is not None:
        try:
            grace = parse_duration(prune_grace)
        except ValueError as exc:
            fail(str(exc), 2)
    fields = {"keep_last": keep_last, "older_than": older_than,
              "max_store_size": max_store_size, "run_id": run_id, "all": whole_run,
              "dry_run": dry_run, "safety_interval_s": grace}

    def local(service):  # noqa: ANN001, ANN202 - a Service, when no daemon runs
        return run_gc(service, policy_from_fields(fields), dry_run=dry_run)

    report = daemon_or_local(socket_, home, "gc", local,
                             **{k: v for k, v in fields.items() if v is not None and v is not False})
    if as_json:
        print_json(report)
        return
    verb = "would drop" if dry_run else "dropped"
    for item in report["pruned"]:
        seqs = item["seqs"]
        click.echo(f"{verb} {len(seqs)} checkpoint(s) of {item['run_id']}/{item['node_id']} "
                   f"attempt {item['attempt']}: seq {_ranges(seqs)}")
    for run in report["deleted_runs"]:
        click.echo(f"{'would delete' if dry_run else 'deleted'} run {run['run_id']} "
                   f"({run['checkpoints']} checkpoints)")
    if not report["pruned"] and not report["deleted_runs"]:
        click.echo("nothing to drop under this policy")
    click.echo(f"store: {_size(report['store_bytes_before'])} -> "
               f"{_size(report['store_bytes_after'])}")


def _ranges(seqs: list[int]) -> str:
    out, start, prev = [], None, None
    for s in sorted(seqs):
        if start is None:
            start = prev = s
        elif s == prev + 1:
            prev = s
        else:
            out.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = s
    if start is not None:
        out.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ",".join(out)


def _size(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TiB"
