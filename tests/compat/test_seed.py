"""First capture of a git worktree is seeded from the repository's own index and objects."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import pytest

from snapshotd.capture.stat_caches import StatCaches
from snapshotd.core.user_repo import valid_cache_tree
from snapshotd.store.store import Store
from tests.conftest import git, make_git_worktree


def make_repo(root: Path, files: int = 300) -> Path:
    wt = make_git_worktree(root)
    (wt / ".gitignore").write_text("*.log\nbuild/\n")
    for i in range(files):
        d = wt / f"d{i % 7}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_text(f"file {i}\n")
    (wt / "tracked.log").write_text("tracked although ignored\n")
    git(wt, "add", "-A")
    git(wt, "add", "-f", "tracked.log")
    git(wt, "commit", "-q", "-m", "base")
    git(wt, "gc", "-q")  # packed, like a clone
    return wt


def test_clean_checkout_is_exactly_the_commit_tree(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    before = sorted(p.name for p in (wt / ".git").rglob("*"))
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    capture = caches.worktree(wt).capture()
    assert capture.tree == git(wt, "rev-parse", "HEAD^{tree}").strip()
    # Seeded: the blobs arrived as one pack copied from the repository, not hashed one by one.
    packs = list((tmp_path / "home" / "store.git" / "objects" / "pack").glob("*.pack"))
    assert len(packs) == 1
    assert sorted(p.name for p in (wt / ".git").rglob("*")) == before
    git(tmp_path, "--git-dir", str(tmp_path / "home" / "store.git"), "fsck", "--strict")


def test_dirty_checkout_differences_are_hashed(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    (wt / "d1" / "f1.txt").write_text("modified\n")
    os.unlink(wt / "d2" / "f2.txt")
    (wt / "new.txt").write_text("untracked\n")
    (wt / "tracked.log").write_text("tracked, ignored, modified\n")
    (wt / "x.log").write_text("ignored\n")
    git(wt, "update-index", "--assume-unchanged", "d3/f3.txt")
    (wt / "d3" / "f3.txt").write_text("assume-unchanged but changed\n")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    capture = caches.worktree(wt).capture()
    tree = git(tmp_path, "--git-dir", str(tmp_path / "home" / "store.git"), "ls-tree", "-r",
               "--name-only", capture.tree).split()
    show = ["--git-dir", str(tmp_path / "home" / "store.git"), "show"]
    assert git(tmp_path, *show, f"{capture.tree}:d1/f1.txt") == "modified\n"
    assert "d2/f2.txt" not in tree and "new.txt" in tree and "x.log" not in tree
    assert git(tmp_path, *show, f"{capture.tree}:tracked.log") == "tracked, ignored, modified\n"
    assert git(tmp_path, *show, f"{capture.tree}:d3/f3.txt") == "assume-unchanged but changed\n"
    git(tmp_path, "--git-dir", str(tmp_path / "home" / "store.git"), "fsck", "--strict")


def test_unsupported_index_falls_back_to_a_cold_build(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt", files=40)
    git(wt, "update-index", "--index-version", "4")
    (wt / "new.txt").write_text("n\n")
    capture = StatCaches(Store(tmp_path / "home")).worktree(wt).capture()
    tree = git(tmp_path, "--git-dir", str(tmp_path / "home" / "store.git"), "ls-tree", "-r",
               "--name-only", capture.tree).split()
    assert "new.txt" in tree and "tracked.log" in tree and len(tree) == 43


def staged_tree(wt: Path, scratch: Path) -> str:
    """The oracle: ``git add -A && git write-tree`` on a copy of the repository's index."""
    scratch.write_bytes((wt / ".git" / "index").read_bytes())
    git(wt, "add", "-A", env={"GIT_INDEX_FILE": str(scratch)})
    return git(wt, "write-tree", env={"GIT_INDEX_FILE": str(scratch)}).strip()


def store_git(tmp_path: Path, *args: str) -> str:
    return git(tmp_path, "--git-dir", str(tmp_path / "home" / "store.git"), *args)


def assert_complete(tmp_path: Path, tree: str) -> None:
    """Every tree and blob under ``tree`` is in the store (no hole left by a reused tree)."""
    listing = store_git(tmp_path, "ls-tree", "-r", "-t", tree).splitlines()
    oids = [line.split()[2] for line in listing if line.split()[1] in ("blob", "tree")]
    proc = subprocess.run(["git", "--git-dir", str(tmp_path / "home" / "store.git"), "cat-file",
                           "--batch-check"], input="\n".join(oids) + "\n", capture_output=True,
                          text=True, check=True)
    assert "missing" not in proc.stdout and len(proc.stdout.splitlines()) == len(oids)


def test_cache_tree_is_reused_and_its_trees_copied(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    for twin in ("twin1", "twin2"):  # identical directories: one tree id, named twice
        (wt / twin).mkdir()
        (wt / twin / "same.txt").write_text("same\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "twins")
    # Staged but uncommitted: git invalidated d4 and the root in the index's cache-tree.
    (wt / "d4" / "f4.txt").write_text("staged\n")
    git(wt, "add", "d4/f4.txt")
    # Not staged: the cache-tree still vouches for d5, which no longer matches the worktree.
    (wt / "d5" / "f5.txt").write_text("unstaged\n")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    capture = caches.worktree(wt).capture()
    assert capture.tree == staged_tree(wt, tmp_path / "oracle-index")
    assert store_git(tmp_path, "show", f"{capture.tree}:d5/f5.txt") == "unstaged\n"
    # The unchanged directories' trees came with the copy, not from a tree write.
    d0 = git(wt, "rev-parse", "HEAD:d0").strip()
    assert store_git(tmp_path, "rev-parse", f"{capture.tree}:d0").strip() == d0
    assert not (tmp_path / "home" / "store.git" / "objects" / d0[:2] / d0[2:]).exists()
    twin = git(wt, "rev-parse", "HEAD:twin1").strip()
    assert not (tmp_path / "home" / "store.git" / "objects" / twin[:2] / twin[2:]).exists()
    assert_complete(tmp_path, capture.tree)


def test_cache_tree_naming_a_lost_tree_falls_back_to_the_blobs(tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    (wt / "d3" / "f3.txt").write_text("staged\n")
    git(wt, "add", "d3/f3.txt")
    tree = git(wt, "write-tree").strip()  # loose, and the index's cache-tree names it
    (wt / ".git" / "objects" / tree[:2] / tree[2:]).unlink()  # as if gc'd after a reset
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    capture = caches.worktree(wt).capture()
    assert_complete(tmp_path, capture.tree)
    assert capture.tree == tree  # written from the entries, identical to git's
    # Still seeded (the blobs arrived in packs), not built cold (which writes each loose).
    blob = git(wt, "rev-parse", "HEAD:d0/f0.txt").strip()
    assert not (tmp_path / "home" / "store.git" / "objects" / blob[:2] / blob[2:]).exists()


def test_second_worktree_of_a_repository_copies_only_what_the_store_lacks(
        tmp_path: Path) -> None:
    wt = make_repo(tmp_path / "wt")
    clone = tmp_path / "clone"
    git(tmp_path, "clone", "-q", str(wt), str(clone))
    (clone / "d6" / "f6.txt").write_text("only in the clone\n")
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "clone change")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    caches.worktree(wt).capture()
    pack_dir = tmp_path / "home" / "store.git" / "objects" / "pack"
    first = set(pack_dir.glob("*.idx"))
    capture = caches.worktree(clone).capture()
    assert capture.tree == git(clone, "rev-parse", "HEAD^{tree}").strip()
    packs = set(pack_dir.glob("*.idx")) - first
    assert len(packs) == 1
    with packs.pop().open("rb") as idx:
        listed = subprocess.run(["git", "show-index"], stdin=idx, capture_output=True,
                                check=True).stdout.splitlines()
    assert len(listed) == 3  # the new blob, d6's tree and the root: no object stored twice
    assert_complete(tmp_path, capture.tree)


def test_an_inconsistent_cache_tree_is_trusted_only_where_complete() -> None:
    def node(path: bytes, entries: int, subtrees: int, oid: bytes | None) -> bytes:
        return path + b"\0" + f"{entries} {subtrees}\n".encode() + (oid or b"")

    # Root and "a" claim to be valid although "a/b" below them is not.
    body = (node(b"", 3, 1, b"\1" * 20) + node(b"a", 2, 1, b"\2" * 20)
            + node(b"b", -1, 0, None))
    parsed = valid_cache_tree(body)
    assert parsed is not None
    rewritten, nodes = parsed
    assert [node[3] for node in nodes] == [None, None, None]
    assert rewritten == node(b"", -1, 1, None) + node(b"a", -1, 1, None) + node(b"b", -1, 0, None)
    assert valid_cache_tree(node(b"", 3, 2, b"\1" * 20)) is None  # subtrees missing


@pytest.mark.parametrize("planted", ["index", "config", "pack"])
def test_a_fifo_in_the_users_git_dir_never_stalls_the_first_capture(tmp_path: Path,
                                                                      planted: str) -> None:
    """A FIFO where the seed (or git run in the user's repository for it) reads: the index,
    the config, a pack. Before, the first capture waited on it for good; now the seed gives
    up or leaves that pack out, and the capture is exact."""
    wt = make_repo(tmp_path / "wt", files=20)
    git(wt, "gc", "-q")  # objects in a pack, as in a clone
    # Read before the FIFO is planted: git itself would wait on it.
    head_tree = git(wt, "rev-parse", "HEAD^{tree}").strip()
    committed = git(wt, "ls-tree", "-r", "HEAD")
    if planted == "pack":
        [pack] = (wt / ".git" / "objects" / "pack").glob("pack-*.pack")
        target = pack
    else:
        target = wt / ".git" / planted
    target.unlink()
    os.mkfifo(target)
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(caches.worktree(wt).capture()),
                              daemon=True)
    worker.start()
    worker.join(timeout=60)
    if not outcome:  # release whoever waits on the FIFO (a reader gets end of file), then fail
        try:
            os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass  # nobody was waiting on it
    assert outcome, f"the first capture stalled on a FIFO at .git/{planted}"
    [capture] = outcome
    if planted == "index":
        # Unreadable, the index cannot say that the ignored tracked.log is tracked (git
        # cannot either): the capture is the commit's files the rules let in, all of them.
        captured = git(tmp_path, "--git-dir", str(store.path), "ls-tree", "-r", capture.tree)
        assert captured.splitlines() == [line for line in committed.splitlines()
                                         if not line.endswith("\ttracked.log")]
    else:
        assert capture.tree == head_tree
