"""The MCP twin of ``snapshotd bisect``: ``bisect_checkpoints``, so an agent can ask which of
its own tool calls broke the tests.

Owns the tool's declaration. The work is ``Operations.bisect_checkpoints``, the call behind the
CLI's bisect (``snapshotd.ops.bisect``): read-only on the home, one scratch directory under
``$TMPDIR`` removed at the end, the command run as the server's user. Promises: bounded, each
run by ``timeout_s`` (killed with its process group, counted bad) and the search by
``max_steps`` (then ``status: incomplete`` names the checkpoints left); each step's output tail
is in the result; progress notifications say which seq is being tried; it runs in a worker
thread, so the server keeps answering meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import anyio
import anyio.from_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp_types import ToolAnnotations
from pydantic import Field

from snapshotd.ops import Operations

INSTRUCTIONS = (" bisect_checkpoints runs a command (your tests) on the checkpoints of an "
                "attempt in a scratch copy and names the first tool call whose checkpoint "
                "fails it (exit 0 good, 125 skip, 1-127 bad), as `git bisect run` does; "
                "your worktree is never touched.")


def add_bisect_tool(app: MCPServer, ops: Operations, guarded: Callable[..., Any]) -> None:
    """Declare ``bisect_checkpoints`` on ``app``; ``guarded(fn)`` turns failures into tool
    errors as every other tool's are."""

    @app.tool(annotations=ToolAnnotations(title="Bisect checkpoints", read_only_hint=True,
                                          destructive_hint=False, idempotent_hint=True,
                                          open_world_hint=False))
    async def bisect_checkpoints(
        ctx: Context,
        run_id: Annotated[str, Field(description="The run.")],
        node_id: Annotated[str, Field(description="The node, e.g. `session`.")],
        command: Annotated[list[str], Field(min_length=1, description="The command and its "
                                            "arguments, e.g. [\"pytest\", \"-x\", \"tests\"]; "
                                            "run in the checkpoint's files, not a shell line "
                                            "(use [\"sh\", \"-c\", \"...\"] for one).")],
        good: Annotated[int | None, Field(ge=0, description="A seq known good (default: the "
                                          "attempt's first checkpoint).")] = None,
        bad: Annotated[int | None, Field(ge=0, description="A seq known bad (default: the "
                                         "attempt's newest).")] = None,
        iteration: Annotated[int | None, Field(ge=0, description="The iteration (default: "
                                               "the newest).")] = None,
        attempt: Annotated[int | None, Field(ge=1, description="The attempt (default: the "
                                             "newest).")] = None,
        timeout_s: Annotated[float, Field(gt=0, le=3600, description="Seconds one run may "
                                          "take; a run past it counts as bad.")] = 300.0,
        max_steps: Annotated[int, Field(ge=1, le=30, description="At most this many runs "
                                        "of the command.")] = 12,
    ) -> dict[str, Any]:
        """Which checkpoint (tool call) of an attempt first fails `command`: runs it in a
        scratch copy of checkpoints between `good` and `bad`, binary search, and returns
        `first_bad` (seq, label, tool_use_id, diff_stat), `last_good`, `status` (`found`;
        `ambiguous` or `incomplete` with `could_be`), and each step's verdict and output tail."""

        def progress(step: int, total: int, row: dict) -> None:
            anyio.from_thread.run(ctx.report_progress, step, total,
                                  f"step {step} of ~{total}: seq {row['seq']}")

        def work() -> dict:
            return guarded(ops.bisect_checkpoints)(
                run_id=run_id, node_id=node_id, command=list(command), good=good, bad=bad,
                iteration=iteration, attempt=attempt, timeout_s=timeout_s,
                max_steps=max_steps, progress=progress)

        return await anyio.to_thread.run_sync(work)
