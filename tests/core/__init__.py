"""Tests of snapshotd.core: keys, errors, config, secrets, the user's repository, the home."""
