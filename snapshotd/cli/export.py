"""``snapshotd export RUN --node X (--branch NAME [--squash] [--repo DIR] | --patches DIR)``.

Owns the command line of export: the agent's checkpoints as commits on a new branch of the
user's repository, or as a ``git am``-able series (``snapshotd.features.review.export``), through
``snapshotd.ops.operations.Operations.export``: the daemon when one answers, else the home. An
export that would write an unreleased secret is refused (``secret-held``) unless
``--allow-secrets``, which then says on stderr what went out.
"""

from __future__ import annotations

from pathlib import Path

import click

from snapshotd.cli.common import (
    attempt_options,
    call_or_fail,
    node_or_only,
    op_options,
    operations,
    print_json,
)
from snapshotd.core import finding_text


@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", default=None,
              help="The node whose checkpoints to export (default: the run's only node).")
@click.option("--from-seq", type=click.IntRange(min=0), default=None,
              help="Export the checkpoints after this one (default: from the first).")
@click.option("--to-seq", type=click.IntRange(min=0), default=None,
              help="Export up to this checkpoint (default: the newest).")
@click.option("--branch", default=None, help="Create this new branch in the repository.")
@click.option("--squash", is_flag=True, help="One commit for the whole range.")
@click.option("--repo", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="The repository to write the branch into (default: the worktree's).")
@click.option("--patches", type=click.Path(path_type=Path, file_okay=False), default=None,
              help="Write a `git am`-able series into this new or empty directory instead.")
@click.option("--allow-secrets", is_flag=True,
              help="Export although a file in it holds a secret finding nobody released "
                   "(default: refuse; release after review with `snapshotd push --release`).")
@attempt_options
@op_options
def export(run_id: str, node_id: str | None, from_seq: int | None, to_seq: int | None,
           branch: str | None, squash: bool, repo: Path | None, patches: Path | None,
           allow_secrets: bool, iteration: int | None, attempt: int | None, home: Path | None,
           socket_: Path | None, as_json: bool) -> None:
    """Export an attempt's checkpoints as commits on a new branch (one per checkpoint, or one
    with --squash) whose first parent is the commit HEAD pointed at when the attempt began, or
    as patches. Only objects and the new branch are written: never HEAD, the index, the working
    tree, the config or an existing branch. Refused, before anything is written, when a file
    it would write holds a secret finding that was not released (see `snapshotd push
    --release`), unless --allow-secrets."""
    node_id = node_or_only(home, run_id, node_id)
    if (branch is None) == (patches is None):
        raise click.UsageError("give --branch NAME or --patches DIR, one of the two")
    if repo is not None and patches is not None:
        raise click.UsageError("--repo goes with --branch")
    fields = {"run_id": run_id, "node_id": node_id, "from_seq": from_seq, "to_seq": to_seq,
              "branch": branch, "squash": squash, "iteration": iteration, "attempt": attempt,
              "repo": str(repo.absolute()) if repo else None,
              "patches": str(patches.absolute()) if patches else None,
              "allow_secrets": allow_secrets}
    result = call_or_fail(operations(home, socket_).export, fields)
    if result.get("secrets"):
        click.echo(f"exported {len(result['secrets'])} unreleased secret finding(s) "
                   "(--allow-secrets): " + ", ".join(
                       f"seq {f['seq']} {finding_text(f)}"
                       for f in result["secrets"]), err=True)
    if as_json:
        print_json(result)
        return
    base = (result["base"] or "")[:12] or "no parent"
    for c in result["commits"]:
        click.echo(f"{c['commit'][:12]}  {c['subject']}")
    if result["skipped"]:
        click.echo(f"(no commit for unchanged checkpoints: {result['skipped']})")
    if branch is not None:
        click.echo(f"created branch {branch} in {result['repo']}: {len(result['commits'])} "
                   f"commit(s) on {base} ({result['base_source']}); "
                   f"see `git log {branch}`")
    else:
        click.echo(f"wrote {len(result['files'])} patch(es) to {result['patches']} on {base} "
                   f"({result['base_source']}); apply with `git am {result['patches']}/*.patch`")
