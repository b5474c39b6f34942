"""Memory bounded by what is active, not by history (issue 48): what one attempt's captures keep
in the daemon stays under a constant however many checkpoints the attempt has. Real SQLite
ledger, real store; ``bench.soak`` measures the daemon's RSS over 100,000 captures."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

from snapshotd.capture.stat_caches import StatCaches
from snapshotd.core.checkpoint import Checkpoint
from snapshotd.core.keys import AttemptKey
from snapshotd.ledger.cache import TOOL_CALLS_KEPT
from snapshotd.ledger.ledger import Ledger
from snapshotd.store.store import Store

pytestmark = pytest.mark.one_ledger("a unit of the SQLite read cache and the store")


def test_reading_an_attempts_head_keeps_nothing_per_read(tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("a\n")
    store = Store(tmp_path / "home")
    tree = StatCaches(store).worktree(wt).capture().tree
    key = AttemptKey("r", "n", 0, 1)
    commit = store.commit(Checkpoint(key=key, seq=0, tier=1, source="cli", worktree=str(wt)),
                          tree, None)

    def head() -> None:
        # A new key each time, as each capture's request makes one.
        found = store.head(AttemptKey("r", "n", 0, 1))
        assert found is not None and str(found.id) == commit

    tracemalloc.start()
    try:
        for _ in range(200):  # warm: whatever is kept once is kept by now
            head()
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(3000):
            head()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # Before the fix every read kept its ref name (pygit2 1.21 never frees the name a lookup
    # is given): about 75 bytes a read, 220 KB here.
    assert grown < 30_000, f"{grown} bytes kept by 3,000 reads of one ref"


def test_an_attempts_known_tool_calls_stay_bounded_and_answer_right(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "snapshotd.db")
    attempt = ledger.create_attempt(AttemptKey("run", "n", 0, 1), "/w")
    captures = 2 * TOOL_CALLS_KEPT + 50
    for seq in range(captures):
        # The capture path asks first (the hook's dedupe), then records.
        assert ledger.tool_call(attempt.pk, f"toolu_{seq}") is None
        ledger.record_checkpoint(attempt, {
            "seq": seq, "commit": f"{seq:040x}", "tree": f"{seq + 1:040x}", "parent": None,
            "source": "hook", "tier": 1, "label": None, "tool_use_id": f"toolu_{seq}",
            "worktree": "/w", "created_at": time.time()})
        assert ledger.counters()["cache_entries"] <= TOOL_CALLS_KEPT + 10
    # Past the bound the ledger answers: old and new tool calls are still known, new ones not.
    for seq in (0, TOOL_CALLS_KEPT + 1, captures - 1):
        found = ledger.tool_call(attempt.pk, f"toolu_{seq}")
        assert found is not None and found["seq"] == seq
    assert ledger.tool_call(attempt.pk, "toolu_never") is None
    ledger.close()
