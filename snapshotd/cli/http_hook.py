"""``snapshotd http-hook``: the token and the hook settings for the loopback HTTP endpoint.

Promises: prints the per-user token (``--token``, creating the 0600 token file in the home when
missing; no daemon needed) or a Claude Code ``PostToolUse`` hook entry that POSTs to the endpoint
with it (the default). The entry names the URL the running daemon reports it listens on
(``status`` → ``http_hook.url``), never a configured guess: with no daemon answering (exit 3),
the endpoint off, or its port held by another process, it prints no settings and exits non-zero
with a sentence saying why, so an agent is never configured to send the token to a port the
daemon does not own. Exits 1 with a sentence when the token file is unsafe.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from snapshotd.cli.common import (
    daemon_client,
    fail,
    home_option,
    resolve_home,
    resolve_socket,
    socket_option,
)
from snapshotd.core import ConfigError, load_config
from snapshotd.daemon import HEADER_ENV, HOOK_PATH, TokenError, ensure_token
from snapshotd_client import DaemonUnavailable, SnapshotdError

NOT_RUNNING = 3


@click.command("http-hook")
@home_option
@socket_option
@click.option("--token", "token_only", is_flag=True, help="Print only the token.")
@click.option("--env-token", is_flag=True,
              help="Read the token from $SNAPSHOTD_HOOK_TOKEN in the agent's environment "
                   "instead of writing it into the settings.")
def http_hook(home: Path | None, socket_: Path | None, token_only: bool,
              env_token: bool) -> None:
    """The token and a Claude Code hook entry for the running daemon's HTTP hook endpoint."""
    if token_only:
        click.echo(_token(resolve_home(home)))
        return
    info = _daemon_status(socket_)
    daemon_home = Path(str(info.get("home") or resolve_home(home)))
    if home is not None and resolve_home(home).resolve() != daemon_home.resolve():
        fail(f"the daemon on {resolve_socket(socket_)} keeps its home in {daemon_home}, not "
             f"{resolve_home(home)}; pass the socket of that home's daemon with --socket")
    endpoint = _endpoint(info, socket_)
    token = _token(daemon_home)
    timeout_ms = (info.get("config") or {}).get("hook_timeout_ms")
    if not isinstance(timeout_ms, int):
        try:
            timeout_ms = load_config().hook_timeout_ms
        except ConfigError as exc:
            fail(f"{exc}", 2)
    headers = {"Authorization": "Bearer $SNAPSHOTD_HOOK_TOKEN" if env_token
               else f"Bearer {token}"}
    allowed = ["SNAPSHOTD_HOOK_TOKEN"] if env_token else []
    for header, var in HEADER_ENV.items():
        headers[header] = f"${var}"
        allowed.append(var)
    entry = {"type": "http", "url": endpoint,
             "timeout": max(2, int(timeout_ms) // 1000 + 2), "headers": headers,
             "allowedEnvVars": allowed}
    matcher = "^(Write|Edit|MultiEdit|NotebookEdit|Bash|mcp__.*)$"
    settings = {"hooks": {event: [{"matcher": matcher, "hooks": [entry]}]
                          for event in ("PostToolUse", "PostToolUseFailure")}}
    click.echo(json.dumps(settings, indent=2))


def _token(root: Path) -> str:
    try:
        root.mkdir(mode=0o700, parents=True, exist_ok=True)
        return ensure_token(root)
    except (OSError, TokenError) as exc:
        fail(f"{exc}")
    raise AssertionError("unreachable")


def _daemon_status(socket_: Path | None) -> dict:
    try:
        with daemon_client(socket_, timeout=10) as client:
            return client.status()
    except DaemonUnavailable:
        fail(f"no daemon answers on {resolve_socket(socket_)}: the HTTP hook's port is the "
             "running daemon's, so start it (`snapshotd serve` or `snapshotd install-service`, "
             "with http_hook = true) and run this again; no settings printed", NOT_RUNNING)
    except SnapshotdError as exc:
        fail(f"{exc.message} ({exc.code})")
    raise AssertionError("unreachable")


def _endpoint(info: dict, socket_: Path | None) -> str:
    """The URL the daemon listens on, or a refusal saying why it listens nowhere."""
    hook = info.get("http_hook")
    if not isinstance(hook, dict):
        fail(f"the daemon on {resolve_socket(socket_)} has its HTTP hook endpoint off: set "
             "http_hook = true in its config.toml (or SNAPSHOTD_HTTP_HOOK=1), restart it and "
             "run this again; no settings printed")
    elif not hook.get("enabled"):
        fail(f"the daemon's HTTP hook endpoint is off ({hook.get('reason', 'unknown')}): "
             f"{hook.get('error', '')}; no settings printed (an agent would send its token to "
             "a port the daemon does not own)")
    url = hook.get("url") if isinstance(hook, dict) else None
    if not isinstance(url, str) or not url.startswith("http://127.0.0.1:") \
            or not url.endswith(HOOK_PATH):
        fail(f"the daemon reports no usable HTTP hook URL ({url!r}); no settings printed")
    return str(url)
