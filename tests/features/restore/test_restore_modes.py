"""Restored files and directories get git's modes, not the daemon's umask 077 (docs/restore.md,
"Modes"): a file 0666/0777 less the user's umask (0644/0755 under 022), a directory the restore
creates 0777 less it; in place and with ``--to``. The daemon is a real subprocess (it sets umask
077 itself), the CLI runs with the umask a user would have; ``os.stat`` is the judge.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, make_git_worktree

pytestmark = pytest.mark.one_ledger("file modes on disk, whatever the ledger")


def cli(env: Env, umask: int, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: os.umask(umask))
    assert proc.returncode == 0, proc.stderr
    return proc


def modes(root: Path) -> dict[str, int]:
    """Permission bits (setgid included) of every file and directory under root, not .git."""
    out = {"": stat.S_IMODE(os.lstat(root).st_mode)}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in dirnames + filenames:
            full = Path(dirpath, name)
            out[str(full.relative_to(root))] = stat.S_IMODE(os.lstat(full).st_mode)
    return out


def populate(wt: Path) -> None:
    """Files 0644 and 0755 in directories 0755, at the top and two levels down."""
    for rel, exe in (("README", False), ("pkg/mod.py", False), ("pkg/run.sh", True),
                     ("pkg/sub/deep.txt", False)):
        path = wt / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"{rel}\n")
        path.chmod(0o755 if exe else 0o644)
    for d in (wt / "pkg", wt / "pkg" / "sub"):
        d.chmod(0o755)


def expected(umask: int) -> dict[str, int]:
    f, x, d = 0o666 & ~umask, 0o777 & ~umask, 0o777 & ~umask
    return {"": d, "README": f, "pkg": d, "pkg/mod.py": f, "pkg/run.sh": x, "pkg/sub": d,
            "pkg/sub/deep.txt": f}


def test_in_place_restore_recreates_files_and_directories_with_git_modes(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    wt.chmod(0o755)
    populate(wt)
    assert modes(wt) == expected(0o022)
    with daemon.client() as c:
        c.snapshot(str(wt), run_id="r", node_id="n", tool_use_id="t0")
    shutil.rmtree(wt / "pkg")
    (wt / "README").unlink()
    cli(sd_env, 0o022, "restore", "r", "--node", "n", "--seq", "0", "--force")
    assert modes(wt) == expected(0o022)


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_restore_to_gives_git_modes_under_the_users_umask(sd_env: Env, daemon: Daemon,
                                                          tmp_path: Path, umask: int) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    populate(wt)
    with daemon.client() as c:
        c.snapshot(str(wt), run_id="r", node_id="n", tool_use_id="t0")
    target = tmp_path / "out" / "copy"  # neither exists: both are made by the restore
    cli(sd_env, umask, "restore", "r", "--node", "n", "--seq", "0", "--to", str(target))
    assert modes(target) == expected(umask)
    assert stat.S_IMODE(os.stat(target.parent).st_mode) == 0o777 & ~umask
