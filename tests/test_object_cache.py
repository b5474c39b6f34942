"""The daemon caps libgit2's parsed-object cache where it starts (``daemon.OBJECT_CACHE_BYTES``,
read back from libgit2 in the real daemon process), and captures still work under the cap."""

from __future__ import annotations

import re

from conftest import Daemon, make_git_worktree
from snapshotd.daemon import OBJECT_CACHE_BYTES


def test_daemon_caps_object_cache(daemon: Daemon, tmp_path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    with daemon.client() as c:
        c.attempt_begin("run", "n", str(wt))
        (wt / "a.txt").write_text("one\n")
        first = c.snapshot(str(wt), run_id="run", node_id="n")
        (wt / "a.txt").write_text("two\n")
        second = c.snapshot(str(wt), run_id="run", node_id="n")
    assert second["seq"] == first["seq"] + 1
    caps = re.findall(r"libgit2 object cache capped at (\d+) bytes", daemon.log.read_text())
    assert caps and int(caps[-1]) == OBJECT_CACHE_BYTES < 256 << 20
