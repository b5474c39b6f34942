"""``snapshotd bisect`` over a real session (tests/support/bisect_session.py: 40 tool calls
through a real daemon, tool call 23 breaks ``app.py``): it names tool call 23 in at most 6 runs
of the command, also with a skip (125) next to it, writes neither the worktree nor the home,
undoes what the command wrote between runs, and leaves no scratch directory behind, also on
SIGINT (exit 130). The CLI is a real subprocess; the command counts its runs in a file outside
the scratch directory.
"""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from tests.conftest import Daemon, Env
from tests.support.bisect_session import BREAKS, NODE, RUN, build_session, tree_digest
from tests.support.helpers import wait_for

# The command: count the run, refuse a tree the previous run's writes leaked into (exit 200
# aborts the bisection), answer 125 on the half-done build when asked, fail on the break, then
# scribble over the scratch tree as a careless test would.
CHECK = """
echo run >> "$COUNTER"
test -e junk.txt && exit 200
grep -q tampered app.py && exit 201
test -n "$SKIP" && test -e skipme && exit 125
bad=0; grep -q BROKEN app.py && bad=1
echo junk > junk.txt; echo tampered >> app.py; rm -f notes/n1.txt
exit $bad
"""
# SQLite's shared-memory index (-shm) changes when anyone reads: it is not the ledger's data.
NOT_DATA = ("-shm",)


def cli(env: Env, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(**extra),
                          capture_output=True, text=True, timeout=120)


def bisect_json(env: Env, tmp_path: Path, *cmd: str, **extra: str) -> tuple[dict, int, int]:
    """``bisect --json`` with ``cmd``: the result, the exit code, the runs counted."""
    counter = tmp_path / "runs.txt"
    counter.unlink(missing_ok=True)
    scratch = tmp_path / "scratch-parent"
    scratch.mkdir(exist_ok=True)
    proc = cli(env, "bisect", RUN, "--node", NODE, "--json", "--", *cmd,
               COUNTER=str(counter), TMPDIR=str(scratch), **extra)
    assert proc.returncode in (0, 4), proc.stderr
    assert "step 1 of" not in proc.stderr, "progress lines off a terminal"
    assert list(scratch.iterdir()) == [], "the scratch directory was left behind"
    runs = len(counter.read_text().splitlines()) if counter.exists() else 0
    return json.loads(proc.stdout), proc.returncode, runs


def test_bisect_names_the_tool_call_that_broke_it(sd_env: Env, daemon: Daemon,
                                                  tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    build_session(daemon, wt)
    before = (tree_digest(wt), tree_digest(sd_env.home, NOT_DATA))
    result, code, runs = bisect_json(sd_env, tmp_path, "sh", "-c", CHECK)
    assert code == 0 and result["status"] == "found", result
    first = result["first_bad"]
    assert first["tool_use_id"] == f"call-{BREAKS}" and first["seq"] == BREAKS - 1
    assert first["label"] == f"Edit step {BREAKS}" and first["tested"]
    assert first["turn"] is None and first["prompt"] is None
    assert result["last_good"]["seq"] == BREAKS - 2
    stat = first["diff_stat"]
    assert {p["path"] for p in stat["paths"]} == {"app.py", "skipme", f"notes/n{BREAKS}.txt"}
    app = next(p for p in stat["paths"] if p["path"] == "app.py")
    assert (app["status"], app["insertions"], app["deletions"]) == ("M", 1, 1)
    assert runs == result["runs"] <= 6, result["steps"]
    # Each run after the first moved the scratch tree by diff and undid the last run's writes.
    for step in result["steps"][1:]:
        assert step["move"]["removed"] == 1 and step["move"]["repaired"] == 2, step
        assert step["move"]["written"] < 40, step
    assert (tree_digest(wt), tree_digest(sd_env.home, NOT_DATA)) == before


def test_a_skip_next_to_the_break_still_names_it(sd_env: Env, daemon: Daemon,
                                                 tmp_path: Path) -> None:
    """Tool call 22 answers 125: as ``git bisect`` says, the first bad one is then 23 or the
    skipped 22; the result names 23 and lists 22 as the one it could not rule out."""
    build_session(daemon, tmp_path / "wt")
    result, code, runs = bisect_json(sd_env, tmp_path, "sh", "-c", CHECK, SKIP="1")
    assert result["first_bad"]["tool_use_id"] == f"call-{BREAKS}", result
    skipped = [s for s in result["steps"] if s["verdict"] == "skip"]
    assert [s["tool_use_id"] for s in skipped] == [f"call-{BREAKS - 1}"], result["steps"]
    assert result["status"] == "ambiguous" and code == 4
    assert result["could_be"] == [BREAKS - 2]
    assert runs == result["runs"]
    # On a terminal: a progress line per run on stderr, and the report naming both.
    code, out, err = on_a_tty(sd_env, tmp_path, "bisect", RUN, "--node", NODE, "--", "sh",
                              "-c", CHECK, SKIP="1", COUNTER=str(tmp_path / "tty-runs.txt"))
    assert code == 4, err
    assert "step 1 of ~6: seq 19 (Edit step 20)" in err
    assert f"step {result['runs']} of ~" in err
    assert f"first bad checkpoint: seq {BREAKS - 1} of {RUN}/{NODE}" in out
    assert f"or one of seqs {BREAKS - 2} (skipped)" in out
    assert f"(id call-{BREAKS})" in out


def on_a_tty(env: Env, tmp_path: Path, *args: str, **extra: str) -> tuple[int, str, str]:
    """The CLI with its stderr on a pseudo-terminal: exit code, stdout, what the terminal
    showed."""
    scratch = tmp_path / "tty-scratch"
    scratch.mkdir(exist_ok=True)
    primary, secondary = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "snapshotd", *args], stdout=subprocess.PIPE,
                            stderr=secondary, text=True,
                            env=env.environ(TMPDIR=str(scratch), **extra))
    os.close(secondary)
    shown = b""
    while True:
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        shown += chunk
    out = proc.stdout.read()
    proc.wait(timeout=60)
    os.close(primary)
    return proc.returncode, out, shown.decode(errors="replace").replace("\r\n", "\n")


def test_sigint_mid_bisect_leaves_no_scratch_directory(sd_env: Env, daemon: Daemon,
                                                       tmp_path: Path) -> None:
    build_session(daemon, tmp_path / "wt")
    scratch = tmp_path / "scratch-parent"
    scratch.mkdir()
    pidfile = tmp_path / "cmd.pid"
    proc = subprocess.Popen(
        [sys.executable, "-m", "snapshotd", "bisect", RUN, "--node", NODE, "--", "sh", "-c",
         f'echo $$ > "{pidfile}"; exec sleep 60'],
        env=sd_env.environ(TMPDIR=str(scratch)), stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, text=True)
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text().strip(), timeout=90,
                 what="CMD started")
        sleeper = int(pidfile.read_text())
        [made] = list(scratch.iterdir())
        assert (made / "tree" / "app.py").is_file()
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert list(scratch.iterdir()) == []
    assert "interrupted" in err
    wait_for(lambda: not _alive(sleeper), what="CMD's sleep killed", timeout=60)


def test_a_timeout_counts_bad_and_kills_the_group(sd_env: Env, daemon: Daemon,
                                                  tmp_path: Path) -> None:
    """A run past ``--timeout`` is killed with its process group and counts as bad: a command
    that hangs on every checkpoint after 23 names 23."""
    build_session(daemon, tmp_path / "wt")
    scratch = tmp_path / "scratch-parent"
    scratch.mkdir()
    hang = 'grep -q BROKEN app.py && { sleep 60 & wait; }; exit 0'
    started = time.monotonic()
    proc = cli(sd_env, "bisect", RUN, "--node", NODE, "--timeout", "0.5", "--json", "--",
               "sh", "-c", hang, TMPDIR=str(scratch))
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["first_bad"]["tool_use_id"] == f"call-{BREAKS}"
    assert any(s["timed_out"] and s["verdict"] == "bad" for s in result["steps"])
    assert time.monotonic() - started < 60, "a killed run was waited for"
    assert list(scratch.iterdir()) == []


def test_bad_bounds_are_refused_and_an_exit_of_128_or_more_aborts(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    build_session(daemon, tmp_path / "wt", calls=4)
    proc = cli(sd_env, "bisect", RUN, "--node", NODE, "--good", "3", "--bad", "1", "--",
               "true")
    assert proc.returncode == 1 and "must come before" in proc.stderr
    proc = cli(sd_env, "bisect", RUN, "--node", "nope", "--", "true")
    assert proc.returncode == 1 and "its nodes: session" in proc.stderr
    scratch = tmp_path / "scratch-parent"
    scratch.mkdir()
    proc = cli(sd_env, "bisect", RUN, "--node", NODE, "--", "sh", "-c", "exit 130",
               TMPDIR=str(scratch))
    assert proc.returncode == 1 and "exit 130" in proc.stderr, proc.stderr
    assert list(scratch.iterdir()) == []


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
