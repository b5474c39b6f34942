"""Tests of snapshotd.features.replication: push, fetch, restore anywhere, handoff."""
