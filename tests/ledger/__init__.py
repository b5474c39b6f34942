"""Tests of snapshotd.ledger: the contract on both backends, its cache and its errors."""
