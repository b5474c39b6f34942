"""The randomized fault test, bounded for CI: the engine of tests/support/chaos.py on a fixed list of
seeds, each for a few seconds (the whole file stays under a minute), mixing tool calls after
random edits (odd names, symlinks, FIFOs, ``chmod 000`` paths), restores, gc, new attempts,
``kill -9`` and injected store and ledger write faults, and checking every invariant after
every step. A failure names the seed and step: replay it, longer, with
``python -m bench.chaos --seed N``.

Run as root, the daemon runs as ``nobody`` (so unreadable paths are real); otherwise as the
caller, for whom ``chmod 000`` is just as real."""

from __future__ import annotations

import pytest

from tests.support.chaos import Chaos

SEEDS = (1, 2, 3)
SECONDS_PER_SEED = 12


@pytest.mark.parametrize("seed", SEEDS)
def test_random_faults_break_no_invariant(seed: int) -> None:
    # Under /tmp, not tmp_path: ``nobody`` must reach it (pytest's base directory is private).
    # ``close`` stops the daemon and removes everything.
    world = Chaos(seed)
    try:
        stats = world.run(SECONDS_PER_SEED, max_steps=40)
        log = world.log_tail()
    finally:
        world.close()
    assert not stats.violations, (
        f"seed {seed} (replay: python -m bench.chaos --seed {seed}): {stats.violations}\n"
        f"daemon log: {log}")
    # The run did something worth checking (every step ends in the invariant check).
    assert stats.steps >= 3 and stats.captures + sum(stats.gaps.values()) >= 1, stats.as_dict()
