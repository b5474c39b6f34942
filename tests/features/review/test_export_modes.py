"""``export --branch`` writes into the user's repository with the modes git itself would, not
the daemon's umask 077 (docs/review.md, "Export"): objects, fan-out directories, the new ref and
its reflog honour ``core.sharedRepository`` and the user's umask. The oracle is git: the base
commit, made by the git CLI in the same repository under the same umask, gives the modes every
object, fan-out directory, ref and reflog must have; ``git fsck`` checks the repository.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, git

pytestmark = pytest.mark.one_ledger("file modes in the user's repository, whatever the ledger")

RUN = "exp-modes"


@pytest.fixture(params=[0o022, 0o027], ids=["umask022", "umask027"])
def user_umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """The test process (and the git and CLI it runs) has the umask a user would have."""
    old = os.umask(request.param)
    yield request.param
    os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def object_modes(git_dir: Path) -> tuple[set[int], set[int]]:
    """The modes of every loose object and of every fan-out directory."""
    files, dirs = set(), set()
    for fan in (git_dir / "objects").iterdir():
        if len(fan.name) == 2:
            dirs.add(mode(fan))
            files.update(mode(obj) for obj in fan.iterdir())
    return files, dirs


@pytest.mark.parametrize("shared", ["group", "all", "0640", None])
def test_export_writes_what_git_would_into_a_shared_repository(
        sd_env: Env, daemon: Daemon, tmp_path: Path, user_umask: int, shared: str | None) -> None:
    wt = tmp_path / "wt"
    subprocess.run(["git", "init", "-q", "-b", "main", *([f"--shared={shared}"] if shared else []),
                    str(wt)], check=True)
    git(wt, "config", "user.name", "Tester")
    git(wt, "config", "user.email", "tester@example.invalid")
    (wt / "base.txt").write_text("base\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    gd = wt / ".git"
    head = git(wt, "rev-parse", "HEAD").strip()
    # git's own modes in this repository, under this umask: the oracle.
    want_obj, want_dir = mode(gd / "objects" / head[:2] / head[2:]), mode(gd / "objects" / head[:2])
    want_ref, want_log = mode(gd / "refs/heads/main"), mode(gd / "logs/refs/heads/main")
    with daemon.client() as c:
        for i in range(3):
            (wt / f"dir{i}" / "deeper").mkdir(parents=True)
            (wt / f"dir{i}" / "deeper" / "f.txt").write_text(f"content {i}\n")
            c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id=f"t{i}")
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "export", RUN, "--node", "n",
                           "--branch", "feature/exported"], env=sd_env.environ(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    subprocess.run(["git", "-C", str(wt), "fsck", "--strict"], check=True, capture_output=True)
    assert len(git(wt, "rev-list", "main..feature/exported").split()) == 3
    files, dirs = object_modes(gd)
    assert files == {want_obj} and dirs == {want_dir}, (oct(want_obj), oct(want_dir),
                                                       sorted(map(oct, files | dirs)))
    assert mode(gd / "refs/heads/feature/exported") == want_ref
    assert mode(gd / "refs/heads/feature") == mode(gd / "refs/heads")
    log = gd / "logs/refs/heads/feature/exported"
    if log.exists():
        assert mode(log) == want_log
        assert mode(log.parent) == mode(gd / "logs/refs/heads")


def test_patches_get_the_users_modes(sd_env: Env, daemon: Daemon, tmp_path: Path,
                                     user_umask: int) -> None:
    wt = tmp_path / "wt"
    subprocess.run(["git", "init", "-q", "-b", "main", str(wt)], check=True)
    with daemon.client() as c:
        for i in range(2):
            (wt / f"f{i}.txt").write_text(f"content {i}\n")
            c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id=f"t{i}")
    out = tmp_path / "series"
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "export", RUN, "--node", "n",
                           "--patches", str(out)], env=sd_env.environ(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    patches = sorted(out.iterdir())
    assert patches and {mode(p) for p in patches} == {0o666 & ~user_umask}
    assert mode(out) == 0o777 & ~user_umask
