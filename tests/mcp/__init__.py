"""Tests of snapshotd.mcp: the MCP server through the SDK's client."""
