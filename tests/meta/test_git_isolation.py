"""The git the tests run never reads the machine's configuration (conftest's ``_isolate_git``):
a fresh clone on a machine with no global identity, or with a user's odd settings, gives the
same results. The git CLI itself is asked what it reads and who it would commit as."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.conftest import GIT_IDENTITY
from tests.support.helpers import git


def _git(cwd: Path, *args: str, **extra: str) -> str:
    """git with this process's environment (plus ``extra``), as a test's own subprocess runs it."""
    return subprocess.run(["git", *args], cwd=cwd, env=dict(os.environ, **extra),
                          capture_output=True, text=True, check=True).stdout


def test_git_reads_only_the_sessions_configuration(tmp_path: Path) -> None:
    hostile = tmp_path / "home"
    hostile.mkdir()
    (hostile / ".gitconfig").write_text("[user]\n\temail = someone@else.example\n"
                                        "[core]\n\tautocrlf = true\n")
    origins = _git(tmp_path, "config", "--list", "--show-origin", "--show-scope", HOME=str(hostile))
    files = {line.split("\t")[1] for line in origins.splitlines()}
    assert files == {f"file:{os.environ['GIT_CONFIG_GLOBAL']}"}, origins
    assert "someone@else.example" not in origins and "autocrlf" not in origins


def test_a_commit_needs_no_identity_from_the_machine(tmp_path: Path) -> None:
    store = tmp_path / "store.git"
    _git(tmp_path, "init", "-q", "--bare", str(store), HOME=str(tmp_path / "nohome"))
    tree = _git(tmp_path, "--git-dir", str(store), "mktree").strip()
    commit = _git(tmp_path, "--git-dir", str(store), "commit-tree", tree, "-m", "m",
                  HOME=str(tmp_path / "nohome")).strip()
    author = git(tmp_path, "--git-dir", str(store), "log", "-1", "--format=%an <%ae>", commit)
    assert author.strip() == f"{GIT_IDENTITY['GIT_AUTHOR_NAME']} <{GIT_IDENTITY['GIT_AUTHOR_EMAIL']}>"


def test_helpers_git_keeps_the_sessions_configuration(tmp_path: Path) -> None:
    listed = git(tmp_path, "config", "--list", "--show-origin")
    assert {line.split("\t")[0] for line in listed.splitlines()} == \
        {f"file:{os.environ['GIT_CONFIG_GLOBAL']}"}, listed
