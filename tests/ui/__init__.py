"""Tests of snapshotd.ui: the web app over HTTP, in a browser, and its tree diff."""
