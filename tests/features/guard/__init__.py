"""Tests of snapshotd.features.guard: destructive commands and the guard checkpoint."""
