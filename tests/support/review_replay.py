"""A repository history built by the test, replayed into its own worktree as tool calls.

``build_history`` commits a few dozen generated edits (lines changed, inserted and deleted in
several files, a file added, a file removed) with the git CLI; ``replay`` checks out a branch at
a start commit, begins an attempt, takes checkpoint 0 of the unchanged worktree and then writes
each later commit's files into the worktree (HEAD and index stay at the start commit) followed
by one tool-call capture each, so checkpoint ``i`` holds the tree of commit ``start + i``.
"""

from __future__ import annotations

import io
import random
import subprocess
import sys
import tarfile
from dataclasses import dataclass
from pathlib import Path

from tests.conftest import Daemon, Env, git, make_git_worktree

FILES = ("src/app.py", "README.md", "notes.txt")


@dataclass
class Replay:
    worktree: Path
    commits: list[str]  # every commit of the history, oldest first
    start: int  # index of the commit checkpoint 0 holds
    run_id: str = "replay"
    node_id: str = "agent"

    def seq_of(self, commit: str) -> int:
        return self.commits.index(commit) - self.start

    @property
    def replayed(self) -> list[str]:
        return self.commits[self.start:]


def build_history(wt: Path, count: int = 36, seed: int = 7) -> list[str]:
    """``count`` commits of generated edits; every commit changes at least one file."""
    make_git_worktree(wt)
    rnd = random.Random(seed)
    files: dict[str, list[str]] = {name: [f"{name} line {i}" for i in range(30)]
                                   for name in FILES}
    commits = []
    for n in range(count):
        if n:
            _edit(rnd, files, n)
        if n == 12:
            files["src/extra.py"] = [f"extra {i} from {n}" for i in range(10)]
        if n == 20:
            files.pop("notes.txt", None)
            (wt / "notes.txt").unlink(missing_ok=True)
        for name, lines in files.items():
            path = wt / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(line + "\n" for line in lines))
        git(wt, "add", "-A")
        git(wt, "commit", "-q", "-m", f"commit {n}")
        commits.append(git(wt, "rev-parse", "HEAD").strip())
    return commits


def replay(env: Env, daemon: Daemon, wt: Path, commits: list[str], start: int) -> Replay:
    """Replay ``commits[start+1:]`` as tool calls on a worktree at ``commits[start]``."""
    rep = Replay(wt, commits, start)
    git(wt, "checkout", "-q", "-b", "work", commits[start])
    with daemon.client() as c:
        c.attempt_begin(rep.run_id, rep.node_id, str(wt))
        first = c.snapshot(str(wt), run_id=rep.run_id, node_id=rep.node_id, source="hook",
                           tool_use_id="call-0", label="start")
        assert first["seq"] == 0
        for i, commit in enumerate(commits[start + 1:], start=1):
            materialize(wt, commit)
            cp = c.snapshot(str(wt), run_id=rep.run_id, node_id=rep.node_id, source="hook",
                            tool_use_id=f"call-{i}", label=f"Edit commit {start + i}")
            assert cp["seq"] == i and not cp["deduped"], cp
    return rep


def materialize(wt: Path, commit: str) -> None:
    """The worktree's files become ``commit``'s, without touching HEAD or the index."""
    archive = subprocess.run(["git", "archive", "--format=tar", commit], cwd=wt,
                             capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        wanted = {m.name for m in tar.getmembers() if m.isfile()}
        kw = {"filter": "data"} if sys.version_info >= (3, 12) else {}
        tar.extractall(wt, **kw)
    for path in wt.rglob("*"):
        rel = path.relative_to(wt).as_posix()
        if path.is_file() and not rel.startswith(".git/") and rel not in wanted:
            path.unlink()


def cli(env: Env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=300)


def _edit(rnd: random.Random, files: dict[str, list[str]], n: int) -> None:
    for name in rnd.sample(sorted(files), k=rnd.randint(1, len(files))):
        lines = files[name]
        for k in range(rnd.randint(1, 4)):
            action = rnd.choice(("change", "insert", "insert", "delete"))
            at = rnd.randrange(len(lines) + (action == "insert")) if lines else 0
            if action == "change" and lines:
                lines[at] = f"{name} changed in {n}.{k}"
            elif action == "delete" and len(lines) > 5:
                del lines[at]
            else:
                lines.insert(at, f"{name} inserted in {n}.{k}")
