"""Tests of snapshotd.features: gc, engine, sessions, repair, purge, withhold."""
