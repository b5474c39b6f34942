"""Tests of snapshotd.daemon: the server, its threads, HTTP and native hooks, the service."""
