"""The one diff engine (``snapshotd.features.review.diff.render_trees``, behind the CLI, the MCP
tools and the web app) against git's own tree diff (``git diff -M``) on random trees in a real
bare repository: same files, statuses, counts and patch text, renames included."""

from __future__ import annotations

import os
import random
import re
import subprocess
from pathlib import Path

import pygit2
import pytest

from snapshotd.features.review.diff import render_trees

# git run with no user or system configuration, whatever the machine has.
GIT_ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_CONFIG_GLOBAL": os.devnull, "HOME": os.devnull, "LC_ALL": "C"}


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


def git_diff(repo: pygit2.Repository, a: str, b: str, *args: str) -> str:
    return subprocess.run(["git", "--git-dir", repo.path, "-c", "core.quotePath=false", "diff",
                           "-M", "--no-color", *args, a, b], env=GIT_ENV, capture_output=True,
                          check=True).stdout.decode()


def scoreless(patch: str) -> str:
    return re.sub(r"(?m)^similarity index \d+%$", "similarity index N%", patch)


def name_status(files: list[dict]) -> list[list[str]]:
    return [[f["status"], *([f["old_path"]] if f["old_path"] else []), f["path"]]
            for f in files]


@pytest.mark.parametrize("seed", range(12))
def test_same_as_git(tmp_path: Path, seed: int) -> None:
    rnd = random.Random(seed)
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    before = random_files(rnd, 60)
    after = dict(before)
    for path in rnd.sample(sorted(before), 10):
        action = rnd.random()
        if action < 0.3:
            del after[path]
        elif action < 0.5:  # moved, and edited on the way now and then
            data = after.pop(path)
            after[f"moved/{rnd.randrange(3)}/{path.rsplit('/', 1)[1]}"] = (
                data + b"tail\n" if rnd.random() < 0.5 else data)
        else:
            after[path] = before[path] + f"edit {seed}\n".encode()
    for i in range(rnd.randrange(6)):
        after[f"new{rnd.randrange(3)}/n{i}.txt"] = f"new {i} {seed}\n".encode()
    if seed % 3 == 0:  # a directory replaced by a file of the same name
        after = {p: d for p, d in after.items() if not p.startswith("d0/")}
        after["d0"] = b"now a file\n"
    a, b = write_tree(repo, before), write_tree(repo, after)
    ours = render_trees(repo, a, b)
    want = [line.split("\t") for line in git_diff(repo, a, b, "--name-status").splitlines()]
    assert name_status(ours["files"]) == [[s[0][0], *s[1:]] for s in want]
    # libgit2 scores the similarity of small edited files a little apart from git.
    assert scoreless(ours["patch"]) == scoreless(git_diff(repo, a, b))
    assert ours["stats"]["files_changed"] == len(ours["files"])
    assert render_trees(repo, a, a)["files"] == []


def test_a_moved_file_is_a_rename(tmp_path: Path) -> None:
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    a = write_tree(repo, {"src/a.py": b"x = 1\n", "b.txt": b"b\n"})
    b = write_tree(repo, {"lib/a.py": b"x = 1\n", "b.txt": b"b\n"})
    out = render_trees(repo, a, b)
    assert out["files"] == [{"status": "R", "path": "lib/a.py", "old_path": "src/a.py",
                             "additions": 0, "deletions": 0, "binary": False}]
    assert "rename from src/a.py\nrename to lib/a.py\n" in out["patch"]


def test_a_moved_and_edited_file_is_a_rename(tmp_path: Path) -> None:
    # What the web app's own tree walk showed as D + A: the CLI's engine finds it similar.
    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    body = b"".join(b"line %d\n" % i for i in range(30))
    a = write_tree(repo, {"src/a.py": body})
    b = write_tree(repo, {"lib/a.py": body + b"one more\n"})
    out = render_trees(repo, a, b)
    assert out["files"] == [{"status": "R", "path": "lib/a.py", "old_path": "src/a.py",
                             "additions": 1, "deletions": 0, "binary": False}]
