"""A stat cache that cannot be written at shutdown is only a cache (the next start hashes the
worktree again), but it is said in the log, not swallowed."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import pytest

from snapshotd.capture.stat_caches import StatCaches
from snapshotd.store.store import Store


def test_a_stat_cache_that_cannot_be_written_is_logged(tmp_path: Path,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("a\n")
    store = Store(tmp_path / "home")
    caches = StatCaches(store)
    index = caches.worktree(wt)
    index.capture()
    (wt / "a.txt").write_text("b\n")
    index.capture()
    cache = index.gitdir / "index"
    cache.unlink(missing_ok=True)
    (cache / "in-the-way").mkdir(parents=True)  # libgit2 cannot rename its new index here
    with caplog.at_level(logging.WARNING, logger="snapshotd.store"):
        caches.persist_all()
    assert "could not write the stat cache" in caplog.text
    shutil.rmtree(cache)
