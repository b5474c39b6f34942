"""The local web app of ``snapshotd ui``: runs, timelines, checkpoints, diffs, gaps, restore.

An optional part (``pip install 'snapshotd[ui]'``: starlette and uvicorn); the core never
imports this package. ``app`` holds the routes and the server, ``security`` the token, Host and
CSRF guard, ``data`` the read-only views, ``actions`` restore/export/blame, ``gap_help`` what
each gap reason means, ``screenshots`` the script that renders docs/ui.md's pictures.
"""
