"""Tests of snapshotd.ops: the front ends' operations surface."""
