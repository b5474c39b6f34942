"""``snapshotd ui``: the local web app on 127.0.0.1 (runs, timelines, diffs, gaps, restore).

Promises: the web stack is imported only when this command runs, so the core install works
without it; when it is missing the command says to ``pip install 'snapshotd[ui]'`` and exits 1.
It serves on 127.0.0.1 only, prints its sign-in URL on stdout and opens the browser on it
unless ``--no-browser``. That URL (in the browser's argv, visible to every local user through
``ps``) carries only a one-time code (``snapshotd.ui.sessions``), never the long-lived token;
the token, for scripts (``Authorization: Bearer``), is in a 0600 file removed on exit.
"""

from __future__ import annotations

import os
import secrets
import sys
import threading
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
    token_file = _write_token(resolve_home(home), actual, token)
    url = f"http://127.0.0.1:{actual}/login?code={app.mint_code()}"
    click.echo(f"snapshotd ui on {url}")
    click.echo(f"(the code works once, within a minute; the API token for scripts, sent as "
               f"`Authorization: Bearer`, is in {token_file})")
    sys.stdout.flush()
    if not no_browser:
        import webbrowser

        # In a thread: a browser command that does not return (BROWSER=...) must not keep the
        # server from answering it.
        threading.Thread(target=webbrowser.open, args=(url,), daemon=True).start()
    try:
        serve(app, sock, log_level=log_level)
    finally:
        token_file.unlink(missing_ok=True)


def _write_token(home: Path, port: int, token: str) -> Path:
    """The token in ``HOME/ui/PORT.token``, mode 0600 in a 0700 directory."""
    directory = home / "ui"
    try:
        directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(directory, 0o700)
        path = directory / f"{port}.token"
        path.unlink(missing_ok=True)  # a stale file of an earlier instance on this port
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    except OSError as exc:
        fail(f"cannot write the API token file under {directory}: {exc.strerror or exc}")
    with os.fdopen(fd, "w") as out:
        out.write(token + "\n")
    return path
