"""The first checkpoint of an attempt compared with what the worktree held before it.

A git repository built here holds six commits; a string comes in at commit 1 and is present
when the session starts at commit 2 (the worktree's HEAD), then the replayed commits 3, 4 and 5
are written into the worktree and captured by real hook runs (``snapshot-hook`` with Claude
Code's payload, through the real daemon), so checkpoint seq k holds commit 3 + k. git is the
oracle: ``git log -S TEXT --first-parent`` over the replayed range, ``git diff`` from the start
commit, ``git blame --first-parent`` (boundary lines are the base's). A worktree outside any
repository has no base: its first checkpoint is compared with the empty tree, and says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.test_history import git_name_status, sd, sd_json
from tests.conftest import Daemon, Env, claude_payload, git, make_git_worktree, run_hook
from tests.support.review_replay import materialize

pytestmark = pytest.mark.one_ledger("the store's diffs of first checkpoints against git")

RUN, NODE = "claude-sess-1", "session"
PRESENT = "EchoViaPagerTest("  # in from commit 1: at the base; out at 4, back at 5
GONE = "def helper("  # at the base, removed by the first replayed commit (checkpoint 0)
START = 2


def build(wt: Path) -> list[str]:
    make_git_worktree(wt)
    lines = [f"line {i}\n" for i in range(12)]
    states = [
        {"a.py": "".join(lines), "b.txt": "b\n"},
        {"a.py": "".join(lines[:5] + [f"class {PRESENT}object):\n"] + lines[5:]),
         "b.txt": "b\n", "c.py": f"{GONE}):\n    pass\n"},
    ]
    s2 = dict(states[1], **{"b.txt": "b\nb2\n"})
    s3 = dict(s2, **{"b.txt": "b\nb2\nb3\n"})
    s3.pop("c.py")
    s4 = dict(s3, **{"a.py": s3["a.py"].replace(f"class {PRESENT}object):\n", "")})
    s5 = dict(s4, **{"a.py": s4["a.py"] + f"class {PRESENT}object):  # again\n"})
    states += [s2, s3, s4, s5]
    commits = []
    for n, state in enumerate(states):
        for old in set(states[n - 1]) - set(state) if n else ():
            (wt / old).unlink()
        for name, text in state.items():
            (wt / name).write_text(text)
        git(wt, "add", "-A")
        git(wt, "commit", "-q", "-m", f"commit {n}")
        commits.append(git(wt, "rev-parse", "HEAD").strip())
    return commits


def replay(env: Env, wt: Path, commits: list[str]) -> None:
    """HEAD at commits[START]; each later commit written into the worktree and captured by a
    real hook run (HEAD and index stay at the start)."""
    git(wt, "checkout", "-q", "-b", "work", commits[START])
    for k, commit in enumerate(commits[START + 1:]):
        materialize(wt, commit)
        proc = run_hook(env, claude_payload(wt, f"toolu_{k}", file_path="a.py"))
        assert proc.returncode == 0, proc.stderr


def pickaxe_seqs(env: Env, text: str) -> list[int]:
    return [e["seq"] for e in sd_json(env, "log", RUN, "-S", text)["entries"]]


def oracle_seqs(wt: Path, commits: list[str], text: str) -> list[int]:
    listed = git(wt, "log", "--format=%H", "--first-parent", "-S", text,
                 f"{commits[START]}..{commits[-1]}").split()
    return [commits.index(c) - START - 1 for c in listed]


def test_log_pickaxe_equals_git_first_checkpoint_included(sd_env: Env, daemon: Daemon,
                                                          tmp_path: Path) -> None:
    wt = tmp_path / "repo"
    commits = build(wt)
    replay(sd_env, wt, commits)
    for text in (PRESENT, GONE, "b3", "line 7"):
        assert pickaxe_seqs(sd_env, text) == oracle_seqs(wt, commits, text), text
    # The first checkpoint is not listed for a string that was already there at the base.
    assert 0 not in pickaxe_seqs(sd_env, PRESENT) and pickaxe_seqs(sd_env, GONE) == [0]
    # Its entry carries its diff (the change, not the worktree) and names the base.
    first = [e for e in sd_json(sd_env, "log", RUN)["entries"] if e["seq"] == 0][0]
    assert first["base"] == "commit" and first["base_commit"] == commits[START]
    assert sorted(f["path"] for f in first["files"]) == ["b.txt", "c.py"]
    # --path agrees too: a.py was not touched by checkpoint 0.
    assert [e["seq"] for e in sd_json(sd_env, "log", RUN, "--path", "a.py")["entries"]] == [2, 1]


def test_show_and_blame_of_first_checkpoint_against_base(sd_env: Env, daemon: Daemon,
                                                         tmp_path: Path) -> None:
    wt = tmp_path / "repo"
    commits = build(wt)
    replay(sd_env, wt, commits)
    shown = sd_json(sd_env, "show", RUN, "--node", NODE, "--seq", "0")
    assert shown["base"] == "commit" and shown["from"]["commit"] == commits[START]
    names = sorted(f"{f['status']}\t{f['path']}" for f in shown["files"])
    assert names == git_name_status(wt, commits[START], commits[START + 1])
    assert "a.py" not in shown["patch"] and "+b3" in shown["patch"]
    text = sd(sd_env, "show", RUN, "--node", NODE, "--seq", "0").stdout
    # `diff --seq 0` (what checkpoint 0 changed) is git's diff from the base too.
    diffed = sd(sd_env, "diff", RUN, "--node", NODE, "--seq", "0", "--name-status").stdout
    assert sorted(diffed.splitlines()) == git_name_status(wt, commits[START], commits[START + 1])
    assert f"commit {commits[START][:12]}" in text and "empty tree" not in text
    # Blame: lines already there at the base are the base's, not checkpoint 0's.
    got = sd_json(sd_env, "blame", RUN, "--node", NODE, "b.txt", "--seq", "0")["lines"]
    assert [(x["text"], x["seq"], x["source"]) for x in got] == \
        [("b", None, "base"), ("b2", None, "base"), ("b3", 0, "hook")]
    newest = sd_json(sd_env, "blame", RUN, "--node", NODE, "a.py")["lines"]
    blamed = git(wt, "blame", "--first-parent", "--porcelain",
                 f"{commits[START]}..{commits[-1]}", "--", "a.py")
    boundary, expected, commit = set(), [], ""
    for row in blamed.splitlines():
        if row.startswith("boundary"):
            boundary.add(commit)
        elif row.startswith("\t"):
            expected.append(None if commit in boundary else commits.index(commit) - START - 1)
        elif len(row.split()[0]) == 40:
            commit = row.split()[0]
    assert [x["seq"] for x in newest] == expected and expected[-1] == 2 and None in expected
    plain = sd(sd_env, "blame", RUN, "--node", NODE, "b.txt").stdout.splitlines()
    assert "before the session" in plain[0] and plain[2].split()[0] == "0"


def test_first_checkpoint_outside_a_repository_says_empty_tree(sd_env: Env, daemon: Daemon,
                                                               tmp_path: Path) -> None:
    wt = tmp_path / "plain"
    wt.mkdir()
    (wt / "a.py").write_text(f"class {PRESENT}object):\n")
    assert run_hook(sd_env, claude_payload(wt, "toolu_0", file_path="a.py")).returncode == 0
    shown = sd_json(sd_env, "show", RUN, "--node", NODE, "--seq", "0")
    assert shown["base"] == "empty-tree" and shown["from"]["commit"] is None
    assert "compared with an empty tree" in sd(sd_env, "show", RUN, "--node", NODE).stdout
    assert pickaxe_seqs(sd_env, PRESENT) == [0]
    entry = sd_json(sd_env, "log", RUN)["entries"][0]
    assert entry["base"] == "empty-tree" and entry["base_commit"] is None
    assert "compared with an empty tree" in sd(sd_env, "log", RUN, "--patch", "--root").stdout


def test_base_objects_the_seed_did_not_bring_are_imported(sd_env: Env, daemon: Daemon,
                                                          tmp_path: Path) -> None:
    """A file HEAD holds that the index no longer does (``git rm``): the seed never copies its
    blob, so keeping the base brings it in, and ``show`` of the first checkpoint has its text."""
    wt = make_git_worktree(tmp_path / "repo")
    (wt / "keep.txt").write_text("kept\n")
    (wt / "old.txt").write_text(f"class {PRESENT}object):\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    head = git(wt, "rev-parse", "HEAD").strip()
    git(wt, "rm", "-q", "old.txt")
    assert run_hook(sd_env, claude_payload(wt, "toolu_0", file_path="keep.txt")).returncode == 0
    shown = sd_json(sd_env, "show", RUN, "--node", NODE, "--seq", "0")
    assert shown["base"] == "commit" and shown["from"]["commit"] == head
    assert [(f["status"], f["path"]) for f in shown["files"]] == [("D", "old.txt")]
    assert f"-class {PRESENT}object):" in shown["patch"]
    assert pickaxe_seqs(sd_env, PRESENT) == [0] and pickaxe_seqs(sd_env, "kept") == []


def test_a_session_start_baseline_is_its_own_base(sd_env: Env, daemon: Daemon,
                                                  tmp_path: Path) -> None:
    """Outside a repository, a session's start baseline (checkpoint 0, before any tool call) is
    what the worktree held: it changed nothing, so `log -S` never lists it."""
    from tests.features.test_sessions import event, hook, tool_call

    wt = tmp_path / "plain"
    wt.mkdir()
    (wt / "a.py").write_text(f"class {PRESENT}object):\n")
    hook(sd_env, wt, event(wt, "life", "SessionStart"))
    tool_call(sd_env, wt, "life", "toolu_1", "b.txt")
    shown = sd_json(sd_env, "show", "claude-life", "--node", NODE, "--seq", "0")
    assert shown["checkpoint"]["label"] == "session start"
    assert shown["base"] == "session-start" and shown["files"] == []
    assert [e["seq"] for e in sd_json(sd_env, "log", "claude-life", "-S", PRESENT)["entries"]] \
        == []
    assert [e["seq"] for e in sd_json(sd_env, "log", "claude-life", "-S", "toolu_1")["entries"]] \
        == [1]
