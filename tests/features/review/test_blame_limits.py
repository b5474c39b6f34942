"""Blame of a big file is bounded: past ``blame_max_lines``/``blame_max_bytes`` it is refused
with a reason (CLI exit 1, web app 400 JSON), and a range (``--lines A,B``, the web app's
pages) returns only its lines (test_blame.py checks lines against ``git blame``).

Real daemon (``make_daemon`` with the limits in its environment, as a config would set them),
``snapshotd blame`` and ``snapshotd ui`` as subprocesses; no timing is asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, make_git_worktree
from tests.support.review_replay import cli

BIG = 200_001  # one past the default blame_max_lines


def two_checkpoints(daemon, wt: Path, lines: int) -> None:
    """``big.txt`` of ``lines`` lines, then its line 3 changed: seq 0 and seq 1."""
    text = [f"{i}" for i in range(1, lines + 1)]
    with daemon.client() as c:
        (wt / "big.txt").write_text("\n".join(text) + "\n")
        c.snapshot(str(wt), run_id="r", node_id="n", tool_use_id="t0", label="write big")
        text[2] = "changed"
        (wt / "big.txt").write_text("\n".join(text) + "\n")
        c.snapshot(str(wt), run_id="r", node_id="n", tool_use_id="t1", label="edit line 3")


def test_a_file_past_the_default_line_limit_is_refused_and_a_range_is_not(
        sd_env: Env, make_daemon: MakeDaemon, tmp_path: Path) -> None:
    daemon = make_daemon(sd_env, QUIET_WATCHER)
    wt = make_git_worktree(tmp_path / "wt")
    two_checkpoints(daemon, wt, BIG)
    whole = cli(sd_env, "blame", "r", "big.txt", "--node", "n", "--json")
    assert whole.returncode == 1 and whole.stdout == ""
    assert "200001 lines, over blame_max_lines = 200000" in whole.stderr
    assert "--lines A,B" in whole.stderr
    part = cli(sd_env, "blame", "r", "big.txt", "--node", "n", "--lines", "2,4", "--json")
    assert part.returncode == 0, part.stderr
    got = json.loads(part.stdout)
    assert (got["first_line"], got["last_line"], got["total_lines"]) == (2, 4, BIG)
    assert [(x["line"], x["text"], x["seq"]) for x in got["lines"]] == [
        (2, "2", 0), (3, "changed", 1), (4, "4", 0)]
    tail = cli(sd_env, "blame", "r", "big.txt", "--node", "n", "-L", f"{BIG - 1},")
    assert tail.returncode == 0, tail.stderr
    assert [line.split(")")[1].strip() for line in tail.stdout.splitlines()] == [
        str(BIG - 1), str(BIG)]
    bad = cli(sd_env, "blame", "r", "big.txt", "--node", "n", "--lines", "5,2")
    assert bad.returncode == 2 and "--lines" in bad.stderr
    past = cli(sd_env, "blame", "r", "big.txt", "--node", "n", "--lines", f"{BIG + 1},")
    assert past.returncode == 1 and f"has {BIG} lines" in past.stderr


def test_the_byte_limit_and_the_web_apps_pages(sd_env: Env, make_daemon: MakeDaemon,
                                                tmp_path: Path) -> None:
    pytest.importorskip("starlette")
    from tests.support.ui_server import UiServer

    daemon = make_daemon(sd_env, dict(QUIET_WATCHER, SNAPSHOTD_BLAME_MAX_BYTES="4000"))
    wt = make_git_worktree(tmp_path / "wt")
    two_checkpoints(daemon, wt, 5000)  # 23,894 bytes
    (wt / "wide.txt").write_text("x" * 5000 + "\nshort\n")
    with daemon.client() as c:
        c.snapshot(str(wt), run_id="r", node_id="n", tool_use_id="t2", label="write wide")
    whole = cli(sd_env, "blame", "r", "big.txt", "--node", "n")
    assert whole.returncode == 1 and "over blame_max_bytes = 4000" in whole.stderr
    server = UiServer.start(sd_env)
    try:
        cookie = server.cookie()
        sel = "run=r&node=n&iteration=0&attempt=1&path=big.txt"
        status, page = server.get_json(f"/api/blame?{sel}&offset=1&limit=3", cookie)
        assert status == 200, page
        assert page["total_lines"] == 5000 and (page["first_line"], page["last_line"]) == (2, 4)
        assert [(x["line"], x["text"], x["seq"]) for x in page["lines"]] == [
            (2, "2", 0), (3, "changed", 1), (4, "4", 0)]
        status, last = server.get_json(f"/api/blame?{sel}&offset=4990&limit=100", cookie)
        assert status == 200 and [x["line"] for x in last["lines"]] == list(range(4991, 5001))
        # The default page is bounded too; a page past the byte limit is refused with a reason.
        status, first = server.get_json(f"/api/blame?{sel}", cookie)
        assert status == 400 and first["error"] == "bad-request"
        assert "blame_max_bytes" in first["message"]
        status, wide = server.get_json("/api/blame?run=r&node=n&path=wide.txt&limit=1", cookie)
        assert status == 400 and "5001 bytes of text, over blame_max_bytes" in wide["message"]
        status, bad = server.get_json(f"/api/blame?{sel}&limit=100000", cookie)
        assert status == 400 and "limit" in bad["message"]
    finally:
        server.stop()
