"""Tests of snapshotd.features.restore."""
