"""``snapshotd revert`` with two sessions in one folder (issue 45): undoing one tool call, or
everything session A did, keeps session B's work and the user's edit; a conflict writes nothing;
the undo command brings back the exact tree. The oracle is ``git revert`` on the same history
made as git commits in a scratch repository.

Real ``snapshot-hook`` processes with Claude Code's PostToolUse payloads (zero-setup runs
``claude-<session>``), a real daemon, the real CLI, real git.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

from tests.conftest import Daemon, Env, claude_payload, git, make_git_worktree, run_hook

A, B = "claude-sess-a", "claude-sess-b"
LINES = [f"line {n}\n" for n in range(1, 31)]


def cli(env: Env, *args: str, code: int = 0) -> subprocess.CompletedProcess:
    if args[0] == "revert":  # both sessions are still working (no Stop event was sent)
        args = (*args, "--force")
    proc = subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == code, (proc.stdout, proc.stderr)
    return proc


def tool_call(env: Env, wt: Path, session: str, tool_use_id: str, path: str) -> None:
    proc = run_hook(env, claude_payload(wt, tool_use_id, file_path=path, session_id=session),
                    CLAUDE_PROJECT_DIR=str(wt))
    assert (proc.returncode, proc.stderr) == (0, b""), proc


def edit(path: Path, line: int, text: str) -> None:
    lines = path.read_text().splitlines(keepends=True)
    lines[line - 1] = text + "\n"
    path.write_text("".join(lines))


def tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and ".git" not in p.relative_to(root).parts}


class Oracle:
    """The same history as git commits in a scratch repository."""

    def __init__(self, path: Path) -> None:
        self.path = make_git_worktree(path)
        self.commits: dict[str, str] = {}

    def commit(self, name: str, files: dict[str, bytes]) -> None:
        for old in tree(self.path):
            if old not in files:
                (self.path / old).unlink()
        for rel, data in files.items():
            (self.path / rel).write_bytes(data)
        git(self.path, "add", "-A")
        git(self.path, "commit", "-q", "--allow-empty", "-m", name)
        self.commits[name] = git(self.path, "rev-parse", "HEAD").strip()

    def revert(self, *names: str) -> dict[str, bytes] | None:
        """The tree after ``git revert --no-commit`` of ``names`` in that order; None on a
        conflict."""
        try:
            git(self.path, "revert", "--no-commit", *(self.commits[n] for n in names))
        except subprocess.CalledProcessError:
            return None
        return tree(self.path)


def history(env: Env, tmp_path: Path, *, user_line: int = 20) -> tuple[Path, Oracle]:
    """A edits f line 1; A creates g; B edits h; A edits f line 10; the user edits f."""
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "f").write_text("".join(LINES))
    (wt / "h").write_text("h base\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    oracle = Oracle(tmp_path / "oracle")
    oracle.commit("base", tree(wt))
    edit(wt / "f", 1, "A one")
    tool_call(env, wt, "sess-a", "toolu_a1", "f")
    oracle.commit("a1", tree(wt))
    (wt / "g").write_text("made by A\n")
    tool_call(env, wt, "sess-a", "toolu_a2", "g")
    oracle.commit("a2", tree(wt))
    edit(wt / "h", 1, "h by B")
    tool_call(env, wt, "sess-b", "toolu_b1", "h")
    oracle.commit("b1", tree(wt))
    edit(wt / "f", 10, "A ten")
    tool_call(env, wt, "sess-a", "toolu_a3", "f")
    oracle.commit("a3", tree(wt))
    edit(wt / "f", user_line, "the user's edit")
    oracle.commit("user", tree(wt))
    return wt, oracle


def test_revert_of_one_tool_call_keeps_everything_else_and_undo_restores(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt, oracle = history(sd_env, tmp_path)
    before = tree(wt)
    dry = json.loads(cli(sd_env, "revert", A, "--node", "session", "--tool-call", "toolu_a1",
                         "--dry-run", "--json").stdout)
    assert [(p["path"], p["status"]) for p in dry["paths"]] == [("f", "merged")]
    assert tree(wt) == before
    out = json.loads(cli(sd_env, "revert", A, "--node", "session", "--tool-call", "toolu_a1",
                         "--json").stdout)
    assert out["applied"] and out["event"]["kind"] == "revert"
    after = tree(wt)
    assert after == oracle.revert("a1")
    assert after["f"].decode().splitlines()[:1] == ["line 1"]
    assert after["f"].decode().splitlines()[9] == "A ten"
    assert after["f"].decode().splitlines()[19] == "the user's edit"
    assert after["g"] == b"made by A\n" and after["h"] == b"h by B\n"
    # The undo command gives back the exact tree from before the revert.
    argv = shlex.split(out["undo_command"])
    assert argv[0] == "snapshotd"
    cli(sd_env, *argv[1:])
    assert tree(wt) == before
    # The event is listed.
    listing = json.loads(cli(sd_env, "snapshots", A, "--json").stdout)
    assert any(c.get("kind") == "revert" for c in listing["tool_calls"])


def test_revert_all_of_a_session_keeps_the_other_session_and_the_user(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt, oracle = history(sd_env, tmp_path)
    out = json.loads(cli(sd_env, "revert", A, "--node", "session", "--all", "--json").stdout)
    assert out["applied"], out
    after = tree(wt)
    assert after == oracle.revert("a3", "a2", "a1")
    expected = LINES.copy()
    expected[19] = "the user's edit\n"
    assert after["f"] == "".join(expected).encode()
    assert "g" not in after and after["h"] == b"h by B\n"


def test_a_conflicting_revert_writes_nothing(sd_env: Env, daemon: Daemon,
                                             tmp_path: Path) -> None:
    wt, oracle = history(sd_env, tmp_path, user_line=1)
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in wt.rglob("*")
              if ".git" not in p.parts}
    content = tree(wt)
    proc = cli(sd_env, "revert", A, "--node", "session", "--tool-call", "toolu_a1", "--json",
               code=3)
    out = json.loads(proc.stdout)
    assert out["refused"] and not out["applied"]
    assert [(c["path"], c["current"].splitlines()[0], c["reverted"].splitlines()[0])
            for c in out["conflicts"]] == [("f", "the user's edit", "line 1")]
    assert tree(wt) == content
    assert {p: (p.stat().st_ino, p.stat().st_mtime_ns) for p in wt.rglob("*")
            if ".git" not in p.parts} == before
    assert oracle.revert("a1") is None
    # --conflicts=markers writes git-style markers instead.
    cli(sd_env, "revert", A, "--node", "session", "--tool-call", "toolu_a1",
        "--conflicts=markers")
    text = (wt / "f").read_text()
    assert "<<<<<<< current" in text and ">>>>>>> before the reverted change" in text
