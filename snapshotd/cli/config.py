"""``snapshotd config``: the effective configuration and where each value came from.

Promises: the values are exactly what ``snapshotd serve`` started from this shell would use
(``load_config`` with this environment and the same file); each names its source (``default``,
``file <path>``, ``env <VAR>``); an unreadable file, an unknown key or a bad value exits 2 with
the ``ConfigError`` sentence, which names the key. Per-worktree overrides
(``[worktree."/abs/path"]`` tables) are listed one setting a line, as
``worktree."<real path>".<key>``, and under ``settings.worktree`` in ``--json``. A running daemon's own policy (it may have
started with another environment) is in ``snapshotd status``.
"""

from __future__ import annotations

import click

from snapshotd.cli.common import fail, json_option, print_json
from snapshotd.core import ENV_VARS, ConfigError, config_path, load_config

BAD_CONFIG = 2


@click.command()
@json_option
def config(as_json: bool) -> None:
    """Print the effective configuration and the source of each value (exit 2 if invalid)."""
    path = config_path()
    try:
        effective = load_config()
    except ConfigError as exc:
        fail(f"invalid configuration: {exc}", BAD_CONFIG)
        return
    values = effective.as_dict()
    settings = {
        name: {"value": list(value) if isinstance(value, tuple) else value,
               "source": effective.sources.get(name, "default"),
               "env": ENV_VARS.get(name)}
        for name, value in values.items()
    }
    if as_json:
        print_json({"file": str(path), "file_exists": path.is_file(), "settings": settings})
        return
    click.echo(f"config file: {path}" + ("" if path.is_file() else "  (not present; defaults)"))
    rows = _rows(settings)
    width = max(len(name) for name, _, _ in rows)
    value_width = min(max(len(value) for _, value, _ in rows), 40)
    for name, value, source in rows:
        click.echo(f"{name:<{width}}  {value:<{value_width}}  {source}")


def _rows(settings: dict[str, dict]) -> list[tuple[str, str, str]]:
    """(name, value, source) lines: each per-worktree override is a line of its own."""
    rows = []
    for name, setting in settings.items():
        if name == "worktree":
            for path, table in setting["value"].items():
                rows.extend((f'worktree."{path}".{key}', _show(value), setting["source"])
                            for key, value in table.items())
        else:
            rows.append((name, _show(setting["value"]), setting["source"]))
    return rows


def _show(value: object) -> str:
    if isinstance(value, list):
        return "[" + ", ".join(repr(v) for v in value) + "]"
    return str(value)
