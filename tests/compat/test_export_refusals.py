"""``snapshotd export`` refuses, with a sentence and before writing anything, what git would
refuse or read as something else: a branch named ``HEAD`` (git: "not a valid branch name"),
a pseudo-ref (``FETCH_HEAD``, ``ORIG_HEAD``: ``git rev-parse NAME`` reads the file of that name
first), ``@`` (HEAD in git's revision syntax) or a name that starts with ``refs/`` (a branch
``refs/heads/refs/heads/x``); git itself (``check-ref-format --branch``) is the oracle for
the names accepted."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, git
from tests.support.review_replay import build_history, cli, replay

pytestmark = pytest.mark.one_ledger("export's argument checks, not the ledger")


@pytest.fixture
def rep(sd_env: Env, daemon: Daemon, tmp_path: Path):
    wt = tmp_path / "wt"
    commits = build_history(wt, count=4)
    return replay(sd_env, daemon, wt, commits, 1)


@pytest.mark.parametrize("name", ["HEAD", "FETCH_HEAD", "ORIG_HEAD", "MERGE_HEAD", "@",
                                  "refs/heads/x", "refs/tags/v1", "-x"])
def test_a_branch_name_git_treats_specially_is_refused(sd_env: Env, rep, name: str) -> None:
    refs = git(rep.worktree, "for-each-ref", "--format=%(refname)")
    proc = cli(sd_env, "export", rep.run_id, "--node", rep.node_id, "--branch", name)
    assert proc.returncode == 1, proc.stdout
    assert "not a valid branch name" in proc.stderr and "internal" not in proc.stderr
    assert git(rep.worktree, "for-each-ref", "--format=%(refname)") == refs


def test_a_plain_name_is_accepted_as_git_accepts_it(sd_env: Env, rep) -> None:
    name = "agent/feature-1"
    check = subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True,
                           text=True, cwd=rep.worktree)
    assert check.returncode == 0 and check.stdout.strip() == name
    proc = cli(sd_env, "export", rep.run_id, "--node", rep.node_id, "--branch", name)
    assert proc.returncode == 0, proc.stderr
    assert git(rep.worktree, "rev-parse", "--verify", "-q", f"refs/heads/{name}").strip()


@pytest.mark.parametrize("case", ["dangling-symlink", "under-a-file", "symlink-loop"])
def test_patches_into_a_path_that_cannot_be_a_directory(sd_env: Env, rep, tmp_path: Path,
                                                        case: str) -> None:
    """A dangling symlink (or a file on the way, or a symlink loop) as --patches DIR: a
    sentence naming the path and what it is, never ``internal``, nothing written."""
    target = tmp_path / "gone"
    if case == "dangling-symlink":
        out = tmp_path / "series"
        out.symlink_to(target)
        why = "symbolic link"
    elif case == "under-a-file":
        (tmp_path / "afile").write_text("x\n")
        out = tmp_path / "afile" / "series"
        why = "not a directory"
    else:
        out = tmp_path / "loop"
        out.symlink_to(out)
        why = "symbolic link"
    proc = cli(sd_env, "export", rep.run_id, "--node", rep.node_id, "--patches", str(out))
    assert proc.returncode == 1, proc.stdout
    assert "internal" not in proc.stderr and str(out) in proc.stderr, proc.stderr
    assert why in proc.stderr, proc.stderr
    assert not target.exists()
