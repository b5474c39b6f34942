"""``snapshotd status``: what the running daemon is doing."""

from __future__ import annotations

from pathlib import Path

import click

from snapshotd.cli.common import (
    daemon_client,
    fail,
    json_option,
    print_json,
    resolve_socket,
    socket_option,
)
from snapshotd_client import DaemonUnavailable, SnapshotdError


def register(group: click.Group) -> None:
    group.add_command(status)


@click.command()
@socket_option
@json_option
def status(socket_: Path | None, as_json: bool) -> None:
    """Show the daemon's pid, uptime, worktrees, counters and latencies (exit 3 if none runs)."""
    try:
        with daemon_client(socket_, timeout=10) as client:
            info = client.status()
    except DaemonUnavailable:
        if as_json:
            print_json({"running": False, "socket": str(resolve_socket(socket_))})
        fail(f"no daemon is running on {resolve_socket(socket_)}; start it with "
             "`snapshotd serve` or `snapshotd install-service`", 3)
        return
    except SnapshotdError as exc:
        fail(f"{exc.message} ({exc.code})")
        return
    info["running"] = True
    if as_json:
        print_json(info)
        return
    click.echo(f"snapshotd {info['version']}  pid {info['pid']}  up {info['uptime_s']:.0f}s")
    click.echo(f"home    {info['home']}")
    click.echo(f"socket  {info.get('socket')}")
    c = info["counters"]
    click.echo(f"captures tier1={c['captures_tier1']} tier2={c['captures_tier2']} "
               f"dedups={c['dedups']} errors={c['errors']}")
    gaps = info.get("gaps_by_reason") or {}
    click.echo("gaps    " + (", ".join(f"{k}={v}" for k, v in sorted(gaps.items())) or "none"))
    for attempt in info.get("active_attempts", []):
        click.echo(f"  {attempt['run_id']}/{attempt['node_id']} attempt {attempt['attempt']} "
                   f"{attempt['state']}  {attempt['worktree']}")
