"""``snapshotd ui``: the local web app on 127.0.0.1 (runs, timelines, diffs, gaps, restore).

Promises: the web stack is imported only when this command runs, so the core install works
without it; when it is missing the command says to ``pip install 'snapshotd[ui]'`` and exits 1.
It serves on 127.0.0.1 only, prints its URL (with the random token every request needs) on
stdout, and opens the browser unless ``--no-browser``.
"""

from __future__ import annotations

import secrets
import sys
from pathlib import Path

import click

from snapshotd.cli.common import fail, home_option, resolve_home, socket_option

INSTALL_HINT = "pip install 'snapshotd[ui]'"


@click.command()
@home_option
@socket_option
@click.option("--port", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Port on 127.0.0.1 (0: any free port).")
@click.option("--no-browser", is_flag=True, help="Print the URL; do not open a browser.")
@click.option("--log-level", default="warning", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
def ui(home: Path | None, socket_: Path | None, port: int, no_browser: bool,
       log_level: str) -> None:
    """Serve the web app: runs, a run's timeline, checkpoints and diffs, gaps, restore."""
    try:
        from snapshotd.ui import bind, create_app, serve
    except ModuleNotFoundError as exc:
        if exc.name is not None and exc.name.split(".")[0] in ("starlette", "uvicorn", "anyio"):
            fail(f"the web app needs starlette and uvicorn, which are not installed; install "
                 f"them with `{INSTALL_HINT}`")
        raise
    from snapshotd.daemon import setup_logging

    setup_logging(log_level)
    try:
        sock = bind(port)
    except OSError as exc:
        fail(f"cannot listen on 127.0.0.1:{port}: {exc.strerror or exc}; pick another --port")
    actual = sock.getsockname()[1]
    token = secrets.token_urlsafe(32)
    app = create_app(home=resolve_home(home), socket=socket_, token=token, port=actual,
                     explicit_home=home is not None)
    url = f"http://127.0.0.1:{actual}/?token={token}"
    click.echo(f"snapshotd ui on {url}")
    sys.stdout.flush()
    if not no_browser:
        import webbrowser

        webbrowser.open(url)
    serve(app, sock, log_level=log_level)
