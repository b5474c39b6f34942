"""The suite's own guard against leaked daemons: the helpers find and stop a ``snapshotd serve``
by its home whoever started it, each test's daemons are stopped when it ends, and a daemon that
escapes that still fails the session (checked by running pytest on a throwaway suite)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil

from tests.conftest import Env
from tests.support.helpers import (
    daemon_of_home,
    daemons_under,
    stop_daemons_under,
    stop_processes,
    throwaway_suite,
    wait_for,
)


def spawn_detached_daemon(env: Env) -> subprocess.Popen:
    """``snapshotd serve`` in its own session, as the hook's autostart runs it."""
    return subprocess.Popen([sys.executable, "-m", "snapshotd", "serve"], env=env.environ(),
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)


def test_a_detached_daemon_is_found_by_its_home_and_stopped(tmp_path: Path) -> None:
    env = Env(tmp_path / "world")
    proc = spawn_detached_daemon(env)
    owner = wait_for(lambda: daemon_of_home(env.home), what="the daemon to lock its home")
    assert owner.pid == proc.pid
    assert [p.pid for p in daemons_under(tmp_path)] == [proc.pid]
    assert daemons_under(tmp_path / "elsewhere") == []
    assert stop_daemons_under(tmp_path) == [proc.pid]
    assert proc.wait(timeout=5) == 0  # SIGTERM first: a clean shutdown
    assert daemons_under(tmp_path) == []
    assert daemon_of_home(env.home) is None  # the pid left in daemon.lock names nobody now


def test_a_process_that_ignores_sigterm_is_killed_after_the_bound(tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    code = ("import pathlib, signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "pathlib.Path(sys.argv[1]).write_text('up'); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(ready)])
    wait_for(ready.exists, what="the child to ignore SIGTERM")
    child = psutil.Process(proc.pid)
    stop_processes([child], term_timeout=0.2)
    assert child.returncode == -signal.SIGKILL  # and reaped: it was our child
    assert not psutil.pid_exists(proc.pid)


LEAKY_SUITE = textwrap.dedent('''
    import os, subprocess, sys
    from pathlib import Path

    from tests.support.helpers import daemon_of_home, wait_for

    def spawn(home: Path, sock: Path) -> int:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SNAPSHOTD_")}
        env.update(SNAPSHOTD_HOME=str(home), SNAPSHOTD_SOCKET=str(sock),
                   SNAPSHOTD_AUTOSTART="0", XDG_CONFIG_HOME=str(home.parent / "cfg"))
        subprocess.Popen([sys.executable, "-m", "snapshotd", "serve"], env=env,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True)
        return wait_for(lambda: daemon_of_home(home), what="the daemon").pid

    def test_a_leaks_under_its_tmp_path(tmp_path):
        pid = spawn(tmp_path / "home", Path(os.environ["LEAK_SOCKDIR"]) / "a.sock")
        Path(os.environ["LEAK_SOCKDIR"], "a.pid").write_text(str(pid))

    def test_b_leaks_where_no_test_looks(tmp_path_factory):
        # test a's daemon was stopped when test a ended
        pid = int(Path(os.environ["LEAK_SOCKDIR"], "a.pid").read_text())
        assert not os.path.exists(f"/proc/{pid}") or open(f"/proc/{pid}/stat").read().split()[2] == "Z"
        spawn(tmp_path_factory.mktemp("hidden") / "home", Path(os.environ["LEAK_SOCKDIR"]) / "b.sock")
''')


def test_a_daemon_that_outlives_its_test_fails_the_session(tmp_path: Path) -> None:
    suite = throwaway_suite(tmp_path / "suite")
    (suite / "test_leaky.py").write_text(LEAKY_SUITE)
    sockdir = Path(os.path.realpath("/tmp")) / f"sdleak{os.getpid()}"
    sockdir.mkdir(mode=0o700)
    basetemp = tmp_path / "basetemp"
    try:
        result = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
             "-p", "no:randomly", f"--basetemp={basetemp}", "test_leaky.py"],
            cwd=suite, env=dict(os.environ, LEAK_SOCKDIR=str(sockdir)), capture_output=True,
            text=True, timeout=120)
    finally:
        shutil.rmtree(sockdir, ignore_errors=True)
    out = result.stdout + result.stderr
    assert result.returncode == 1, out
    assert "2 passed, 1 error" in out, out
    assert "ERROR at teardown of test_b_leaks_where_no_test_looks" in out, out
    assert "outlived the test session" in out, out
    assert daemons_under(basetemp) == []  # and the check stopped it
