"""The local web app of ``snapshotd ui`` (runs, timelines, checkpoints, diffs, gaps, restore): an
optional part (``pip install 'snapshotd[ui]'``) that nothing below the front ends imports."""

# ``app``: the routes and the server; ``security``: the sign-in, Host and CSRF guard (``sessions``:
# one-time codes, cookie sessions, their CSRF values); ``data``: the
# read-only views; ``actions``: restore/export/blame; ``gap_help``: what each gap reason means;
# ``screenshots``: the script that renders docs/ui.md's pictures.

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "app": ("bind", "create_app", "serve"),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
