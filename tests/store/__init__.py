"""Tests of snapshotd.store: refs, trees, loose objects, recovery of store.git."""
