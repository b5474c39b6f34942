"""Tests of snapshotd.watch: the notifier, the fast path, settle, prescan, the watcher."""
