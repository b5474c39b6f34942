"""``snapshotd export``: a replayed history exported as a branch (trees equal the replayed
commits', the user's HEAD, index, worktree and refs untouched), squashed, and as patches that
``git am`` applies onto the start commit in a fresh clone."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, git
from tests.support.review_replay import Replay, build_history, cli, replay

pytestmark = pytest.mark.one_ledger("branches, squashes and patches against git")

START = 4


def fingerprint(wt: Path) -> dict[str, str]:
    """What must stay byte-identical: HEAD, index, config, every ref, every worktree file
    (and so what ``git status`` says)."""
    out = {name: hashlib.sha256((wt / ".git" / name).read_bytes()).hexdigest()
           for name in ("HEAD", "index", "config")}
    out["refs"] = git(wt, "for-each-ref", "--format=%(refname) %(objectname)")
    out["status"] = git(wt, "--no-optional-locks", "status", "--porcelain", "-uall")
    for path in sorted(wt.rglob("*")):
        rel = path.relative_to(wt).as_posix()
        if path.is_file() and not rel.startswith(".git/"):
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def without(refs: str, *names: str) -> str:
    return "".join(line + "\n" for line in refs.splitlines()
                   if line.split()[0] not in {f"refs/heads/{n}" for n in names})


def export(env: Env, rep: Replay, *args: str) -> subprocess.CompletedProcess:
    return cli(env, "export", rep.run_id, "--node", rep.node_id, *args)


def tree_of(wt: Path, rev: str) -> str:
    return git(wt, "rev-parse", f"{rev}^{{tree}}").strip()


def test_export_branch_and_squash_touch_nothing_else(sd_env: Env, daemon: Daemon,
                                                     tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    commits = build_history(wt, count=30)
    rep = replay(sd_env, daemon, wt, commits, START)
    before = fingerprint(wt)

    proc = export(sd_env, rep, "--branch", "agent", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["base"] == commits[START] and result["base_source"] == "recorded"
    assert result["skipped"] == [0]  # checkpoint 0 holds the start commit's tree
    exported = git(wt, "rev-list", "--reverse", f"{commits[START]}..agent").split()
    assert len(exported) == len(commits) - START - 1
    assert [tree_of(wt, c) for c in exported] == [tree_of(wt, c) for c in commits[START + 1:]]
    assert git(wt, "rev-parse", f"{exported[0]}^").strip() == commits[START]
    message = git(wt, "log", "-1", "--format=%B", exported[2])
    assert message.startswith(f"Edit commit {START + 3}\n")
    for trailer in (f"Snapshotd-Run: {rep.run_id}", f"Snapshotd-Node: {rep.node_id}",
                    "Snapshotd-Seq: 3", "Snapshotd-Tool-Use-Id: call-3"):
        assert trailer in message

    squash = export(sd_env, rep, "--branch", "agent-squashed", "--squash", "--from-seq", "2")
    assert squash.returncode == 0, squash.stderr
    one = git(wt, "rev-list", f"{commits[START]}..agent-squashed").split()
    assert len(one) == 1 and tree_of(wt, one[0]) == tree_of(wt, commits[-1])
    body = git(wt, "log", "-1", "--format=%B", one[0])
    assert "- seq 3: Edit commit" in body and "- seq 2:" not in body

    for name in ("agent", "main", "work"):
        refused = export(sd_env, rep, "--branch", name)
        assert refused.returncode == 1 and "already exists" in refused.stderr, name
    bad = export(sd_env, rep, "--branch", "no..dots")
    assert bad.returncode == 1 and "not a valid branch name" in bad.stderr

    after = fingerprint(wt)
    assert without(after.pop("refs"), "agent", "agent-squashed") == before.pop("refs")
    assert after == before


def test_export_patches_apply_with_git_am(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    commits = build_history(wt, count=20)
    rep = replay(sd_env, daemon, wt, commits, START)
    before = fingerprint(wt)
    out = tmp_path / "series"
    proc = export(sd_env, rep, "--patches", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    files = json.loads(proc.stdout)["files"]
    assert len(files) == len(commits) - START - 1
    assert sorted(str(p) for p in out.iterdir()) == sorted(files)
    assert fingerprint(wt) == before  # patches write nothing into the repository

    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(wt), str(clone))
    git(clone, "checkout", "-q", "-b", "review", commits[START])
    git(clone, "am", "-q", *sorted(files))
    assert tree_of(clone, "HEAD") == tree_of(wt, commits[-1])
    assert len(git(clone, "rev-list", f"{commits[START]}..HEAD").split()) == len(files)

    again = export(sd_env, rep, "--patches", str(out))
    assert again.returncode == 1 and "not an empty directory" in again.stderr


def test_export_outside_a_repository(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "a.txt").write_text("one\n")
    with daemon.client() as c:
        c.snapshot(str(plain), run_id="p", node_id="n", tool_use_id="t0", label="first")
        (plain / "a.txt").write_text("one\ntwo\n")
        c.snapshot(str(plain), run_id="p", node_id="n", tool_use_id="t1", label="second")
    refused = cli(sd_env, "export", "p", "--node", "n", "--branch", "x")
    assert refused.returncode == 1 and "not in a git repository" in refused.stderr
    series = tmp_path / "series"
    proc = cli(sd_env, "export", "p", "--node", "n", "--patches", str(series), "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["base"] is None and result["base_source"] == "none"
    assert len(result["files"]) == 2
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    git(fresh, "init", "-q")
    git(fresh, "am", "-q", *sorted(result["files"]))
    assert (fresh / "a.txt").read_text() == "one\ntwo\n"
    assert git(fresh, "log", "--format=%s").split("\n")[:2] == ["second", "first"]


def test_the_mcp_twin_exports(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    from snapshotd.core.errors import ServiceError
    from snapshotd.ops.operations import Operations

    wt = tmp_path / "wt"
    commits = build_history(wt, count=8)
    rep = replay(sd_env, daemon, wt, commits, 2)
    ops = Operations(home=sd_env.home, socket=sd_env.socket)
    result = ops.export_checkpoints(run_id=rep.run_id, node_id=rep.node_id, branch="via-mcp",
                                    squash=True)
    assert [c["seq"] for c in result["commits"]] == [list(range(len(commits) - 2))]
    assert tree_of(wt, "via-mcp") == tree_of(wt, commits[-1])
    try:
        ops.export_checkpoints(run_id=rep.run_id, node_id=rep.node_id, branch="via-mcp")
    except ServiceError as exc:
        assert exc.code == "conflict"
    else:
        raise AssertionError("an existing branch must be refused")


def test_an_unreadable_head_is_logged_and_the_capture_still_lands(sd_env: Env, daemon: Daemon,
                                                                  tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    commits = build_history(wt, count=2)
    (wt / ".git" / "refs" / "heads" / "main").write_text("garbage\n")
    with daemon.client() as c:
        cp = c.snapshot(str(wt), run_id="broken", node_id="n", tool_use_id="t0")
    assert cp["seq"] == 0
    assert "could not read the HEAD of the repository" in daemon.log.read_text()
    # Export then has no recorded base: it builds on HEAD at export time.
    (wt / ".git" / "refs" / "heads" / "main").write_text(commits[-1] + "\n")
    (wt / "new.txt").write_text("new\n")
    with daemon.client() as c:
        c.snapshot(str(wt), run_id="broken", node_id="n", tool_use_id="t1")
    proc = cli(sd_env, "export", "broken", "--node", "n", "--branch", "b", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["base_source"] == "head" and result["base"] == commits[-1]
    assert result["skipped"] == [0] and len(result["commits"]) == 1


def test_export_into_another_repository(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    commits = build_history(wt, count=8)
    rep = replay(sd_env, daemon, wt, commits, 3)
    other = tmp_path / "other"
    git(tmp_path, "clone", "-q", "--no-local", str(wt), str(other))
    refs = git(wt, "for-each-ref")
    proc = export(sd_env, rep, "--branch", "from-agent", "--repo", str(other), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["base_source"] == "recorded"
    assert tree_of(other, "from-agent") == tree_of(wt, commits[-1])
    assert git(wt, "for-each-ref") == refs  # the worktree's own repository is not touched
