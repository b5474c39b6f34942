"""The web app over HTTP: the sign-in, Host and CSRF guard, the JSON views and the restore preview,
against ``snapshotd ui`` as a real subprocess beside a real daemon (the browser tests are in
test_ui_browser.py)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from snapshotd.ui.gap_help import GAP_HELP, help_for
from tests.conftest import REPO, Daemon, Env, make_git_worktree
from tests.support.helpers import git
from tests.support.ui_server import UiServer

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")


@pytest.fixture
def ui(sd_env: Env, daemon: Daemon, tmp_path: Path) -> Iterator[UiServer]:
    wt = tmp_path / "wt"
    wt.mkdir()
    with daemon.client() as c:
        for i, text in enumerate(("one\n", "one\ntwo\n", "one\ntwo\nthree\n")):
            (wt / "f.txt").write_text(text)
            c.snapshot(str(wt), run_id="r", node_id="n", label=f"Edit f.txt #{i}",
                       tool_use_id=f"toolu_{i}")
    server = UiServer.start(sd_env)
    yield server
    server.stop()


def test_every_readme_gap_reason_has_help() -> None:
    text = (REPO / "README.md").read_text()
    section = text.split("## Troubleshooting by gap reason", 1)[1].split("\n## ", 1)[0]
    reasons = set()
    for line in section.splitlines():
        if line.startswith("| `"):
            reasons.update(re.findall(r"`([a-z-]+)`", line.split("|")[1]))
    assert len(reasons) > 15
    assert reasons <= set(GAP_HELP), sorted(reasons - set(GAP_HELP))
    assert "report it" in help_for("no-such-reason")["todo"]


def test_sign_in_host_and_csrf_are_required(ui: UiServer) -> None:
    status, _, body = ui.request("GET", "/")
    assert status == 403 and b"sign in" in body
    # The token in a URL is no sign-in (no URL carries it); as a bearer header it is.
    status, _, _ = ui.request("GET", "/?token=" + ui.token)
    assert status == 403
    assert ui.request("GET", "/api/runs",
                      headers={"Authorization": "Bearer " + "x" * len(ui.token)})[0] == 403
    # A good code with a foreign Host (DNS rebinding) is still refused.
    status, _, body = ui.request("GET", "/login?code=" + ui.login_code(),
                                 headers={"Host": "evil.test"})
    assert status == 403 and b"Host" in body
    status, _, _ = ui.request("GET", "/static/app.js", headers={"Host": f"localhost:{ui.port}"})
    assert status == 403
    status, headers, _ = ui.request("GET", "/login?code=" + ui.login_code())
    assert status == 303 and "HttpOnly" in headers["set-cookie"]
    assert "SameSite=Strict" in headers["set-cookie"]
    cookie, csrf = ui.login()
    status, headers, body = ui.request("GET", "/", headers={"Cookie": cookie})
    assert status == 200 and csrf.encode() in body
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    status, _, _ = ui.request("GET", "/api/runs", headers={"Cookie": cookie,
                                                           "Host": "attacker.example"})
    assert status == 403
    plan = {"run": "r", "node": "n", "seq": 0, "iteration": 0, "attempt": 1}
    status, _, body = ui.request("POST", "/api/restore", headers={"Cookie": cookie}, body=plan)
    assert status == 403 and b"CSRF" in body
    good = {"Cookie": cookie, "X-CSRF-Token": csrf}
    status, _, _ = ui.request("POST", "/api/restore", body=plan,
                              headers=dict(good, Origin="http://evil.test"))
    assert status == 403
    status, _, _ = ui.request("DELETE", "/api/runs", headers=good)
    assert status == 403
    status, _, body = ui.request("POST", "/api/restore", headers=good, body=plan)
    assert status == 200, body
    result = json.loads(body)
    # Without confirm it is the plan only.
    assert result["dry_run"] is True and result["applied"] is False and result["counts"]["M"] == 1
    # A script with the token as a bearer needs no CSRF value (no browser sends it by itself).
    status, _, body = ui.request("POST", "/api/restore", body=plan,
                                 headers={"Authorization": "Bearer " + ui.token})
    assert status == 200, body


def test_serves_on_loopback_only(ui: UiServer) -> None:
    listening = [c for c in psutil.Process(ui.proc.pid).net_connections(kind="inet")
                 if c.status == psutil.CONN_LISTEN]
    assert listening and all(c.laddr.ip == "127.0.0.1" for c in listening)


def test_views(ui: UiServer) -> None:
    cookie = ui.cookie()
    status, runs = ui.get_json("/api/runs", cookie)
    assert status == 200 and [r["run_id"] for r in runs["runs"]] == ["r"]
    assert runs["runs"][0]["checkpoints"] == 3 and sum(runs["runs"][0]["strip"]) == 3
    assert runs["runs"][0]["agent"] == "" and runs["runs"][0]["state"] == "active"
    status, run = ui.get_json("/api/run?run=r", cookie)
    assert [c["seq"] for c in run["checkpoints"]] == [0, 1, 2]
    assert run["checkpoints"][1]["label"] == "Edit f.txt #1" and len(run["lanes"]) == 1
    sel = "run=r&node=n&iteration=0&attempt=1"
    status, diff = ui.get_json(f"/api/diff?{sel}&seq=2", cookie)
    assert "+three" in diff["patch"] and "+two" not in diff["patch"]
    status, diff = ui.get_json(f"/api/diff?{sel}&seq=2&a_node=n&a_iteration=0&a_attempt=1"
                               "&a_seq=0", cookie)
    assert "+two" in diff["patch"] and "+three" in diff["patch"] and diff["from"]["seq"] == 0
    status, tree = ui.get_json(f"/api/tree?{sel}&seq=1&path=", cookie)
    assert [e["name"] for e in tree["entries"]] == ["f.txt"]
    status, blob = ui.get_json(f"/api/tree?{sel}&seq=1&path=f.txt", cookie)
    assert blob["text"] == "one\ntwo\n"
    status, blame = ui.get_json(f"/api/blame?{sel}&seq=2&path=f.txt", cookie)
    assert [x["seq"] for x in blame["lines"]] == [0, 1, 2]
    status, missing = ui.get_json(f"/api/diff?{sel}&seq=9", cookie)
    assert status == 404 and "seqs are 0-2" in missing["message"]
    status, bad = ui.get_json("/api/run?run=no/such", cookie)
    assert status == 400 and bad["error"] == "bad-id"


def test_export_shows_the_plan_then_creates_the_branch(sd_env: Env, daemon: Daemon,
                                                       tmp_path: Path) -> None:
    repo = make_git_worktree(tmp_path / "repo")
    (repo / "a.txt").write_text("base\n")
    git(repo, "add", "a.txt")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    with daemon.client() as c:
        for i in range(2):
            (repo / "a.txt").write_text(f"base\nstep {i}\n")
            c.snapshot(str(repo), run_id="x", node_id="n", label=f"Edit a.txt {i}")
    server = UiServer.start(sd_env)
    try:
        cookie, csrf = server.login()
        good = {"Cookie": cookie, "X-CSRF-Token": csrf}
        body = {"run": "x", "node": "n", "iteration": 0, "attempt": 1, "seq": 1,
                "branch": "agent-work"}
        status, _, raw = server.request("POST", "/api/export", headers=good, body=body)
        plan = json.loads(raw)
        assert status == 200 and plan["confirmed"] is False, raw
        assert [c["seq"] for c in plan["checkpoints"]] == [0, 1]
        assert "agent-work" not in git(repo, "branch", "--list")
        status, _, raw = server.request("POST", "/api/export", headers=good,
                                        body=dict(body, confirm=True))
        done = json.loads(raw)
        assert status == 200 and len(done["commits"]) == 2, raw
        assert git(repo, "show", "agent-work:a.txt") == "base\nstep 1\n"
        assert done["undo_command"].endswith("branch -D agent-work")
        status, _, raw = server.request("POST", "/api/export", headers=good,
                                        body=dict(body, confirm=True))
        assert status == 409, raw
    finally:
        server.stop()
