"""Tests of snapshotd.capture: what a capture holds, skips and seeds, and the stat cache."""
