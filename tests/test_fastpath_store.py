"""The O(changes) capture agrees with a from-scratch full capture after every step of a long
randomized workload (fixed seed, bounded count), given the paths a watcher would report."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from random import Random

from conftest import git, make_git_worktree
from snapshotd.store import Store
from snapshotd.trees import compute_tree_changes, tree_changes

STEPS = 250
SEED = 8


class Workload:
    """Random file-system operations; each returns the paths an inotify watcher reports."""

    def __init__(self, root: Path, rng: Random) -> None:
        self.root = root
        self.rng = rng

    def files(self) -> list[str]:
        out = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            if ".git" in dirnames:
                dirnames.remove(".git")
            for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
                out.append(os.path.relpath(os.path.join(dirpath, name), self.root))
        return sorted(out)

    def dirs(self) -> list[str]:
        out = []
        for dirpath, dirnames, _ in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if d != ".git"
                           and not os.path.islink(os.path.join(dirpath, d))]
            out.extend(os.path.relpath(os.path.join(dirpath, d), self.root) for d in dirnames)
        return sorted(out)

    def step(self) -> set[str]:
        r = self.rng
        op = r.choice(["create", "create", "modify", "modify", "delete", "rename", "chmod",
                       "symlink", "nested", "rmdir", "ignored", "burst"])
        files = [f for f in self.files() if not f.startswith("ignored_dir")]
        if op == "create" or not files:
            base = r.choice(["", *self.dirs()])
            rel = os.path.join(base, f"f{r.randrange(10**6)}.txt")
            (self.root / rel).write_text(f"{r.random()}\n")
            return {rel}
        if op == "modify":
            rel = r.choice(files)
            if os.path.islink(self.root / rel):
                return set()
            (self.root / rel).write_text(f"changed {r.random()}\n")
            return {rel}
        if op == "delete":
            rel = r.choice(files)
            os.unlink(self.root / rel)
            return {rel}
        if op == "rename":
            rel = r.choice(files)
            dest = os.path.join(r.choice(["", *self.dirs()]), f"r{r.randrange(10**6)}")
            os.rename(self.root / rel, self.root / dest)
            return {rel, dest}
        if op == "chmod":
            rel = r.choice(files)
            if os.path.islink(self.root / rel):
                return set()
            os.chmod(self.root / rel, r.choice([0o644, 0o755]))
            return {rel}
        if op == "symlink":
            rel = f"l{r.randrange(10**6)}"
            os.symlink(r.choice(files), self.root / rel)
            return {rel}
        if op == "nested":
            top = f"n{r.randrange(10**6)}"
            deep = self.root / top / "a" / "b"
            deep.mkdir(parents=True)
            for i in range(r.randrange(1, 6)):
                (deep / f"x{i}").write_text(str(i))
            return {top}  # inotify reports the new top directory; its files may be missed
        if op == "rmdir":
            dirs = [d for d in self.dirs() if d.startswith("n") and "/" not in d]
            if not dirs:
                return set()
            d = r.choice(dirs)
            shutil.rmtree(self.root / d)
            return {d}
        if op == "ignored":
            (self.root / "ignored_dir").mkdir(exist_ok=True)
            (self.root / "ignored_dir" / "junk").write_text(str(r.random()))
            (self.root / "x.log").write_text("log")
            return {"ignored_dir/junk", "x.log"}
        out: set[str] = set()
        for _ in range(r.randrange(5, 30)):
            rel = f"burst{r.randrange(50)}.txt"
            (self.root / rel).write_text(str(r.random()))
            out.add(rel)
        return out


def full_tree(root: Path, scratch_index: Path) -> str:
    """The oracle: ``git add -A && git write-tree`` into a fresh private index."""
    scratch_index.unlink(missing_ok=True)
    env = {"GIT_INDEX_FILE": str(scratch_index)}
    git(root, "add", "-A", env=env)
    return git(root, "write-tree", env=env).strip()


def test_fast_path_matches_full_capture_every_step(tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / ".gitignore").write_text("ignored_dir/\n*.log\n")
    (wt / "src").mkdir()
    for i in range(20):
        (wt / "src" / f"s{i}.py").write_text(f"x = {i}\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    store = Store(tmp_path / "home")
    index = store.worktree(wt)
    previous = index.capture().tree
    work = Workload(wt, Random(SEED))
    fast_steps = 0
    for step in range(STEPS):
        changed = work.step()
        result = index.capture_changed(changed)
        if result is None:
            result = index.capture()
        else:
            fast_steps += 1
        expected = full_tree(wt, tmp_path / "oracle-index")
        assert result.tree == expected, f"step {step}: fast path diverged after {changed}"
        # The change counts the fast path learnt on the way equal a tree comparison's, and
        # that comparison agrees with git's own.
        counts = tree_changes(store.repo, previous, result.tree)
        assert counts == compute_tree_changes(store.repo, previous, result.tree) \
            == diff_counts(wt, store, previous, result.tree), f"step {step}: {changed}"
        previous = result.tree
    assert fast_steps > STEPS * 0.9


def diff_counts(wt: Path, store: Store, old: str, new: str) -> tuple[int, int, int]:
    """(added, modified, deleted) by ``git diff-tree -r``; a type change is a modification."""
    out = git(wt, "--git-dir", str(store.path), "diff-tree", "-r", "--no-renames",
              "--name-status", old, new)
    status = [line.split("\t", 1)[0] for line in out.splitlines() if line]
    return (status.count("A"), sum(s in ("M", "T") for s in status), status.count("D"))


def test_checkout_of_another_branch_via_directory_events(tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "common.txt").write_text("c\n")
    (wt / "pkg").mkdir()
    (wt / "pkg" / "a.py").write_text("a\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "main")
    git(wt, "checkout", "-q", "-b", "other")
    shutil.rmtree(wt / "pkg")
    (wt / "pkg2" / "deep").mkdir(parents=True)
    (wt / "pkg2" / "deep" / "b.py").write_text("b\n")
    (wt / "common.txt").write_text("changed on other\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "other")
    git(wt, "checkout", "-q", "main")
    store = Store(tmp_path / "home")
    index = store.worktree(wt)
    index.capture()
    git(wt, "checkout", "-q", "other")
    # What inotify reports: the changed file, the removed and the new top directories.
    result = index.capture_changed({"common.txt", "pkg", "pkg/a.py", "pkg2"})
    assert result is not None
    assert result.tree == git(wt, "rev-parse", "HEAD^{tree}").strip()


def test_a_path_that_came_and_went_between_captures_changes_nothing(tmp_path: Path) -> None:
    """An editor's temp file (or a restore's) written and renamed away: the watcher reports
    its path, the index never had it. Nothing was deleted, and the tree is the same object."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "pkg").mkdir()
    (wt / "pkg" / "a.py").write_text("a\n")
    store = Store(tmp_path / "home")
    index = store.worktree(wt)
    before = index.capture().tree
    (wt / "pkg" / ".a.py.swp").write_text("x\n")
    (wt / "pkg" / ".a.py.swp").unlink()
    result = index.capture_changed({"pkg/.a.py.swp", "gone-dir"})
    assert result is not None
    assert (result.tree, result.added, result.modified, result.deleted) == (before, 0, 0, 0)
