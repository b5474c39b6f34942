"""``snapshotd attempt begin | end``: open and close attempts, for engines and scripts.

Owns the command-line face of the thin engine (``snapshotd.features.engine``): ``begin`` registers an
attempt on a worktree (superseding the one active there), ``end`` flushes, records the final
pointer and the end time, and stops watching.

Promises: ``begin --env`` prints only ``export SNAPSHOTD_…=…`` lines, each value shell-quoted, so
``eval "$(snapshotd attempt begin … --env)"`` is safe for any path; ``--json`` prints the attempt
row; errors go to stderr with a non-zero exit (3 when no daemon answers).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

import click

from snapshotd.cli.common import call_daemon, json_option, print_json, resolve_socket, socket_option


def attempt_env(attempt: dict, socket: Path, home: str | None) -> dict[str, str]:
    """The ``SNAPSHOTD_*`` environment an agent process of this attempt runs with (its hooks
    inherit it, so their captures land in this attempt)."""
    env = {
        "SNAPSHOTD_RUN_ID": str(attempt["run_id"]),
        "SNAPSHOTD_NODE_ID": str(attempt["node_id"]),
        "SNAPSHOTD_ITERATION": str(attempt["iteration"]),
        "SNAPSHOTD_ATTEMPT": str(attempt["attempt"]),
        "SNAPSHOTD_SOCKET": os.path.abspath(socket),
    }
    if home:
        env["SNAPSHOTD_HOME"] = str(home)
    return env


def describe(attempt: dict) -> str:
    return (f"{attempt['run_id']}/{attempt['node_id']} iteration {attempt['iteration']} "
            f"attempt {attempt['attempt']}")


@click.group()
def attempt() -> None:
    """Open and close attempts (who works where, since when, how it ended)."""


@attempt.command("begin")
@click.option("--run", "run_id", required=True, help="Run id.")
@click.option("--node", "node_id", required=True, help="Node (task) id within the run.")
@click.option("--iteration", type=click.IntRange(min=0), default=0, show_default=True,
              help="Iteration of the node.")
@click.option("--attempt", "number", type=click.IntRange(min=1), default=None,
              help="Attempt number (default: one more than the node's last).")
@click.option("--cwd", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=".", show_default=True, help="The worktree the attempt works in.")
@click.option("--owner-pid", type=click.IntRange(min=1), default=None,
              help="Process that owns the attempt; when it is gone the attempt is abandoned.")
@click.option("--settle-ms", type=click.IntRange(min=1), default=None,
              help="Tier-2 quiet period for this worktree.")
@click.option("--max-wait-ms", type=click.IntRange(min=1), default=None,
              help="Tier-2 longest wait while writes never go quiet.")
@click.option("--resume", is_flag=True,
              help="First restore the worktree to the previous attempt's newest checkpoint.")
@click.option("--handoff", "handoff_file", type=click.File("r"), default=None,
              help="With --resume: a manifest from `snapshotd handoff` on another host; every "
                   "digest is verified (fetching from the remote as needed) before restoring.")
@click.option("--env", "as_env", is_flag=True, help="Print `export SNAPSHOTD_…=…` lines.")
@json_option
@socket_option
def begin(run_id: str, node_id: str, iteration: int, number: int | None, cwd: Path,
          owner_pid: int | None, settle_ms: int | None, max_wait_ms: int | None, resume: bool,
          handoff_file: click.utils.LazyFile | None, as_env: bool, as_json: bool,
          socket_: Path | None) -> None:
    """Register an attempt on a worktree, superseding the one active there, and watch it."""
    if as_env and as_json:
        raise click.UsageError("choose one of --json and --env")
    handoff = None
    if handoff_file is not None:
        from snapshotd.cli.handoff import read_manifest

        if not resume:
            raise click.UsageError("--handoff goes with --resume")
        handoff = read_manifest(handoff_file)
    result = call_daemon(socket_, "attempt_begin", run_id=run_id, node_id=node_id,
                         iteration=iteration, attempt=number, cwd=str(cwd.resolve()),
                         owner_pid=owner_pid, settle_ms=settle_ms, max_wait_ms=max_wait_ms,
                         resume=resume or None, handoff=handoff)
    if as_json:
        print_json(result)
        return
    if as_env:
        home = call_daemon(socket_, "ping").get("home")
        for name, value in attempt_env(result, resolve_socket(socket_), home).items():
            click.echo(f"export {name}={shlex.quote(value)}")
        return
    line = f"began {describe(result)} in {result['worktree']} (epoch {result['epoch']})"
    if result.get("superseded"):
        line += "; superseded " + ", ".join(result["superseded"])
    resumed = result.get("resumed_from")
    if resumed:
        line += f"; resumed from attempt {resumed['attempt']} seq {resumed['seq']}"
    if result.get("handoff"):
        verified = result["handoff"]["verified"]
        line += (f"; handoff verified (commit {verified['commit'][:12]}, tree "
                 f"{verified['tree'][:12]})")
    click.echo(line)


@attempt.command("end")
@click.option("--run", "run_id", required=True, help="Run id.")
@click.option("--node", "node_id", required=True, help="Node (task) id within the run.")
@click.option("--iteration", type=click.IntRange(min=0), default=0, show_default=True,
              help="Iteration of the node.")
@click.option("--attempt", "number", type=click.IntRange(min=1), default=None,
              help="Attempt number (default: the node's newest).")
@click.option("--status", type=click.Choice(["finished", "failed", "cancelled"]), required=True,
              help="How the attempt ended.")
@json_option
@socket_option
def end(run_id: str, node_id: str, iteration: int, number: int | None, status: str,
        as_json: bool, socket_: Path | None) -> None:
    """Flush pending captures, record the final pointer and end time, stop watching."""
    result = call_daemon(socket_, "attempt_end", run_id=run_id, node_id=node_id,
                         iteration=iteration, attempt=number, status=status)
    if as_json:
        print_json(result)
        return
    final = (result.get("final_commit") or "")[:12] or "no checkpoint"
    line = f"{describe(result)}: {result['state']} (final {final})"
    if result["state"] != status:
        line += f"; it had already ended as {result['state']}"
    click.echo(line)
