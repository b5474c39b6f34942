"""The test suite: folders mirror snapshotd's packages (README.md, Tests)."""
