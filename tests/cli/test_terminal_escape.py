"""No raw control character reaches the terminal: labels, tool call ids, file names and worktree
paths holding an OSC 52 clipboard write (``ESC ] 52 ; c ; ... BEL``) and a C1 CSI (U+009B, and
the lone byte 0x9b in a name that is not UTF-8) are printed escaped by every human-readable
command, piped as a script or a pager would read them; ``--json`` stays JSON that reads back the
same text."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from snapshotd_client import SnapshotdError
from tests.conftest import Env, make_git_worktree

pytestmark = pytest.mark.one_ledger("terminal output, not the ledger")

EVIL = "\x1b]52;c;ZXZpbA==\x07\x9b31m"
RAW_NAME = b"raw\x1b[2J\x9b.txt"  # not UTF-8: the 0x9b byte alone


def _cli(env: Env, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, timeout=60, cwd=cwd)


def _assert_clean(what: str, data: bytes) -> None:
    text = data.decode("utf-8", "surrogateescape")
    bad = sorted({f"U+{ord(c):04X}" for c in text
                  if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F
                  or 0xDC80 <= ord(c) <= 0xDCFF})
    assert not bad, f"{what}: raw control characters {bad} in {data[:2000]!r}"


@pytest.fixture
def evil_run(sd_env: Env, daemon, tmp_path: Path) -> tuple[Path, str]:
    worktree = make_git_worktree(tmp_path / f"wt{EVIL}")
    name = f"file{EVIL}.txt"
    (worktree / name).write_text("one\n")
    os.close(os.open(os.path.join(os.fsencode(worktree), RAW_NAME), os.O_CREAT | os.O_WRONLY))
    with daemon.client() as c:
        c.request("snapshot", cwd=str(worktree), run_id="r1", node_id="n1", source="hook",
                  label=f"Write {EVIL}", tool_use_id=f"toolu_{EVIL}")
        (worktree / name).write_text("one\ntwo\n")
        os.remove(os.path.join(os.fsencode(worktree), RAW_NAME))
        c.request("snapshot", cwd=str(worktree), run_id="r1", node_id="n1", source="hook",
                  label=f"Edit {EVIL}\nFAKE-LINE\tx", tool_use_id=f"toolu_2{EVIL}\nFAKE-LINE")
        # A capture that fails: its gap names the worktree and the tool call.
        try:
            c.request("snapshot", cwd=str(tmp_path / f"gone{EVIL}"), run_id="r1",
                      node_id="n2", source="hook", label=EVIL, tool_use_id=f"toolu_gap{EVIL}")
        except SnapshotdError:
            pass  # the daemon refuses it and records the gap
    assert sd_env.read_gaps(), "the failed capture left no gap"
    return worktree, name


def test_every_human_command_escapes_controls(sd_env: Env, evil_run) -> None:
    worktree, name = evil_run
    commands = [
        ("snapshots", "r1"), ("snapshots", "r1", "--all"), ("runs",), ("status",),
        ("log", "r1"), ("log", "r1", "--patch", "--root"),
        ("show", "r1", "--node", "n1", "--seq", "1"),
        ("show", "r1", "--node", "n1", "--seq", "0", "--name-status"),
        ("show", "r1", "--node", "n1", "--seq", "0", "--stat"),
        ("blame", "r1", name, "--node", "n1"),
        ("find", name, "--cwd", str(worktree)),
        ("diff", "r1", "--node", "n1", "--seq", "0", "--to-seq", "1"),
        ("diff", "r1", "--node", "n1", "--seq", "0", "--to-seq", "1", "--name-status"),
        ("diff", "r1", "--node", "n1", "--seq", "0", "--to-seq", "1", "--stat"),
        # Errors echo what they were given.
        ("show", "r1", "--node", f"n{EVIL}"),
        ("snapshots", f"r{EVIL}"),
        ("blame", "r1", f"missing{EVIL}", "--node", "n1"),
        (f"no-such-command{EVIL}",),
    ]
    for args in commands:
        out = _cli(sd_env, *args)
        _assert_clean(f"{args} stdout", out.stdout)
        _assert_clean(f"{args} stderr", out.stderr)
        # A newline inside a label or an id is data, not a line of its own.
        assert b"\nFAKE-LINE" not in out.stdout + out.stderr, (args, out.stdout)
    listing = _cli(sd_env, "snapshots", "r1").stdout.decode()
    assert "\\u001b]52;c;ZXZpbA==\\u0007\\u009b31m" in listing  # shown, escaped


def test_json_stays_json_with_the_same_text(sd_env: Env, evil_run) -> None:
    out = _cli(sd_env, "snapshots", "r1", "--json")
    assert out.returncode == 0, out.stderr
    _assert_clean("snapshots --json", out.stdout)
    rows = json.loads(out.stdout)["checkpoints"]
    assert rows[0]["label"] == f"Write {EVIL}" and rows[0]["tool_use_id"] == f"toolu_{EVIL}"


def test_our_own_progress_bar_still_drives_a_terminal() -> None:
    """The restore's progress bar writes its own ``\\r`` and cursor codes past the escaping
    (on a real pseudo-terminal), while text in the same process is still escaped."""
    import pty

    code = ("from snapshotd.cli.terminal import guard_output; guard_output()\n"
            "import click, snapshotd.cli.restore as r\n"
            "bar = r._Bar(True)\n"
            "bar.update(1, r.PROGRESS_MIN); bar.update(r.PROGRESS_MIN, r.PROGRESS_MIN)\n"
            "bar.close(); click.echo('label \\x1b]52;c;x\\x07')\n")
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execv(sys.executable, [sys.executable, "-c", code])
    out = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        out += chunk
    os.close(fd)
    _, status = os.waitpid(pid, 0)
    assert status == 0, out
    assert b"\r\x1b[?25lrestoring" in out  # the bar's own codes, raw
    assert b"label \\u001b]52;c;x\\u0007" in out and b"\x07" not in out
