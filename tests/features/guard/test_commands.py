"""The guard's list of destructive commands (snapshotd.features.guard.commands), read from the
before-tool payloads each agent sends: a test per form, and forms that must not match."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapshotd.features.guard import destructive
from snapshotd.features.guard.commands import Match
from snapshotd_client.hook import before_tool_fields, route

pytestmark = pytest.mark.one_ledger("parses commands; no daemon")


def claude(cwd: Path, command: str) -> dict:
    """Claude Code's PreToolUse for Bash (as captured for PostToolUse, tests/fixtures)."""
    return {"session_id": "s-1", "cwd": str(cwd), "hook_event_name": "PreToolUse",
            "permission_mode": "bypassPermissions", "tool_name": "Bash",
            "tool_input": {"command": command, "description": "x"},
            "tool_use_id": "toolu_01"}


def qwen(cwd: Path, command: str) -> dict:
    return {"session_id": "q-1", "cwd": str(cwd), "hook_event_name": "PreToolUse",
            "transcript_path": "/home/u/.qwen/projects/-proj/chats/q-1.jsonl",
            "timestamp": "2026-12-01T11:39:49.224Z", "permission_mode": "yolo",
            "prompt_id": "q-1########0", "tool_name": "run_shell_command",
            "tool_input": {"command": command, "description": "scripted"},
            "tool_use_id": "toolu_1796125189027_2969op6qo", "tool_call_id": "call_1_shell"}


def codex(cwd: Path, command: str) -> dict:
    return {"session_id": "01a22727-6880", "turn_id": "01a22727-6896", "cwd": str(cwd),
            "hook_event_name": "PreToolUse", "model": "gpt-5.5",
            "permission_mode": "bypassPermissions", "tool_name": "Bash",
            "tool_input": {"command": command}, "tool_use_id": "call_shell_ok"}


def codex_argv(cwd: Path, command: str) -> dict:
    """An older Codex: the command as argv, ``["bash", "-lc", "..."]``."""
    return dict(codex(cwd, command), tool_input={"command": ["bash", "-lc", command]})


def gemini(cwd: Path, command: str) -> dict:
    return {"session_id": "cc652adf", "cwd": str(cwd), "hook_event_name": "BeforeTool",
            "timestamp": "2026-11-29T11:51:49.615Z", "tool_name": "run_shell_command",
            "tool_input": {"command": command, "description": "Write a file then fail"}}


AGENTS = [claude, qwen, codex, codex_argv, gemini]


@pytest.fixture
def wt(tmp_path: Path) -> Path:
    root = tmp_path / "wt"
    (root / "build").mkdir(parents=True)
    (root / "build" / "out.o").write_bytes(b"\0")
    (root / "src").mkdir()
    (root / "src" / "a.py").write_text("a\n")
    (root / "notes.txt").write_text("keep me\n")
    (root / "dest").mkdir()
    (root / "dest" / "src").mkdir()
    return root


def forms(make, wt: Path, command: str) -> list[str]:
    """The forms the guard finds in ``command`` sent as ``make``'s agent sends it."""
    payload, kind = route(make(wt, command))
    assert kind == "before_tool"
    fields = before_tool_fields(payload, {})
    matches = destructive(fields["command"], fields["cwd"])
    assert all(m.reason and m.command for m in matches)
    return [m.form for m in matches]


POSITIVE = [
    ("rm -rf build .env.local && git clean -fdx", ["rm -r", "git clean"]),
    ("rm -r build", ["rm -r"]),
    ("rm -R src", ["rm -r"]),
    ("rm --recursive --force src", ["rm -r"]),
    ("rm -f *.log", ["rm glob"]),
    ("rm src/*.py", ["rm glob"]),
    ("git clean -fdx", ["git clean"]),
    ("git clean -fX", ["git clean"]),
    ("git clean -fd", ["git clean"]),
    ("git -C sub clean -f", ["git clean"]),
    ("git reset --hard HEAD~1", ["git reset --hard"]),
    ("git -c core.x=y reset --hard", ["git reset --hard"]),
    ("git checkout -- src/a.py", ["git checkout -- paths"]),
    ("git checkout .", ["git checkout -- paths"]),
    ("git checkout HEAD -- .", ["git checkout -- paths"]),
    ("git checkout -f main", ["git checkout"]),
    ("git restore .", ["git restore"]),
    ("git restore --source=HEAD~2 src", ["git restore"]),
    ("git restore --staged --worktree src/a.py", ["git restore"]),
    ("git stash -u", ["git stash -u"]),
    ("git stash push --all", ["git stash -u"]),
    ("git stash --include-untracked", ["git stash -u"]),
    ("find . -name '*.pyc' -delete", ["find -delete"]),
    ("find build -type f -exec rm {} +", ["find -delete"]),
    ("rsync -a --delete src/ dest/", ["rsync --delete"]),
    ("rsync -a --delete-after src/ dest/", ["rsync --delete"]),
    ("mv src dest", ["mv over an existing directory"]),
    ("cp -r src dest", ["cp over an existing directory"]),
    ("mv -T src dest", ["mv over an existing directory"]),
    ("mv src/a.py notes.txt", ["mv over an existing path"]),
    ("echo x > notes.txt", ["redirect-truncate"]),
    ("cat src/a.py >| notes.txt", ["redirect-truncate"]),
    ("sh -c 'rm -rf build'", ["rm -r"]),
    ("bash -lc \"git clean -fdx\"", ["git clean"]),
    ("bash -e -o pipefail -c 'cd src && rm -r .'", ["rm -r"]),
    ("sh -c \"bash -c 'git reset --hard'\"", ["git reset --hard"]),
    ("env FOO=1 rm -rf build", ["rm -r"]),
    ("sudo -u me rm -rf build", ["rm -r"]),
    ("FOO=bar timeout -s KILL 10 git clean -fdx", ["git clean"]),
    ("ls; rm -rf build", ["rm -r"]),
    ("false || git reset --hard", ["git reset --hard"]),
    ("ls build | xargs rm", ["xargs rm"]),
    ("git ls-files -o | xargs -0 rm -f", ["xargs rm"]),
    ("ls\nrm -rf build", ["rm -r"]),
    ("(cd build && rm -r .)", ["rm -r"]),
    ("cd src && echo y > a.py", ["redirect-truncate"]),
    ("nohup rm -rf build &", ["rm -r"]),
    ("rm -rf 'unclosed", ["rm -r"]),
]

NEGATIVE = [
    "rm new.txt",
    "rm -f new.txt",
    "rm src/a.py",
    "git clean -n",
    "git clean -fdxn",
    "git clean --dry-run -fdx",
    "git reset HEAD~1",
    "git reset --soft HEAD~1",
    "git checkout main",
    "git checkout -b feature",
    "git restore --staged src/a.py",
    "git stash",
    "git status && git diff",
    "find . -name '*.pyc'",
    "rsync -a src/ dest/",
    "mv src/a.py src/b.py",
    "mv src elsewhere",
    "cp src/a.py new.py",
    "echo x > new.txt",
    "echo x >> notes.txt",
    "ls 2>/dev/null",
    "echo 'rm -rf build'",
    "grep -r 'git reset --hard' .",
    "ls # && rm -rf build",
    "ls",
]


@pytest.mark.parametrize("make", AGENTS, ids=lambda m: m.__name__)
@pytest.mark.parametrize(("command", "expected"), POSITIVE, ids=[c for c, _ in POSITIVE])
def test_a_destructive_command_is_recognised(make, wt: Path, command: str,
                                             expected: list[str]) -> None:
    assert forms(make, wt, command) == expected


@pytest.mark.parametrize("make", AGENTS, ids=lambda m: m.__name__)
@pytest.mark.parametrize("command", NEGATIVE)
def test_a_harmless_command_is_not(make, wt: Path, command: str) -> None:
    assert forms(make, wt, command) == []


def test_the_match_says_why(wt: Path) -> None:
    [rm, clean] = destructive("rm -rf build .env.local && git clean -fdx", str(wt))
    assert "build, .env.local" in rm.reason
    assert "ignored files too" in clean.reason
    assert clean.command == "git clean -fdx"


def test_no_input_raises() -> None:
    for text in ["", "'", '"', "\\", "&&&&", "|||", "> ", "sh -c", "xargs", "git", "env",
                 "rm --", "a\nb" * 10_000]:
        # Fragments name nothing to destroy: no match, and no exception.
        assert destructive(text, "/nonexistent") == [] and destructive(text) == [], text
    for text in ["\0rm -rf x", "$(rm -rf x)" * 1000]:
        found = destructive(text, "/nonexistent")
        assert all(isinstance(m, Match) for m in found), text


def test_apply_patch_is_not_read_as_a_command(wt: Path) -> None:
    payload = codex(wt, "*** Begin Patch\n*** Delete File: notes.txt\n*** End Patch")
    payload["tool_name"] = "apply_patch"
    fields = before_tool_fields(route(payload)[0], {})
    assert "command" not in fields
