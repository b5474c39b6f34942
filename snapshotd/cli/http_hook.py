"""``snapshotd http-hook``: the token and the hook settings for the loopback HTTP endpoint.

Promises: prints the per-user token (``--token``) or a Claude Code ``PostToolUse`` hook entry
that POSTs to the endpoint with it (the default), creating the 0600 token file in the home when
missing; exits 1 with a sentence saying what to do when the token file is unsafe.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from snapshotd.cli.common import fail, home_option, resolve_home
from snapshotd.core import ConfigError, load_config
from snapshotd.daemon import HEADER_ENV, HOOK_PATH, TokenError, ensure_token


@click.command("http-hook")
@home_option
@click.option("--token", "token_only", is_flag=True, help="Print only the token.")
@click.option("--env-token", is_flag=True,
              help="Read the token from $SNAPSHOTD_HOOK_TOKEN in the agent's environment "
                   "instead of writing it into the settings.")
def http_hook(home: Path | None, token_only: bool, env_token: bool) -> None:
    """The token and a Claude Code hook entry for the HTTP hook endpoint."""
    root = resolve_home(home)
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        token = ensure_token(root)
        config = load_config()
    except (OSError, TokenError, ConfigError) as exc:
        fail(f"{exc}")
    if token_only:
        click.echo(token)
        return
    port = config.http_hook_port or 47681
    headers = {"Authorization": "Bearer $SNAPSHOTD_HOOK_TOKEN" if env_token
               else f"Bearer {token}"}
    allowed = ["SNAPSHOTD_HOOK_TOKEN"] if env_token else []
    for header, var in HEADER_ENV.items():
        headers[header] = f"${var}"
        allowed.append(var)
    entry = {"type": "http", "url": f"http://127.0.0.1:{port}{HOOK_PATH}",
             "timeout": max(2, config.hook_timeout_ms // 1000 + 2), "headers": headers,
             "allowedEnvVars": allowed}
    matcher = "^(Write|Edit|MultiEdit|NotebookEdit|Bash|mcp__.*)$"
    settings = {"hooks": {event: [{"matcher": matcher, "hooks": [entry]}]
                          for event in ("PostToolUse", "PostToolUseFailure")}}
    if not config.http_hook:
        click.echo("# the endpoint is off: set http_hook = true in the daemon's config.toml",
                   err=True)
    click.echo(json.dumps(settings, indent=2))
