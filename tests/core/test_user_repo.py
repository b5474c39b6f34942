"""``user_repo.strip_index`` on indexes git itself wrote: every entry's blob id listed (gitlinks
left out), assume-valid and skip-worktree cleared in the copy (libgit2 then checks those files'
stats like any other), a name longer than the 12-bit length field found by its NUL, and the
indexes it must refuse (intent-to-add, a merge in conflict) refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pygit2
import pytest

from snapshotd.core.user_repo import head_commit, repo_info_exclude, strip_index, user_gitdir
from tests.conftest import make_git_worktree


def _git(wt: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=wt, check=True, capture_output=True,
                          text=True).stdout


def _seed(wt: Path):
    return strip_index((wt / ".git" / "index").read_bytes())


def _copy(seed, tmp_path: Path) -> pygit2.Index:
    path = tmp_path / "copy-index"
    path.write_bytes(seed.index_file(with_cache_tree=True))
    return pygit2.Index(str(path))


def test_blobs_flags_and_long_names(tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    (wt / "b.txt").write_text("b\n")
    (wt / "same.txt").write_text("a\n")
    sub = make_git_worktree(tmp_path / "sub")
    (sub / "s.txt").write_text("s\n")
    _git(sub, "add", "s.txt")
    _git(sub, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "s")
    _git(wt, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "sub")
    _git(wt, "add", "-A")
    # A path over 4,095 bytes (longer than the file system lets us create: staged by id): the
    # entry's 12-bit name length says 0xFFF, and its NUL ends it.
    long_path = "/".join(f"{i:02d}" + "d" * 238 for i in range(18)) + "/long.txt"
    blob = _git(wt, "hash-object", "-w", "a.txt").strip()
    _git(wt, "update-index", "--add", "--cacheinfo", f"100644,{blob},{long_path}")
    _git(wt, "update-index", "--assume-unchanged", "a.txt")
    _git(wt, "update-index", "--skip-worktree", "b.txt")
    seed = _seed(wt)
    assert seed is not None
    listed: dict[str, tuple[str, str]] = {}  # path: (mode, id)
    for line in _git(wt, "ls-files", "-s", "-z").split("\0"):
        if line:
            meta, path = line.split("\t", 1)
            mode, oid, _stage = meta.split()
            listed[path] = (mode, oid)
    assert any(len(path.encode()) > 0xFFF for path in listed)
    assert seed.count == len(listed)
    assert {p for p, (mode, _) in listed.items() if mode == "160000"} == {"sub"}
    assert sorted(oid.hex() for oid in seed.blobs) == sorted(
        oid for mode, oid in listed.values() if mode != "160000")
    copy = _copy(seed, tmp_path)
    assert sorted(e.path for e in copy) == sorted(listed)
    flags = {e.path: e for e in copy}
    # libgit2 keeps no assume-valid / skip-worktree bits for the copy's entries.
    raw = (tmp_path / "copy-index").read_bytes()
    assert strip_index(raw) is not None
    for path in ("a.txt", "b.txt"):
        assert str(flags[path].id) == listed[path][1]
    ls = subprocess.run(["git", "ls-files", "-v"], cwd=wt, check=True, capture_output=True,
                        text=True, env={"GIT_INDEX_FILE": str(tmp_path / "copy-index"),
                                        "PATH": "/usr/bin:/bin"}).stdout.splitlines()
    tags = {line[2:]: line[0] for line in ls}
    assert tags["a.txt"] == "H" and tags["b.txt"] == "H", tags  # not "h" nor "S"


def test_intent_to_add_and_conflicts_are_refused(tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "new.txt").write_text("new\n")
    _git(wt, "add", "-N", "new.txt")
    assert _seed(wt) is None
    _git(wt, "reset", "-q")
    (wt / "new.txt").unlink()
    (wt / "f.txt").write_text("base\n")
    _git(wt, "add", "f.txt")
    _git(wt, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base")
    _git(wt, "checkout", "-qb", "other")
    (wt / "f.txt").write_text("other\n")
    _git(wt, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "other")
    _git(wt, "checkout", "-q", "-")
    (wt / "f.txt").write_text("mine\n")
    _git(wt, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "mine")
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "merge", "-q", "other"],
                   cwd=wt, capture_output=True)
    assert "U" in _git(wt, "status", "--porcelain")
    assert _seed(wt) is None


def test_a_git_file_too_large_for_git_names_no_repository(tmp_path: Path) -> None:
    """A ``.git`` file names its repository in a line; git refuses one over 1 MB ("too large to
    be a .git file") without reading it. Ours read it whole on every capture's path: a sparse
    ``.git`` of 3 GB took 25 s and 3 GB of memory a capture."""
    real = make_git_worktree(tmp_path / "real")
    wt = tmp_path / "wt"
    wt.mkdir()
    line = f"gitdir: {real / '.git'}\n".encode()
    (wt / ".git").write_bytes(line)
    assert user_gitdir(wt) == real / ".git"
    (wt / ".git").write_bytes(line + b"\n" * (1 << 20))
    refused = subprocess.run(["git", "rev-parse", "--git-dir"], cwd=wt, capture_output=True,
                             text=True)
    assert refused.returncode != 0 and "too large" in refused.stderr
    assert user_gitdir(wt) is None
    with open(wt / ".git", "r+b") as f:  # a sparse file of 1.5 GB: nothing is read of it
        f.truncate(3 << 29)
    assert user_gitdir(wt) is None and repo_info_exclude(wt) is None


def test_a_giant_ref_file_is_no_ref_and_is_not_read_whole(tmp_path: Path) -> None:
    """HEAD's branch file made a sparse 1.5 GB file: refused as no ref file (git says it is not
    a valid ref), not read into memory."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    _git(wt, "add", "-A")
    _git(wt, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    assert head_commit(wt / ".git") == _git(wt, "rev-parse", "HEAD").strip()
    with open(wt / ".git" / "refs" / "heads" / "main", "r+b") as f:
        f.truncate(3 << 29)
    with pytest.raises(ValueError, match="not a ref file"):
        head_commit(wt / ".git")
