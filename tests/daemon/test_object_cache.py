"""The daemon caps libgit2's parsed-object cache where it starts (``daemon.OBJECT_CACHE_BYTES``)
and its pack mappings (``PACK_MAPPED_BYTES`` in windows of ``PACK_WINDOW_BYTES``), each read
back from libgit2 in the real daemon process, and captures still work under the caps."""

from __future__ import annotations

import re

from snapshotd.daemon.daemon import OBJECT_CACHE_BYTES, PACK_MAPPED_BYTES, PACK_WINDOW_BYTES
from tests.conftest import Daemon, make_git_worktree


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
    maps = re.findall(r"pack maps at (\d+) bytes in windows of (\d+)", daemon.log.read_text())
    # libgit2's defaults on 64-bit: 8 GiB mapped, 1 GiB windows.
    assert maps and (int(maps[-1][0]), int(maps[-1][1])) == (PACK_MAPPED_BYTES, PACK_WINDOW_BYTES)
    assert PACK_MAPPED_BYTES < 8 << 30 and PACK_WINDOW_BYTES < 1 << 30
