"""``snapshotd export`` never carries a secret off unnoticed.

A real git worktree, a real daemon: one tool call writes ``conf/keys.txt`` holding a made-up
OpenAI key (its checkpoint is marked), later calls change other files. Exporting a range whose
trees hold that file (even a range after the marked checkpoint: the unchanged file is still in
every later tree) is refused with ``secret-held`` through the CLI (daemon and no daemon), the
daemon op and the MCP twin, in branch
and patches modes, naming ``path:line kind`` and never the key, with the repository's refs and
objects unchanged and no patch written. ``--allow-secrets`` exports and says so; a release by
commit or by path (``snapshotd push --release``/``--release-path``, the file replication reads)
lets it export normally; a file the base commit already holds byte for byte is not counted.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from snapshotd.core.errors import ServiceError
from snapshotd.ops.operations import Operations
from snapshotd_client.client import SnapshotdError
from tests.conftest import Daemon, Env, git, make_git_worktree

pytestmark = pytest.mark.one_ledger("export's check for findings, over the store's commits")

KEY = "sk-proj-Qm3xT8vR2kLp9Wz4Yb7Nc1Hd6Fg0Js5A"
SECRET = "conf/keys.txt"
RUN = "exp-sec"


def cli(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120)


def export(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return cli(env, "export", RUN, "--node", "n", *args)


def repo_state(wt: Path) -> tuple[str, list[str]]:
    """Every ref and every file of the object database: what a refused export must not touch."""
    objects = wt / ".git" / "objects"
    return (git(wt, "for-each-ref", "--format=%(refname) %(objectname)"),
            sorted(str(p.relative_to(objects)) for p in objects.rglob("*")))


def worktree_with_a_key(daemon: Daemon, tmp_path: Path) -> tuple[Path, list[dict]]:
    """Checkpoints 0 (the base's tree), 1 (the key written: marked), 2 (another file changed)."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a0\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    replies = []
    with daemon.client() as c:
        replies.append(c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="t0"))
        (wt / "conf").mkdir()
        (wt / SECRET).write_text(f"key = {KEY}\n")
        (wt / "a.txt").write_text("a1\n")
        replies.append(c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="t1"))
        (wt / "a.txt").write_text("a2\n")
        replies.append(c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="t2"))
    assert [f["path"] for f in replies[1]["secrets"]] == [SECRET]
    assert not replies[2].get("secrets")
    return wt, replies


def assert_refused(proc: subprocess.CompletedProcess[str], *, seq: int = 1) -> None:
    assert proc.returncode == 1, proc.stdout
    assert "(secret-held)" in proc.stderr and f"seq {seq} {SECRET}:1 openai" in proc.stderr
    assert "snapshotd push --release" in proc.stderr and "--allow-secrets" in proc.stderr
    assert KEY not in proc.stderr + proc.stdout


def test_an_export_holding_a_key_is_refused_before_anything_is_written(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt, _ = worktree_with_a_key(daemon, tmp_path)
    before = repo_state(wt)
    assert_refused(export(sd_env, "--branch", "agent"))
    # Only checkpoint 2 in the range: it was not marked, but its tree still holds the file.
    assert_refused(export(sd_env, "--branch", "agent", "--squash", "--from-seq", "1"))
    series = tmp_path / "series"
    assert_refused(export(sd_env, "--patches", str(series)))
    assert not series.exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert_refused(export(sd_env, "--patches", str(empty)))
    assert list(empty.iterdir()) == []
    with daemon.client() as c, pytest.raises(SnapshotdError) as refused:
        c.request("export", run_id=RUN, node_id="n", branch="agent")
    assert refused.value.code == "secret-held" and KEY not in refused.value.message
    ops = Operations(home=sd_env.home, socket=sd_env.socket)
    with pytest.raises(ServiceError) as via_mcp:
        ops.export_checkpoints(run_id=RUN, node_id="n", branch="agent")
    assert via_mcp.value.code == "secret-held"
    daemon.stop()  # the CLI on the home directly: refused the same way
    assert_refused(export(sd_env, "--branch", "agent"))
    assert_refused(export(sd_env, "--patches", str(series)))
    assert not series.exists()
    assert repo_state(wt) == before


def test_allow_secrets_exports_and_says_so(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt, replies = worktree_with_a_key(daemon, tmp_path)
    with daemon.client() as c:
        result = c.request("export", run_id=RUN, node_id="n", branch="agent",
                           allow_secrets=True)
    assert result["allowed_secrets"] is True
    assert result["secrets"] == [{"path": SECRET, "line": 1, "kind": "openai", "seq": 1,
                                  "commit": replies[1]["commit"]}]
    assert KEY in git(wt, "show", f"agent:{SECRET}")
    series = tmp_path / "series"
    proc = export(sd_env, "--patches", str(series), "--allow-secrets")
    assert proc.returncode == 0, proc.stderr
    assert f"exported 1 unreleased secret finding(s) (--allow-secrets): seq 1 {SECRET}:1 openai" \
        in proc.stderr
    assert any(KEY in p.read_text() for p in series.iterdir())


def test_released_findings_export_normally(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt, replies = worktree_with_a_key(daemon, tmp_path)
    # No remote is configured: push says so, after recording the release.
    cli(sd_env, "push", RUN, "--release", replies[1]["commit"])
    done = export(sd_env, "--branch", "agent", "--json")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["secrets"] == [] and out["allowed_secrets"] is False and done.stderr == ""

    # A new finding in a later checkpoint is not covered by that release; a path release is.
    with daemon.client() as c:
        (wt / "conf" / "other.txt").write_text(f"\n\nOPENAI_API_KEY={KEY}\n")
        c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="t3")
    proc = export(sd_env, "--branch", "agent-2")
    assert proc.returncode == 1 and "seq 3 conf/other.txt:3 openai" in proc.stderr
    assert f"{SECRET}:1" not in proc.stderr
    cli(sd_env, "push", RUN, "--release-path", "conf/other.txt")
    assert export(sd_env, "--branch", "agent-2").returncode == 0


def test_a_key_the_base_commit_holds_is_not_counted(sd_env: Env, daemon: Daemon,
                                                    tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "conf").mkdir()
    (wt / SECRET).write_text(f"key = {KEY}\n")  # the user's own commit holds it already
    (wt / "a.txt").write_text("a0\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    with daemon.client() as c:
        first = c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="t0")
        (wt / "a.txt").write_text("a1\n")
        c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="t1")
    # The first capture scans only what the user's HEAD commit does not hold (docs/secrets.md).
    assert not first.get("secrets")
    proc = export(sd_env, "--branch", "agent", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["secrets"] == []
    # Changed by the agent, the file is new content: counted again.
    with daemon.client() as c:
        (wt / SECRET).write_text(f"key = {KEY}\nmore = 1\n")
        c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="t2")
    assert_refused(export(sd_env, "--branch", "agent-2"), seq=2)
