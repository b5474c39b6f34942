"""Secrets outside file contents never leave: a symlink's target, a file's or a directory's name,
the worktree's own path.

A real daemon pushes to a real bare repository (``file://``); the git CLI is the oracle of what
the remote holds: every object it has (``cat-file --batch-all-objects``: commit messages, tree
entries' names, blobs, a symlink's target among them) is searched for each token. Each shape is
its own attempt, whose first checkpoint is clean and pushed; the checkpoint that brings the
token in is marked (reply, listing) and withheld with everything after it. Export refuses a
name or a link target as it refuses a token in a file; the worktree's path is not in what an
export writes, so it does not stop one. Every token is made up.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import QUIET_WATCHER, Daemon, Env, git, make_git_worktree
from tests.support.helpers import wait_for

LINK_TOKEN = "sk-proj-Qm3xT8vR2kLp9Wz4Yb7Nc1Hd6Fg0Js5A"
FILE_TOKEN = "ghp_R4nd0mT0k3nV4lu3Xy7Qw2Er9Ty5Ui8Op1As"
DIR_TOKEN = "xoxb-2938475610-Qw8Er4Ty7Ui1"
WT_TOKEN = "AKIAZ7QX3MB2RT9KLP4W"
TOKENS = (LINK_TOKEN, FILE_TOKEN, DIR_TOKEN, WT_TOKEN)


def cli(env: Env, extra: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(**extra),
                          capture_output=True, text=True, timeout=120)


def remote_refs(remote: Path) -> dict[str, str]:
    out = subprocess.run(["git", "ls-remote", str(remote)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split("\t")[1]: line.split("\t")[0] for line in out.splitlines() if line}


def remote_objects(remote: Path) -> bytes:
    """Every object the remote holds, in full (names in trees, link targets in blobs)."""
    return subprocess.run(["git", "--git-dir", str(remote), "cat-file", "--batch-all-objects",
                           "--batch"], capture_output=True, check=True).stdout


def start(sd_env: Env, tmp_path: Path) -> tuple[Daemon, Path, dict]:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    extra = dict(QUIET_WATCHER, SNAPSHOTD_REMOTE=f"file://{remote}",
                 SNAPSHOTD_PUSH_INTERVAL_MS="20")
    return Daemon(sd_env, extra_env=extra).start(), remote, extra


def test_link_targets_and_names_are_scanned_and_withheld(sd_env: Env, tmp_path: Path) -> None:
    daemon, remote, extra = start(sd_env, tmp_path)
    shapes = {
        "link": lambda wt: os.symlink(LINK_TOKEN, wt / "current-key"),
        "fname": lambda wt: (wt / f"{FILE_TOKEN}.txt").write_text("nothing secret\n"),
        "dname": lambda wt: ((wt / "cfg" / DIR_TOKEN).mkdir(parents=True),
                             (wt / "cfg" / DIR_TOKEN / "a.txt").write_text("plain\n")),
    }
    replies: dict[str, list[dict]] = {}
    with daemon.client() as c:
        for run, make in shapes.items():
            wt = make_git_worktree(tmp_path / run)
            (wt / "base.txt").write_text("base\n")
            first = c.snapshot(str(wt), run_id=run, node_id="n", tool_use_id=f"{run}0")
            make(wt)
            second = c.snapshot(str(wt), run_id=run, node_id="n", tool_use_id=f"{run}1")
            (wt / "base.txt").write_text("later\n")
            third = c.snapshot(str(wt), run_id=run, node_id="n", tool_use_id=f"{run}2")
            replies[run] = [first, second, third]
    assert "secrets" not in replies["link"][0]
    assert replies["link"][1]["secrets"] == [
        {"path": "current-key", "line": 1, "kind": "openai", "in": "link-target"}]
    assert replies["fname"][1]["secrets"] == [
        {"path": f"{FILE_TOKEN}.txt", "line": 0, "kind": "github", "in": "name"}]
    assert replies["dname"][1]["secrets"] == [
        {"path": f"cfg/{DIR_TOKEN}", "line": 0, "kind": "slack", "in": "name"}]
    assert all("secrets" not in r[2] for r in replies.values())  # nothing new came in

    def settled() -> dict | None:
        refs = remote_refs(remote)
        return refs if all(refs.get(f"refs/snapshotd/runs/{run}/n/0/1") == r[0]["commit"]
                           for run, r in replies.items()) else None

    wait_for(settled, what="each attempt's clean first checkpoint on the remote")
    objects = remote_objects(remote)
    for token in TOKENS:
        assert token.encode() not in objects, f"the remote holds {token[:8]}…"
    log = subprocess.run(["git", "--git-dir", str(remote), "log", "--all", "-p"],
                         capture_output=True, check=True).stdout
    assert b"base.txt" in log and not any(t.encode() in log for t in TOKENS)
    for run, r in replies.items():
        assert subprocess.run(["git", "--git-dir", str(remote), "cat-file", "-e",
                               r[1]["commit"]], capture_output=True).returncode != 0, run

    shown = cli(sd_env, extra, "snapshots", "fname")
    assert shown.returncode == 0, shown.stderr
    assert "SECRET ghp_…[redacted:github].txt (name) github" in shown.stdout, shown.stdout
    assert FILE_TOKEN not in shown.stdout
    assert "SECRET current-key (link target) openai" in cli(sd_env, extra, "snapshots",
                                                            "link").stdout
    status = cli(sd_env, extra, "status")
    assert "WITHHELD fname/n/0/1 seq 1" in status.stdout, status.stdout
    assert not any(t in status.stdout for t in TOKENS), status.stdout

    # Export: a name or a link target is held as a token in a file is.
    for run in shapes:
        proc = cli(sd_env, extra, "export", run, "--node", "n", "--branch", f"out-{run}")
        assert proc.returncode != 0 and "secret" in proc.stderr, (run, proc.stdout, proc.stderr)
        assert not any(t in proc.stdout + proc.stderr for t in TOKENS), proc.stderr
        assert git(tmp_path / run, "branch", "--list", f"out-{run}").strip() == ""
    daemon.stop()
    assert not any(t in daemon.log.read_text(errors="replace") for t in TOKENS)


def test_a_worktree_path_holding_a_token_holds_its_attempt(sd_env: Env, tmp_path: Path) -> None:
    daemon, remote, extra = start(sd_env, tmp_path)
    clean = make_git_worktree(tmp_path / "clean")
    leaky = make_git_worktree(tmp_path / f"keys-{WT_TOKEN}" / "wt")
    with daemon.client() as c:
        (clean / "a.txt").write_text("a\n")
        done = c.snapshot(str(clean), run_id="clean", node_id="n", tool_use_id="c0")
        (leaky / "a.txt").write_text("a\n")
        first = c.snapshot(str(leaky), run_id="wtpath", node_id="n", tool_use_id="w0")
        (leaky / "a.txt").write_text("b\n")
        second = c.snapshot(str(leaky), run_id="wtpath", node_id="n", tool_use_id="w1")
    assert first["secrets"] == [{"path": str(leaky), "line": 0, "kind": "aws",
                                 "in": "worktree-path"}]
    assert "secrets" not in second  # scanned once, on the attempt's first checkpoint
    wait_for(lambda: remote_refs(remote).get("refs/snapshotd/runs/clean/n/0/1") == done["commit"],
             what="the clean attempt on the remote")
    status = json.loads(cli(sd_env, extra, "status", "--json").stdout)
    assert [w["run_id"] for w in status["replication"]["withheld"]] == ["wtpath"]
    assert not any(ref.startswith("refs/snapshotd/runs/wtpath/") for ref in remote_refs(remote))
    assert WT_TOKEN.encode() not in remote_objects(remote)
    # Export writes no worktree path: it is not refused for one.
    proc = cli(sd_env, extra, "export", "wtpath", "--node", "n", "--branch", "out")
    assert proc.returncode == 0, proc.stderr
    assert WT_TOKEN not in git(leaky, "log", "out", "--format=%B")
    daemon.stop()


def test_names_are_read_with_the_token_rules_only() -> None:
    from snapshotd.core import name_findings

    for plain in ("password.txt", "src/api_key.py", "secrets/token", ".env.example/x",
                  "keys/PGPASSWORD=hunter2x.txt"):
        assert name_findings(plain) == [], plain
    assert name_findings(f"a/{FILE_TOKEN}/b/{LINK_TOKEN}.txt") == [
        {"path": f"a/{FILE_TOKEN}", "line": 0, "kind": "github", "in": "name"},
        {"path": f"a/{FILE_TOKEN}/b/{LINK_TOKEN}.txt", "line": 0, "kind": "openai",
         "in": "name"}]
