"""``snapshotd push [RUN]``: replicate checkpoints to the configured git remote now.

Owns the command-line face of the forced push (docs/scale-out.md): through the daemon when one
answers (its pusher does the work and its lag table is updated), else directly on the home under
the daemon's lock. Every local attempt ref (of RUN, or of every run) that the remote lacks or
holds at an ancestor is pushed; refs another host moved elsewhere are listed, never overwritten.

A checkpoint holding a secret is withheld (``snapshotd.features.withhold``): ``--release COMMIT`` (a
checkpoint's commit, as ``status`` lists it under ``withheld``) or ``--release-path PATH`` (a
worktree path, in every checkpoint) lets it go, after review, with this push.

Promises: exits 0 once the remote holds every pushable ref; 1 with a sentence on stderr when no
remote is configured or the remote cannot be reached; ``--json`` prints the result map. A
release is recorded before the push and said so; with no remote configured it is all that
could be done, and that is what was asked: exit 0, saying nothing was pushed.
"""

from __future__ import annotations

from pathlib import Path

import click

from snapshotd.cli.common import fail, op_options, print_json, resolve_home, run_call


@click.command()
@click.argument("run_id", required=False)
@op_options
@click.option("--release", "releases", multiple=True, metavar="COMMIT",
              help="Let this withheld checkpoint (and its secret) be pushed.")
@click.option("--release-path", "release_paths", multiple=True, metavar="PATH",
              help="Let checkpoints be pushed although this worktree path holds a secret.")
def push(run_id: str | None, home: Path | None, socket_: Path | None, as_json: bool,
         releases: tuple[str, ...], release_paths: tuple[str, ...]) -> None:
    """Push RUN's checkpoints (default: every run's) to the configured remote now."""
    released = bool(releases or release_paths)
    if released:
        where = _release(resolve_home(home), releases, release_paths)
        if not as_json:
            click.echo(f"released {', '.join(releases + release_paths)}: recorded in {where} "
                       "(export and replication let it go)")

    def direct(service: object) -> dict:
        from snapshotd.features.replication import push_now

        return push_now(service, _checked(run_id))  # type: ignore[arg-type]

    def push_op() -> dict:
        from snapshotd.core import NO_REMOTE, ServiceError
        from snapshotd.ops import run_op

        try:
            return run_op("push", {"run_id": run_id}, direct, home=home, socket=socket_,
                          require_ledger=False)
        except ServiceError as exc:
            if not released or exc.code != NO_REMOTE:
                raise
            return {"released": True, "pushed": [], "remote": None, "no_remote": exc.message}

    result = run_call(push_op)
    if as_json:
        print_json(result)
        return
    if result.get("no_remote"):
        click.echo(f"nothing pushed: {result['no_remote']}")
        return
    pushed = result.get("pushed", [])
    click.echo(f"pushed {len(pushed)} attempt ref(s) to {result.get('remote')}"
               + (f"; {result['unpushed']} checkpoint(s) still pending"
                  if result.get("unpushed") else ""))
    for ref in pushed:
        click.echo(f"  {ref['run_id']}/{ref['node_id']} iteration {ref['iteration']} attempt "
                   f"{ref['attempt']} at {ref['commit'][:12]}")
    for d in result.get("diverged", []):
        click.echo(f"  not pushed: {d['run_id']}/{d['node_id']}/{d['iteration']}/{d['attempt']}: "
                   f"the remote holds {d['remote'][:12]}, which this store does not descend "
                   f"from (another host's history)", err=True)


def _release(home: Path, commits: tuple[str, ...], paths: tuple[str, ...]) -> Path:
    """Record the releases in the home's release file; its path."""
    from snapshotd.features import RELEASES_FILE, release

    for commit in commits:
        if len(commit) != 40 or any(c not in "0123456789abcdef" for c in commit):
            fail(f"--release takes a checkpoint's full commit id, got {commit!r}")
    if not home.is_dir():
        fail(f"no snapshotd home at {home}")
    release(home, commits=commits, paths=paths)
    return home / RELEASES_FILE


def _checked(run_id: str | None) -> str | None:
    from snapshotd.core import id_field

    return None if run_id is None else id_field("run_id", run_id)
