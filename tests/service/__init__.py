"""Tests of snapshotd.service: damage, seq marks, listing and paging."""
