"""Tests of snapshotd.features.review that do not use git as the oracle (tests/compat)."""
