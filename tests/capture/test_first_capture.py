"""The first capture of a git worktree, seeded from its repository: the user's packs copied
whole into the store (``object_import``), and the seeded directories sparing the full scan's
look at every entry for unseen special files and unlistable directories (``dir_shape``)."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from snapshotd.capture.seeding import dir_shape
from snapshotd.capture.stat_caches import StatCaches
from snapshotd.core.home_perms import secure_home
from snapshotd.core.secrets import may_name_secret_files
from snapshotd.core.user_repo import strip_index
from snapshotd.store.store import Store
from tests.conftest import git, make_git_worktree


def make_repo(root: Path, dirs: int = 4, per_dir: int = 5) -> Path:
    wt = make_git_worktree(root)
    (wt / ".gitignore").write_text("ign/\n")
    for d in range(dirs):
        (wt / f"d{d}" / "sub").mkdir(parents=True)
        for i in range(per_dir):
            (wt / f"d{d}" / f"f{i}.txt").write_text(f"{d} {i}\n")
        (wt / f"d{d}" / "sub" / "s.txt").write_text(f"sub {d}\n")
    (wt / "ign").mkdir()
    (wt / "ign" / "kept.txt").write_text("tracked although ignored\n")
    git(wt, "add", "-A")
    git(wt, "add", "-f", "ign/kept.txt")
    git(wt, "commit", "-q", "-m", "base")
    git(wt, "gc", "-q")  # one pack, like a clone
    return wt


def store_git(home: Path, *args: str) -> str:
    return git(home, "--git-dir", str(home / "store.git"), *args)


def skipped(capture) -> dict[str, str]:  # noqa: ANN001 - a store Capture
    return {s["path"]: s["reason"] for s in capture.skipped}


def test_a_clone_s_pack_is_copied_whole_and_survives_the_user_s_gc(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    (user_pack,) = (wt / ".git" / "objects" / "pack").glob("*.pack")
    mode = user_pack.stat().st_mode
    home = tmp_path / "home"
    capture = StatCaches(Store(home)).worktree(wt).capture()
    assert capture.tree == git(wt, "rev-parse", "HEAD^{tree}").strip()
    ours = home / "store.git" / "objects" / "pack" / user_pack.name
    assert ours.read_bytes() == user_pack.read_bytes()
    assert os.stat(ours).st_ino != os.stat(user_pack).st_ino  # a file of the store's own
    assert not list(ours.parent.glob("tmp_*"))
    # The daemon's start-up takes group and other bits off the home's files: not the user's.
    umask = os.umask(0o022)
    try:
        secure_home(home)
    finally:
        os.umask(umask)  # secure_home sets the daemon's: not this test process's
    assert user_pack.stat().st_mode == mode
    # The user's gc drops their pack (a new commit, everything repacked and pruned).
    (wt / "d0" / "f0.txt").write_text("changed\n")
    git(wt, "commit", "-q", "-am", "next")
    git(wt, "repack", "-a", "-d", "-q")
    git(wt, "prune", "--expire=now")
    assert not user_pack.exists()
    store_git(home, "fsck", "--strict", "--no-dangling")
    assert store_git(home, "show", f"{capture.tree}:d0/f0.txt") == "0 0\n"


def test_a_pack_mostly_of_other_objects_is_not_copied_whole(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    # History the worktree no longer holds: most of the pack's objects are not wanted.
    for round_ in range(3):
        for d in range(4):
            for i in range(5):
                (wt / f"d{d}" / f"f{i}.txt").write_text(f"old {round_} {d} {i}\n")
        git(wt, "commit", "-q", "-am", f"old {round_}")
    for d in range(4):
        for i in range(5):
            (wt / f"d{d}" / f"f{i}.txt").write_text(f"{d} {i}\n")
    git(wt, "commit", "-q", "-am", "back")
    git(wt, "gc", "-q")
    (user_pack,) = (wt / ".git" / "objects" / "pack").glob("*.pack")
    home = tmp_path / "home"
    capture = StatCaches(Store(home)).worktree(wt).capture()
    assert capture.tree == git(wt, "rev-parse", "HEAD^{tree}").strip()
    assert not (home / "store.git" / "objects" / "pack" / user_pack.name).exists()
    # 26 blobs and 10 trees, none of the history.
    assert "in-pack: 36" in store_git(home, "count-objects", "-v").splitlines()
    store_git(home, "fsck", "--strict", "--no-dangling")


def test_a_damaged_pack_is_not_copied_whole(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    wt = make_repo(tmp_path / "wt")
    (user_pack,) = (wt / ".git" / "objects" / "pack").glob("*.pack")
    data = bytearray(user_pack.read_bytes())
    data[len(data) // 2] ^= 0xFF
    user_pack.chmod(0o644)
    user_pack.write_bytes(bytes(data))
    home = tmp_path / "home"
    with caplog.at_level(logging.WARNING, logger="snapshotd.seeding"):
        capture = StatCaches(Store(home)).worktree(wt).capture()
    assert "checksums do not match" in caplog.text
    assert not (home / "store.git" / "objects" / "pack" / user_pack.name).exists()
    # What the store holds is the worktree's content, whichever way it got there.
    for d in range(4):
        assert store_git(home, "show", f"{capture.tree}:d{d}/f1.txt") == f"{d} 1\n"
    store_git(home, "fsck", "--strict", "--no-dangling")


def test_special_files_and_unlistable_directories_are_listed_on_a_seeded_capture(
        tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    os.mkfifo(wt / "d0" / "pipe")  # beside the seeded files, nothing else changed there
    os.unlink(wt / "d1" / "f0.txt")  # one name less, one more: the same count as seeded
    os.mkfifo(wt / "d1" / "pipe")
    for path in (wt / "d2" / "sub").iterdir():  # a seeded directory become a FIFO
        path.unlink()
    (wt / "d2" / "sub").rmdir()
    os.mkfifo(wt / "d2" / "sub")
    os.mkfifo(wt / "d3" / "sub" / "pipe")  # deeper, below an unchanged directory
    (wt / "d3" / "closed").mkdir()
    (wt / "d3" / "closed").chmod(0)
    os.mkfifo(wt / "ign" / "pipe")  # ignored, although its directory holds a tracked file
    try:
        capture = StatCaches(Store(tmp_path / "home")).worktree(wt).capture()
    finally:
        (wt / "d3" / "closed").chmod(0o755)
    found = skipped(capture)
    if os.geteuid() != 0:  # root lists any directory
        assert found.pop("d3/closed") == "unreadable"
    assert found == {"d0/pipe": "special", "d1/pipe": "special", "d2/sub": "special",
                     "d3/sub/pipe": "special"}


def test_the_seeded_directories_serve_only_the_capture_after_the_seed(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    index = StatCaches(Store(tmp_path / "home")).worktree(wt)
    os.unlink(wt / "d1" / "f0.txt")
    assert skipped(index.capture()) == {}
    # The cache now holds one name less in d1 than was seeded; a FIFO brings the count back.
    os.mkfifo(wt / "d1" / "pipe")
    assert skipped(index.capture()) == {"d1/pipe": "special"}


def test_dir_shape_of_a_real_index(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt", dirs=2, per_dir=3)
    seed = strip_index((wt / ".git" / "index").read_bytes())
    assert seed is not None and seed.cache_tree is not None
    shape = dir_shape(seed.nodes, seed.count)
    assert shape == {"": (4, ("d0", "d1", "ign")), "d0": (4, ("sub",)), "d0/sub": (1, ()),
                     "d1": (4, ("sub",)), "d1/sub": (1, ()), "ign": (1, ())}
    # A root that does not count the index's entries is not trusted at all.
    assert dir_shape(seed.nodes, seed.count + 1) is None


def test_dir_shape_leaves_out_invalidated_directories(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt", dirs=2, per_dir=3)
    (wt / "d1" / "sub" / "s.txt").write_text("staged\n")
    git(wt, "add", "d1/sub/s.txt")  # git invalidates d1/sub, d1 and the root
    seed = strip_index((wt / ".git" / "index").read_bytes())
    assert seed is not None and seed.cache_tree is not None
    shape = dir_shape(seed.nodes, seed.count)
    assert shape == {"d0": (4, ("sub",)), "d0/sub": (1, ()), "ign": (1, ())}
    root = [b"", 3, 0, b"x" * 20]
    assert dir_shape([root, list(root)], 3) is None  # a second root
    assert dir_shape([[b"", 3, 1, b"x" * 20]], 3) is None  # a subtree never given


def test_the_credential_name_gate_finds_every_candidate_in_any_case(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    index = (wt / ".git" / "index").read_bytes()
    assert not may_name_secret_files(index)
    names = [".env.local", "keys/id_ed25519", "a/b.KEY", "c.p12", "d.pfx", "e.Pem", "sa.json",
             "x/kubeconfig-prod", ".netrc", "_netrc", ".npmrc", ".pypirc", ".aws/credentials",
             ".kube/config", "ID_RSA", "id_ecdsa.pub", "id_dsa"]
    for name in names:
        assert may_name_secret_files(index + name.encode() + b"\0"), name
        assert may_name_secret_files(index + name.upper().encode() + b"\0"), name
    assert not may_name_secret_files(index + b"src/keyboard.c\0docs/json.md\0")
