"""The web app's "undo this tool call" / "undo this session": a preview that changes nothing,
then the revert on confirmation, with its undo command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env
from tests.support.ui_server import UiServer

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")
pytestmark = pytest.mark.one_ledger("the web app's revert (the revert: test_revert_*)")


def test_undo_this_tool_call_previews_then_reverts(sd_env: Env, daemon: Daemon,
                                                   tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    lines = [f"line {n}\n" for n in range(1, 21)]
    (wt / "f.txt").write_text("".join(lines))
    with daemon.client() as c:
        c.snapshot(str(wt), run_id="r", node_id="n", label="base", tool_use_id="toolu_0")
        (wt / "f.txt").write_text("".join(["first\n", *lines[1:]]))
        c.snapshot(str(wt), run_id="r", node_id="n", label="Edit 1", tool_use_id="toolu_1")
        (wt / "f.txt").write_text("".join(["first\n", *lines[1:19], "last\n"]))
        c.snapshot(str(wt), run_id="r", node_id="n", label="Edit 20", tool_use_id="toolu_2")
    server = UiServer.start(sd_env)
    try:
        cookie, csrf = server.login()
        good = {"Cookie": cookie, "X-CSRF-Token": csrf}
        body = {"run": "r", "node": "n", "iteration": 0, "attempt": 1, "seq": 1,
                "scope": "tool_call", "tool_call": "toolu_1", "force": True}
        status, _, raw = server.request("POST", "/api/revert", headers=good, body=body)
        preview = json.loads(raw)
        assert status == 200 and preview["confirmed"] is False, raw
        assert [(p["path"], p["status"]) for p in preview["paths"]] == [("f.txt", "merged")]
        assert (wt / "f.txt").read_text().startswith("first\n")
        status, _, raw = server.request("POST", "/api/revert", headers=good,
                                        body=dict(body, confirm=True))
        done = json.loads(raw)
        assert status == 200 and done["applied"], raw
        assert (wt / "f.txt").read_text() == "".join([*lines[:19], "last\n"])
        assert done["undo_command"]
        status, _, raw = server.request("POST", "/api/revert", headers=good,
                                        body=dict(body, scope="nonsense"))
        assert status == 400, raw
    finally:
        server.stop()
