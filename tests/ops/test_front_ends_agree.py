"""The CLI, the MCP server and the web app describe the same pair of checkpoints alike: the same
files with the same statuses, a rename (edited on the way, so found by similarity) included.

Each front end is driven as a user drives it: ``snapshotd diff --json`` and ``--name-status``,
the ``diff_checkpoint`` tool over stdio, ``/api/diff`` and ``/api/checkpoint`` over HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env
from tests.support.mcp_session import call, with_mcp
from tests.support.ui_server import UiServer

# Status letter, path, old path: what every front end must say about seq 0 -> seq 1.
WANT = {("M", "edit.py", None), ("A", "added.txt", None), ("D", "gone.txt", None),
        ("R", "renamed.txt", "moved.txt"), ("M", "keep.sh", None)}

pytestmark = pytest.mark.one_ledger("what the front ends show of one pair of checkpoints")


def two_checkpoints(daemon: Daemon, wt: Path) -> None:
    wt.mkdir()
    (wt / "keep.sh").write_text("echo same\n")
    (wt / "edit.py").write_text("a = 1\nb = 2\n")
    (wt / "gone.txt").write_text("bye\n")
    (wt / "moved.txt").write_text("".join(f"line {i}\n" for i in range(40)))
    with daemon.client() as c:
        c.snapshot(str(wt), run_id="r", node_id="n")
        (wt / "edit.py").write_text("a = 1\nb = 20\n")
        (wt / "added.txt").write_text("hello\n")
        (wt / "gone.txt").unlink()
        # Moved and edited: a rename only a similarity search finds (not the same blob).
        (wt / "moved.txt").rename(wt / "renamed.txt")
        with (wt / "renamed.txt").open("a") as f:
            f.write("one more line\n")
        os.chmod(wt / "keep.sh", 0o755)
        c.snapshot(str(wt), run_id="r", node_id="n")
        c.attempt_end("r", "n")


def described(files: list[dict]) -> set[tuple[str, str, str | None]]:
    return {(f["status"], f["path"], f["old_path"]) for f in files}


def cli(env: Env, *args: str) -> str:
    proc = subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_cli_mcp_and_ui_show_the_same_files(sd_env: Env, daemon: Daemon,
                                            tmp_path: Path) -> None:
    two_checkpoints(daemon, tmp_path / "wt")
    pair = ("diff", "r", "--node", "n", "--seq", "0", "--to-seq", "1")
    from_cli = json.loads(cli(sd_env, *pair, "--json"))["files"]
    assert described(from_cli) == WANT
    names = set()
    for line in cli(sd_env, *pair, "--name-status").splitlines():
        status, *paths = line.split("\t")
        names.add((status, paths[-1], paths[0] if len(paths) == 2 else None))
    assert names == WANT

    got: dict = {}

    async def body(client: object) -> None:
        got["to"] = await call(client, "diff_checkpoint", run_id="r", node_id="n", seq=0,
                               to_seq=1)
        got["changed"] = await call(client, "diff_checkpoint", run_id="r", node_id="n", seq=1)

    with_mcp(sd_env, body)
    assert described(got["to"]["files"]) == WANT
    assert described(got["changed"]["files"]) == WANT

    server = UiServer.start(sd_env)
    try:
        cookie = server.cookie()
        status, pair_view = server.get_json("/api/diff?run=r&node=n&seq=1&a_node=n&a_seq=0",
                                            cookie)
        assert status == 200, pair_view
        status, changed = server.get_json("/api/diff?run=r&node=n&seq=1", cookie)
        assert status == 200, changed
        status, one = server.get_json("/api/checkpoint?run=r&node=n&seq=1", cookie)
        assert status == 200, one
    finally:
        server.stop()
    for view in (pair_view, changed, one):
        assert described(view["files"]) == WANT
    # The same counts too, file by file, and the same patch as the CLI's.
    key = {f["path"]: (f["additions"], f["deletions"], f["binary"]) for f in from_cli}
    assert {f["path"]: (f["additions"], f["deletions"], f["binary"])
            for f in pair_view["files"]} == key
    assert pair_view["patch"] == cli(sd_env, *pair)
