"""Tests of snapshotd.cli: the table of commands."""
