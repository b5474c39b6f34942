"""``snapshotd native-hook``: build ``snapshot-hook-native``, the hook without a Python start-up.

Promises: compiles ``client/native/snapshot_hook.c`` with the machine's C compiler into this
environment's scripts directory (or ``-o``), prints the path and the command agents' hook
settings should name; exits 1 with a sentence saying what to do when it cannot (no compiler,
no installed ``snapshot-hook``, a compiler error). ``--json`` prints ``{"path", "fallback"}``.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from snapshotd.cli.common import fail
from snapshotd.daemon import BuildError, build, python_hook


@click.command("native-hook")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Where to write the program (default: beside snapshot-hook).")
@click.option("--fallback", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="The Python snapshot-hook it hands payloads over to (default: this "
                   "environment's).")
@click.option("--cc", "compiler", default=None, help="The C compiler (default: $CC, else cc).")
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def native_hook(output: Path | None, fallback: Path | None, compiler: str | None,
                as_json: bool) -> None:
    """Build snapshot-hook-native: tool calls cost no Python start-up (docs/agents.md)."""
    try:
        path = build(output, fallback=fallback, compiler=compiler)
    except (BuildError, OSError) as exc:
        fail(f"native hook not built: {exc}")
    handed = str(fallback.absolute() if fallback else python_hook())
    if as_json:
        click.echo(json.dumps({"path": str(path), "fallback": handed}))
        return
    click.echo(f"built {path}")
    click.echo(f"name it in the agents' hook settings in place of snapshot-hook (it hands "
               f"everything but the fast path to {handed})")
