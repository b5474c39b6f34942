"""``snapshotd checkout`` and the scratch tree bisect moves, against the git CLI: what
``git archive`` of the checkpoint's commit in the store holds (files and their bytes, the
executable bit, symlinks and their targets, directories) is what is on disk. A checkout is
read-only (files 0444, executables 0555, directories 0555) unless ``--writable``, refuses a
non-empty directory and one inside the home, and never follows a symlink out of its target.
"""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import sys
import tarfile
from pathlib import Path

import pygit2
import pytest

from snapshotd.features.bisect import ScratchTree
from tests.conftest import Daemon, Env
from tests.support.bisect_session import NODE, RUN, build_session

pytestmark = pytest.mark.one_ledger("what a checkpoint's files look like on disk, whatever "
                                    "the ledger")


def archive(env: Env, commit: str) -> dict[str, tuple]:
    """``git archive`` of ``commit`` in the store: path -> (kind, executable, bytes)."""
    data = subprocess.run(["git", "--git-dir", str(env.home / "store.git"), "archive",
                           "--format=tar", commit], capture_output=True, check=True).stdout
    out: dict[str, tuple] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for m in tar.getmembers():
            name = m.name.rstrip("/")
            if m.issym():
                out[name] = ("link", False, m.linkname.encode())
            elif m.isdir():
                out[name] = ("dir", False, b"")
            else:
                out[name] = ("file", bool(m.mode & 0o100), tar.extractfile(m).read())
    return out


def on_disk(root: Path) -> dict[str, tuple]:
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = Path(dirpath, name)
            rel = str(full.relative_to(root))
            st = os.lstat(full)
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", False, os.readlink(full).encode())
            elif stat.S_ISDIR(st.st_mode):
                out[rel] = ("dir", False, b"")
            else:
                out[rel] = ("file", bool(st.st_mode & 0o100), full.read_bytes())
    return out


def modes(root: Path) -> set[tuple[str, int]]:
    """(kind, permission bits) of every entry under ``root`` and of ``root``, links left out."""
    found = {("dir", stat.S_IMODE(os.lstat(root).st_mode))}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            st = os.lstat(Path(dirpath, name))
            if not stat.S_ISLNK(st.st_mode):
                kind = "dir" if stat.S_ISDIR(st.st_mode) else "file"
                found.add((kind, stat.S_IMODE(st.st_mode)))
    return found


def cli(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=lambda: os.umask(0o022))


def writable_again(root: Path) -> None:
    for dirpath, dirnames, _ in os.walk(root):
        for name in dirnames:
            os.chmod(Path(dirpath, name), 0o755)
    os.chmod(root, 0o755)


def test_checkout_is_the_checkpoint_read_only(sd_env: Env, daemon: Daemon,
                                              tmp_path: Path) -> None:
    cps = build_session(daemon, tmp_path / "wt", calls=20)
    for seq in (6, 14, 15, 16, 19):
        target = tmp_path / f"co-{seq}"
        proc = cli(sd_env, "checkout", RUN, "--node", NODE, "--seq", str(seq), str(target),
                   "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["commit"] == cps[seq]["commit"]
        assert on_disk(target) == archive(sd_env, cps[seq]["commit"]), seq
        assert modes(target) <= {("file", 0o444), ("file", 0o555), ("dir", 0o555)}, seq
        assert ("file", 0o555) in modes(target) or seq < 11
        # The link pointing out of the tree is a link, not followed.
        assert os.readlink(target / "outside") == "../../../etc"
        writable_again(target)


def test_writable_checkout_and_refusals(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    cps = build_session(daemon, tmp_path / "wt", calls=14)
    target = tmp_path / "rw"
    proc = cli(sd_env, "checkout", RUN, "--node", NODE, "--seq", "13", "--writable",
               str(target))
    assert proc.returncode == 0, proc.stderr
    assert on_disk(target) == archive(sd_env, cps[13]["commit"])
    assert modes(target) == {("dir", 0o755), ("file", 0o644), ("file", 0o755)}
    proc = cli(sd_env, "checkout", RUN, "--node", NODE, "--seq", "13", str(target))
    assert proc.returncode == 1 and "not empty" in proc.stderr
    inside = sd_env.home / "co"
    proc = cli(sd_env, "checkout", RUN, "--node", NODE, "--seq", "13", str(inside))
    assert proc.returncode == 1 and "inside the snapshotd home" in proc.stderr
    assert not inside.exists()
    proc = cli(sd_env, "checkout", RUN, "--node", NODE, "--seq", "99", str(tmp_path / "x"))
    assert proc.returncode == 1 and "no checkpoint seq 99" in proc.stderr
    assert not (tmp_path / "x").exists()


def test_the_scratch_tree_moves_by_diff_to_every_checkpoint(sd_env: Env, daemon: Daemon,
                                                            tmp_path: Path) -> None:
    """Forward through all 40 checkpoints, then back in large jumps: after each move the
    directory is exactly the checkpoint (kinds changing, a subtree removed whole)."""
    cps = build_session(daemon, tmp_path / "wt")
    repo = pygit2.Repository(str(sd_env.home / "store.git"))
    root = tmp_path / "scratch"
    root.mkdir()
    tree = ScratchTree(repo, root)
    try:
        order = list(range(len(cps))) + [5, 39, 0, 17, 15, 16, 13, 18]
        for n, seq in enumerate(order):
            counts = tree.move_to(cps[seq]["tree"])
            assert on_disk(root) == archive(sd_env, cps[seq]["commit"]), seq
            if 0 < n < len(cps):
                # One step forward writes what the tool call changed, not the tree.
                assert counts["written"] <= 4, (seq, counts)
    finally:
        tree.close()
