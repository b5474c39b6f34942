"""A FIFO planted in the user's repository never stalls the daemon (a hostile tree). The first
checkpoint of an attempt records the commit the user's HEAD points at (its base, for export);
before, that read went through libgit2, which opens the repository's config, ``HEAD``, the
branch's ref file and ``packed-refs`` with a blocking ``open``: a FIFO at any of them held the
capture (and the worktree's lock, and with it every later tool call) for good. An export into
such a repository must fail with a clear error, not hang. The daemon is a real subprocess;
the oracle is the git CLI, which read the repository before the FIFO was planted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from snapshotd.core.user_repo import head_commit, user_head
from snapshotd_client.client import SnapshotdError
from tests.conftest import Env, MakeDaemon, git, make_git_worktree
from tests.support.helpers import in_time, release_fifo

# Where in ``.git`` a FIFO is planted, and whether HEAD's commit can still be read around it
# (the branch is packed for ``packed-refs``: the FIFO stands where its ref was).
PLANTED = {"config": True, "refs/heads/main": False, "packed-refs": False, "HEAD": False,
           "config.worktree": True}


def committed_worktree(path: Path, packed: bool) -> tuple[Path, str, str]:
    """A repository with one commit on ``main``: (worktree, HEAD's commit, its tree)."""
    wt = make_git_worktree(path)
    (wt / "a.txt").write_text("a\n")
    (wt / "sub").mkdir()
    (wt / "sub" / "b.txt").write_text("b\n")
    git(wt, "add", "-A")
    git(wt, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    if packed:
        git(wt, "pack-refs", "--all")
    return wt, git(wt, "rev-parse", "HEAD").strip(), git(wt, "rev-parse", "HEAD^{tree}").strip()


def plant_fifo(target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    target.unlink(missing_ok=True)
    os.mkfifo(target)


@pytest.mark.parametrize("planted", sorted(PLANTED))
def test_a_fifo_in_the_users_repository_never_stalls_the_first_checkpoint(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon, planted: str) -> None:
    wt, head, tree = committed_worktree(tmp_path / "wt", packed=planted == "packed-refs")
    target = wt / ".git" / planted
    plant_fifo(target)
    daemon = make_daemon(sd_env)
    try:
        with daemon.client() as c:
            c.attempt_begin("fifo", "n", str(wt))
            first = in_time(lambda: c.snapshot(str(wt), run_id="fifo", node_id="n"), target)
            assert first["tree"] == tree  # the files, exactly (the FIFOs are in .git)
            (wt / "a.txt").write_text("a, again\n")
            second = in_time(lambda: c.snapshot(str(wt), run_id="fifo", node_id="n"), target)
            assert second["seq"] == first["seq"] + 1
        body = git(sd_env.home, "--git-dir", str(sd_env.home / "store.git"), "cat-file",
                   "commit", first["commit"])
        # The base is HEAD's commit where it can be read without the FIFO, else left out.
        assert (f"Snapshotd-Base: {head}" in body) == PLANTED[planted], body
    finally:
        release_fifo(target)
        daemon.stop()


@pytest.mark.parametrize("planted", ["config", "refs/heads/main", "HEAD", "refs/heads/agent/x"])
def test_an_export_into_a_repository_with_a_fifo_fails_clearly(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon, planted: str) -> None:
    wt, _head, _tree = committed_worktree(tmp_path / "wt", packed=False)
    daemon = make_daemon(sd_env)
    try:
        with daemon.client() as c:
            c.attempt_begin("fifo", "n", str(wt))
            (wt / "a.txt").write_text("changed\n")
            c.snapshot(str(wt), run_id="fifo", node_id="n")
            target = wt / ".git" / planted
            plant_fifo(target)
            with pytest.raises(SnapshotdError) as refused:
                in_time(lambda: c.request("export", run_id="fifo", node_id="n",
                                                branch="agent/x"), target)
            assert f"{planted} is not a regular file" in str(refused.value)
            assert c.ping()  # and the daemon serves on
    finally:
        release_fifo(target)
        daemon.stop()


def test_head_is_resolved_as_git_resolves_it(tmp_path: Path) -> None:
    """``head_commit`` reads HEAD without libgit2; the oracle is ``git rev-parse HEAD``: a
    branch loose or packed, a detached HEAD, a linked worktree, a symbolic ref to a symbolic
    ref, an unborn branch; content git would not write is refused."""
    wt, head, _tree = committed_worktree(tmp_path / "wt", packed=False)
    gitdir = wt / ".git"
    assert head_commit(gitdir) == head
    git(wt, "pack-refs", "--all")
    assert not (gitdir / "refs" / "heads" / "main").exists()
    assert head_commit(gitdir) == head
    packed = (gitdir / "packed-refs").read_bytes()
    (gitdir / "packed-refs").write_bytes(packed.rstrip(b"\n"))
    assert head_commit(gitdir) == head  # a last line without its newline
    (gitdir / "packed-refs").write_bytes(packed)
    git(wt, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "two",
        "--allow-empty")
    assert head_commit(gitdir) == git(wt, "rev-parse", "HEAD").strip() != head  # loose again
    git(wt, "worktree", "add", "-q", "--detach", str(tmp_path / "linked"), head)
    assert user_head(tmp_path / "linked") == head
    assert user_head(tmp_path / "linked" / "sub") == head  # found from below its root
    git(wt, "symbolic-ref", "refs/heads/alias", "refs/heads/main")
    git(wt, "symbolic-ref", "HEAD", "refs/heads/alias")
    assert head_commit(gitdir) == git(wt, "rev-parse", "HEAD").strip()
    git(wt, "checkout", "-q", "--orphan", "fresh")
    assert head_commit(gitdir) is None and user_head(wt) is None
    (gitdir / "HEAD").write_text("ref: ../../outside\n")
    with pytest.raises(ValueError):
        head_commit(gitdir)
    assert user_head(wt) is None  # logged, never raised
    (gitdir / "HEAD").write_text("not an id\n")
    with pytest.raises(ValueError):
        head_commit(gitdir)
    assert user_head(tmp_path) is None  # not in a repository
