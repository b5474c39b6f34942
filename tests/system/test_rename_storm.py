"""Checkpoints under a rename storm (``mv a b; mv b a; mv dirA dirB; ...``) hold a state the
worktree was in, or say they may not: the engine of tests/support/storm.py, bounded for CI (the
long run: ``python -m bench.chaos --seconds 0 --storm 60``). Captures of the chaos world's
worktree and, through explicit ids, of a second directory, each under its own storm; every
checkpoint is read back with the git CLI. Before captures were settled, about two in three
held a file in neither of its places (docs/durability.md, "Captures during renames")."""

from __future__ import annotations

from tests.support.chaos import Chaos
from tests.support.storm import StormRun

CALLS = 10  # per directory: on the old code about half of the checkpoints were torn


def test_no_checkpoint_under_a_rename_storm_is_torn_unmarked() -> None:
    # Under /tmp, not tmp_path: ``nobody`` must reach it. ``close`` removes everything.
    world = Chaos(48)
    try:
        # The worker's snapshot request is what the hook sends (explicit ids for the second
        # directory), without a process start per call: more captures in the time.
        run = StormRun(world, hooks=False, peer=False, filler=8)
        counts = run.run(120, seed=48, max_calls=CALLS, spacing_ms=40)
        log = world.log_tail()
    finally:
        world.close()
    daemon = counts["daemon"]
    assert daemon["checkpoints"] >= 1, (counts, log)
    assert daemon["torn_unmarked"] == 0, (counts, log)
