"""``snapshotd.ui.treediff`` against libgit2's full tree diff (``snapshotd.features.review.diff.render_trees``)
on random trees in a real bare repository: same files, counts and patch text."""

from __future__ import annotations

import random
from pathlib import Path

import pygit2
import pytest

from snapshotd.features.review.diff import render_trees
from snapshotd.ui.treediff import diff_trees


def write_tree(repo: pygit2.Repository, files: dict[str, bytes]) -> str:
    nested: dict = {}
    for path, data in files.items():
        node = nested
        *dirs, name = path.split("/")
        for d in dirs:
            node = node.setdefault(d, {})
        node[name] = data

    def build(node: dict) -> pygit2.Oid:
        tb = repo.TreeBuilder()
        for name, value in node.items():
            if isinstance(value, dict):
                tb.insert(name, build(value), pygit2.enums.FileMode.TREE)
            else:
                tb.insert(name, repo.create_blob(value), pygit2.enums.FileMode.BLOB)
        return tb.write()

    return str(build(nested))


def random_files(rnd: random.Random, n: int) -> dict[str, bytes]:
    return {f"d{rnd.randrange(4)}/s{rnd.randrange(3)}/f{i}.txt":
            f"file {i}\n".encode() + b"line\n" * rnd.randrange(5) for i in range(n)}


@pytest.mark.parametrize("seed", range(12))
def test_same_as_libgit2_without_renames(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    before = random_files(rnd, 60)
    after = dict(before)
    for path in rnd.sample(sorted(before), 10):
        action = rnd.random()
        if action < 0.4:
            del after[path]
        else:
            after[path] = before[path] + f"edit {seed}\n".encode()
    for i in range(rnd.randrange(6)):
        after[f"new{rnd.randrange(3)}/n{i}.txt"] = f"new {i} {seed}\n".encode()
    if seed % 3 == 0:  # a directory replaced by a file of the same name
        after = {p: d for p, d in after.items() if not p.startswith("d0/")}
        after["d0"] = b"now a file\n"
    a, b = write_tree(repo, before), write_tree(repo, after)
    ours, theirs = diff_trees(repo, a, b), render_trees(repo, a, b)
    assert ours["files"] == theirs["files"]
    assert ours["stats"] == theirs["stats"]
    assert ours["patch"] == theirs["patch"]
    assert diff_trees(repo, a, a)["files"] == []


def test_a_moved_file_is_a_rename(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    a = write_tree(repo, {"src/a.py": b"x = 1\n", "b.txt": b"b\n"})
    b = write_tree(repo, {"lib/a.py": b"x = 1\n", "b.txt": b"b\n"})
    out = diff_trees(repo, a, b)
    assert out["files"] == [{"status": "R", "path": "lib/a.py", "old_path": "src/a.py",
                             "additions": 0, "deletions": 0, "binary": False}]
    assert "rename from src/a.py\nrename to lib/a.py\n" in out["patch"]
