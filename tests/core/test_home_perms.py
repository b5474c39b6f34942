"""The home at rest: 0700, and nothing in it readable by group or others.

A home whose files and directories were made readable by others (a restore from a backup, a
copy with ``cp -r`` under umask 022) is repaired by the real daemon at start-up, with a warning;
everything the daemon writes afterwards (store objects, ledger, caches, spool) is private too.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Daemon, Env, MakeDaemon

pytestmark = pytest.mark.one_ledger("file modes in the home")


def loose_modes(home: Path) -> list[str]:
    out = []
    for dirpath, dirnames, filenames in os.walk(home):
        for name in (*dirnames, *filenames):
            path = os.path.join(dirpath, name)
            st = os.lstat(path)
            if not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o077:
                out.append(f"{path} {stat.S_IMODE(st.st_mode):04o}")
    return out


def test_start_up_repairs_the_home_and_new_files_stay_private(sd_env: Env, make_daemon: MakeDaemon,
                                                              tmp_path: Path) -> None:
    first = make_daemon(sd_env, QUIET_WATCHER)
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("one\n")
    with first.client() as c:
        c.snapshot(str(wt), run_id="perm", node_id="n", tool_use_id="t0")
    first.stop()
    assert loose_modes(sd_env.home) == []
    # Someone loosens it while the daemon is down.
    os.chmod(sd_env.home, 0o755)
    for dirpath, dirnames, filenames in os.walk(sd_env.home):
        for name in dirnames:
            os.chmod(os.path.join(dirpath, name), 0o755)
        for name in filenames:
            path = os.path.join(dirpath, name)
            if not os.path.islink(path):
                os.chmod(path, 0o644)
    assert loose_modes(sd_env.home)
    second: Daemon = make_daemon(sd_env, QUIET_WATCHER)
    assert stat.S_IMODE(os.stat(sd_env.home).st_mode) == 0o700
    assert loose_modes(sd_env.home) == []
    (wt / "a.txt").write_text("two\n")
    (wt / "b.txt").write_text("new\n")
    with second.client() as c:
        c.snapshot(str(wt), run_id="perm", node_id="n", tool_use_id="t1")
    assert loose_modes(sd_env.home) == []
    second.stop()
    log = second.log.read_text()
    assert "readable by group or others and are now private" in log
