"""``trees.rewrite_tree`` gives exactly the tree libgit2 writes from the whole index, with the
counts of ``compute_tree_changes``: for wide directories rewritten as raw bytes (replaced and
removed entries), for names whose bytes also occur inside other entries (where it must not
splice the wrong entry), and for the changes it hands to libgit2's tree builder (added
entries, a file turned symlink or executable, a directory gone)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from random import Random

import pygit2
import pytest

from snapshotd.store import trees
from snapshotd.store.loose import StoredObjects
from snapshotd.store.trees import TreeShapeChanged, compute_tree_changes, rewrite_tree

BLOB = pygit2.GIT_FILEMODE_BLOB
EXEC = pygit2.GIT_FILEMODE_BLOB_EXECUTABLE
LINK = pygit2.GIT_FILEMODE_LINK
# Names whose bytes occur inside other names' entries: " b\0" is in "a b\0", "100644 x\0" in
# "y 100644 x\0"; a splice that trusted the first match would edit the wrong entry.
TRICKY = ["b", "a b", "x", "y 100644 x", "40000 d", "d", "z\x01", "e.txt", "e.txt.bak"]
# Entries enough to make a directory wide (rewritten as raw bytes rather than by libgit2's
# tree builder).
WIDE = 600
SIG = pygit2.Signature("t", "t@localhost", 1764590000, 0)


def _repo(tmp_path: Path) -> pygit2.Repository:
    return pygit2.init_repository(str(tmp_path / "store.git"), bare=True)


def _index(repo: pygit2.Repository, files: dict[str, tuple[bytes, int]]) -> pygit2.Index:
    index = pygit2.Index()
    for path, (body, mode) in files.items():
        index.add(pygit2.IndexEntry(path, repo.create_blob(body), mode))
    return index


def _check(repo: pygit2.Repository, index: pygit2.Index, base: str, changed: set[str]) -> str:
    # Written as the daemon writes them: narrow trees deflated and wide ones stored by ``loose``.
    stored = StoredObjects(Path(repo.path) / "objects", fsync=False)
    tree, counts = rewrite_tree(repo, index, base, changed, stored)
    assert tree == str(index.write_tree(repo)), f"rewrite of {sorted(changed)} diverged"
    assert counts == compute_tree_changes(repo, base, tree)
    return tree


def test_wide_directory_replace_and_remove(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    files = {f"d{i:04d}/s/f{i}.txt": (f"file {i}\n".encode(), BLOB) for i in range(3000)}
    files.update({f"top{i}.txt": (b"top\n", BLOB) for i in range(50)})
    index = _index(repo, files)
    base = str(index.write_tree(repo))
    # One file deep under the wide root: every directory on its path is replaced in place.
    index.add(pygit2.IndexEntry("d0007/s/f7.txt", repo.create_blob(b"changed\n"), BLOB))
    base = _check(repo, index, base, {"d0007/s/f7.txt"})
    # Files removed at the root and deep down, one directory left empty (it disappears).
    index.remove("top3.txt")
    index.remove("d2999/s/f2999.txt")
    base = _check(repo, index, base, {"top3.txt", "d2999/s/f2999.txt"})
    assert "d2999" not in repo[base].peel(pygit2.Tree)
    # The same content written again: nothing counted, the same tree.
    index.add(pygit2.IndexEntry("d0008/s/f8.txt", repo.create_blob(b"file 8\n"), BLOB))
    tree, counts = rewrite_tree(repo, index, base, {"d0008/s/f8.txt"})
    assert (tree, counts) == (base, (0, 0, 0))


def test_names_hidden_in_other_entries(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    files = {name: (f"{name}\n".encode(), BLOB) for name in TRICKY}
    files.update({f"pad{i}": (b"pad\n", BLOB) for i in range(WIDE)})
    files.update({f"{name}/in": (b"in\n", BLOB) for name in ("q b", "q")})
    index = _index(repo, files)
    base = str(index.write_tree(repo))
    for name in TRICKY:
        index.add(pygit2.IndexEntry(name, repo.create_blob(f"new {name}\n".encode()), BLOB))
        base = _check(repo, index, base, {name})
    index.add(pygit2.IndexEntry("q/in", repo.create_blob(b"new in\n"), BLOB))
    base = _check(repo, index, base, {"q/in"})
    index.remove("b")
    _check(repo, index, base, {"b"})


def test_builder_cases(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    index = _index(repo, {f"w/f{i}": (b"x\n", BLOB) for i in range(100)})
    base = str(index.write_tree(repo))
    index.add(pygit2.IndexEntry("w/new", repo.create_blob(b"new\n"), BLOB))  # added
    index.add(pygit2.IndexEntry("w/f1", repo.create_blob(b"x\n"), EXEC))  # mode only
    index.add(pygit2.IndexEntry("w/f2", repo.create_blob(b"target"), LINK))
    index.add(pygit2.IndexEntry("n/e/w", repo.create_blob(b"deep new\n"), BLOB))
    base = _check(repo, index, base, {"w/new", "w/f1", "w/f2", "n/e/w"})
    # A directory where a file was: the caller rebuilds from the index.
    index.remove("w/f3")
    index.add(pygit2.IndexEntry("w/f3/inner", repo.create_blob(b"i\n"), BLOB))
    with pytest.raises(TreeShapeChanged):
        rewrite_tree(repo, index, base, {"w/f3", "w/f3/inner"})


@pytest.mark.parametrize("pad", [0, WIDE])
def test_a_name_inside_another_entry_is_not_that_entry(tmp_path: Path, pad: int) -> None:
    """"y 100644 x\0" holds the bytes of an entry "x" that is not there: adding "x" must add
    an entry, not rewrite "y 100644 x" (narrow and wide trees alike)."""
    repo = _repo(tmp_path)
    files = {"y 100644 x": (b"y\n", BLOB), "z 40000 q": (b"z\n", BLOB)}
    files.update({f"pad{i}": (b"pad\n", BLOB) for i in range(pad)})
    index = _index(repo, files)
    base = str(index.write_tree(repo))
    index.add(pygit2.IndexEntry("x", repo.create_blob(b"x\n"), BLOB))
    index.add(pygit2.IndexEntry("q/in", repo.create_blob(b"in\n"), BLOB))
    base = _check(repo, index, base, {"x", "q/in"})
    index.add(pygit2.IndexEntry("x", repo.create_blob(b"x again\n"), EXEC))
    base = _check(repo, index, base, {"x"})
    index.remove("x")
    _check(repo, index, base, {"x"})


def test_added_entries_go_where_git_sorts_them(tmp_path: Path) -> None:
    """A tree sorts as if its name ended in "/": "a.txt" < "a/" < "a0" (git's order, not the
    names' own); added files and directories land there, one or several at a time."""
    repo = _repo(tmp_path)
    index = _index(repo, {"a.txt": (b"1\n", BLOB), "a0": (b"2\n", BLOB), "b/x": (b"3\n", BLOB)})
    base = str(index.write_tree(repo))
    for batch in (["a/x"], ["a-b", "a/y", "aa", "0"], ["b.txt", "b0", "b/a", "c/d/e"], ["a "]):
        for path in batch:
            index.add(pygit2.IndexEntry(path, repo.create_blob(path.encode()), BLOB))
        base = _check(repo, index, base, set(batch))
    index.remove("a/x")
    index.remove("a/y")
    _check(repo, index, base, {"a/x", "a/y"})


@pytest.mark.parametrize("per_dir", [30, 1000])
def test_random_changes_match_the_index(tmp_path: Path, per_dir: int) -> None:
    repo = _repo(tmp_path)
    rng = Random(21)
    names = [f"d{i}/f{j}" for i in range(2000 // per_dir) for j in range(per_dir)] + TRICKY
    index = _index(repo, {n: (b"0\n", BLOB) for n in names if rng.random() < 0.7})
    base = str(index.write_tree(repo))
    for step in range(60):
        changed = set(rng.sample(names, rng.randint(1, 6)))
        for path in changed:
            if path in index and rng.random() < 0.3:
                index.remove(path)
            else:
                mode = rng.choice([BLOB, BLOB, BLOB, EXEC, LINK])
                index.add(pygit2.IndexEntry(path, repo.create_blob(b"%d\n" % step), mode))
        base = _check(repo, index, base, changed)
    # Every tree written on the way (deflated or stored by ``loose``) is one git accepts.
    repo.references.create("refs/heads/last", repo.create_commit(
        None, SIG, SIG, "last\n", pygit2.Oid(hex=base), []))
    subprocess.run(["git", "--git-dir", repo.path, "fsck", "--strict", "--no-dangling"],
                   check=True, capture_output=True)


def test_entry_spans_carry_over_in_place_rewrites_only(tmp_path: Path, monkeypatch) -> None:
    """A wide root rewritten in place (ids and modes replaced) keeps its entries where they
    were, so the next capture of the same names finds them without searching the bytes; a
    rewrite that removes an entry moves the rest, and nothing it learnt is trusted after it.
    Every tree is still exactly the index's."""
    repo = _repo(tmp_path)
    files = {name: (f"{name}\n".encode(), BLOB) for name in TRICKY}
    files.update({f"pad{i}": (b"pad\n", BLOB) for i in range(WIDE)})
    files.update({f"dir{i}/f": (b"f\n", BLOB) for i in range(20)})
    index = _index(repo, files)
    base = str(index.write_tree(repo))
    searches: list[bytes] = []
    splits: list[int] = []
    real_find = trees._find_entry
    real_ends = trees._entry_ends

    def counted(raw: bytes, name: bytes):
        if len(raw) >= trees._WIDE_BYTES:  # the root's searches (a narrow tree keeps no spans)
            searches.append(name)
        return real_find(raw, name)

    def split(raw: bytes):
        if len(raw) >= trees._WIDE_BYTES:
            splits.append(len(raw))
        return real_ends(raw)

    monkeypatch.setattr(trees, "_find_entry", counted)
    monkeypatch.setattr(trees, "_entry_ends", split)
    # Names whose bytes occur once in the root (an ambiguous one goes to libgit2's builder).
    names = ("a b", "dir3/f", "e.txt")
    for step, mode in enumerate([BLOB, EXEC, BLOB, LINK, BLOB]):
        for name in names:
            index.add(pygit2.IndexEntry(name, repo.create_blob(b"%d\n" % step),
                                        BLOB if "/" in name else mode))
        searches.clear()
        splits.clear()
        base = _check(repo, index, base, set(names))
        # The first rewrite searches each name once and splits the root once, to be sure
        # each is found where an entry starts; the in-place ones after it, never.
        assert sorted(searches) == ([] if step else [b"a b", b"dir3", b"e.txt"])
        assert len(splits) == (0 if step else 1)
    # A name not looked up before is searched, and found where an entry starts by the entry
    # ends carried over the in-place rewrites: the root is not split again.
    index.add(pygit2.IndexEntry("pad5", repo.create_blob(b"pad 5 changed\n"), BLOB))
    searches.clear()
    splits.clear()
    base = _check(repo, index, base, {"pad5"})
    assert (searches, splits) == ([b"pad5"], [])
    index.remove("pad7")  # the root shrinks: every entry after pad7 moves
    base = _check(repo, index, base, {"pad7"})
    index.add(pygit2.IndexEntry("e.txt", repo.create_blob(b"after the removal\n"), BLOB))
    searches.clear()
    splits.clear()
    _check(repo, index, base, {"e.txt"})
    assert searches == [b"e.txt"]  # searched again: the old spans were not carried
    assert len(splits) == 1  # nor where its entries end
