"""Benchmarks for snapshotd. Each prints one JSON document and runs the git-CLI private-index
peer on the same tree in the same run, so ratios hold on a noisy machine."""
