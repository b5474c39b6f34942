"""``snapshotd handoff RUN --node X``: the manifest another host resumes a node from.

Owns the command-line face of ``snapshotd.features.replication.handoff.build_handoff`` and the reading of a
manifest file for ``attempt begin --resume --handoff FILE`` (``read_manifest``).

Promises: the manifest is compact, versioned JSON (``format``, ``version``, run/node/iteration/
attempt, owner and epoch, the newest checkpoint's commit and tree digests, unresolved gaps,
replication state, next safe action) sealed by a sha256 ``digest`` of its content, so an edited or
damaged manifest is refused. ``--output FILE`` writes it (atomically); ``--json`` prints it;
otherwise a summary is printed. Errors go to stderr with a non-zero exit.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import IO

import click

from snapshotd.cli.common import daemon_or_local, fail, op_options, print_json


def read_manifest(stream: IO[str]) -> dict:
    """A manifest file's content, checked for shape, version and digest (or exit 1)."""
    from snapshotd.core import ServiceError
    from snapshotd.features.replication import check_manifest

    try:
        data = json.loads(stream.read())
        return check_manifest(data)
    except json.JSONDecodeError as exc:
        fail(f"{getattr(stream, 'name', 'the handoff')} is not JSON: {exc}")
    except ServiceError as exc:
        fail(exc.message)
    raise AssertionError("unreachable")


@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", required=True, help="The node to hand off.")
@click.option("--iteration", type=click.IntRange(min=0), default=None,
              help="Iteration (default: the newest).")
@click.option("--attempt", type=click.IntRange(min=1), default=None,
              help="Attempt (default: the newest).")
@click.option("--to", "to", default=None, help="Who takes over (host or owner name, recorded).")
@click.option("--output", "-o", "output", type=click.Path(path_type=Path, dir_okay=False),
              default=None, help="Write the manifest to this file.")
@op_options
def handoff(run_id: str, node_id: str, iteration: int | None, attempt: int | None,
            to: str | None, output: Path | None, home: Path | None, socket_: Path | None,
            as_json: bool) -> None:
    """Write the handoff manifest of RUN's node: where it stands and how to resume elsewhere."""

    def direct(service: object) -> dict:
        from snapshotd.features.replication import build_handoff

        return build_handoff(service, run_id, node_id, iteration=iteration,  # type: ignore[arg-type]
                             attempt=attempt, to=to)

    manifest = daemon_or_local(socket_, home, "handoff", direct, run_id=run_id, node_id=node_id,
                               iteration=iteration, attempt=attempt, to=to)
    if output is not None:
        _write(output, manifest)
    if as_json:
        print_json(manifest)
        return
    cp = manifest.get("checkpoint")
    rep = manifest["replication"]
    click.echo(f"{run_id}/{node_id} iteration {manifest['iteration']} attempt "
               f"{manifest['attempt']} ({manifest['owner']['state']}, epoch {manifest['epoch']})")
    if cp:
        click.echo(f"  newest checkpoint: attempt {cp['attempt']} seq {cp['seq']} commit "
                   f"{cp['commit']} tree {cp['tree']}")
    click.echo(f"  replication: {rep.get('state', 'no-remote')}"
               + (f" on {rep['remote']}" if rep.get("remote") else ""))
    if manifest["gaps_total"]:
        click.echo(f"  unresolved gaps: {manifest['gaps_total']}")
    click.echo(f"  next: {manifest['next_action']}")
    if output is not None:
        click.echo(f"  manifest written to {output}")


def _write(path: Path, manifest: dict) -> None:
    path = path.absolute()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(manifest, f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
