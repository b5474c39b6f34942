"""Tests whose oracle is the git CLI: diff, export, blame, history, raw bytes, seeding."""
