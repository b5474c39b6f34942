"""Driving ``snapshotd mcp`` from a test: spawn it with a test ``Env`` and talk to it through the
MCP SDK's own stdio client (``with_mcp``), calling tools that must succeed (``call``) or must be
tool errors (``call_error``)."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from mcp import Client, StdioServerParameters

from tests.conftest import Env


def with_mcp(env: Env, body: Callable[[Client], Awaitable[None]], *args: str) -> None:
    """Spawn ``python -m snapshotd mcp`` with the test's environment and run ``body`` on it."""

    async def main() -> None:
        params = StdioServerParameters(command=sys.executable,
                                       args=["-m", "snapshotd", "mcp", *args],
                                       env=env.environ(), cwd=str(env.root))
        with anyio.fail_after(60):
            async with Client(params) as client:
                await body(client)

    anyio.run(main)


async def call(client: Client, tool: str, **arguments: Any) -> dict:
    """A tool call that must succeed; its structured result."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {tool_text(result)}"
    assert result.structured_content is not None
    return result.structured_content


async def call_error(client: Client, tool: str, **arguments: Any) -> str:
    """A tool call that must be a tool error (not a protocol error); its text."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool} unexpectedly succeeded: {result.structured_content}"
    return tool_text(result)


def tool_text(result: Any) -> str:
    """The text blocks of a tool result, joined."""
    return " ".join(getattr(block, "text", "") for block in result.content)
