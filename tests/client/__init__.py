"""Tests of the client (snapshotd_client): protocol, hook, gaps, agents and their configs."""
