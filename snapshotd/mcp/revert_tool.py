"""The MCP twin of ``snapshotd revert``: ``revert_checkpoint``, so an agent can undo one of its
own tool calls (or all of them) and keep everything done since, by it, the user or another
session in the same folder.

Owns the tool's declaration. The work is ``Operations.revert_checkpoint``, the call behind the
CLI's revert (the daemon's ``revert`` op): the same safety checkpoint, undo command, refusals
and confinement (it writes only inside the reverted attempt's recorded worktree, never through
a link). Promises: a dry run unless ``dry_run=false``; a revert refused for conflicts is a
result (``refused: true``, ``conflicts`` with both sides), not an error, and changed nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any, Literal

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations
from pydantic import Field

from snapshotd.ops import Operations

INSTRUCTIONS = (" revert_checkpoint undoes one tool call's change (tool_call), a checkpoint "
                "or range (seq, to_seq) or everything an attempt did (all=true) and keeps "
                "every change made since, as `git revert` does; a dry run unless "
                "dry_run=false; where anything conflicts nothing is written.")


def add_revert_tool(app: MCPServer, ops: Operations, guarded: Callable[..., Any]) -> None:
    """Declare ``revert_checkpoint`` on ``app``; ``guarded(fn)`` turns failures into tool
    errors as every other tool's are."""

    @app.tool(annotations=ToolAnnotations(title="Revert a change", read_only_hint=False,
                                          destructive_hint=True, idempotent_hint=False,
                                          open_world_hint=False))
    async def revert_checkpoint(
        run_id: Annotated[str, Field(description="The run.")],
        node_id: Annotated[str, Field(description="The node, e.g. `session`.")],
        tool_call: Annotated[str | None, Field(description="Undo everything this tool call "
                                               "changed (any of its ids).")] = None,
        seq: Annotated[int | None, Field(ge=0, description="Undo this checkpoint's change "
                                         "(with to_seq: the range seq..to_seq).")] = None,
        to_seq: Annotated[int | None, Field(ge=0, description="Last seq of the range.")
                          ] = None,
        turn: Annotated[int | None, Field(ge=1, description="Undo everything the tool calls "
                                          "of prompt N's turn changed (list_turns).")
                        ] = None,
        all: Annotated[bool, Field(description="Undo everything the attempt's tool calls "  # noqa: A002
                                   "changed.")] = False,
        dry_run: Annotated[bool, Field(description="Only say what each path would become "
                                       "(reverted, merged, conflict, untouched); change "
                                       "nothing. Pass false to revert.")] = True,
        conflicts: Annotated[Literal["refuse", "markers"], Field(
            description="On conflicts: write nothing (refuse) or write git-style markers."
        )] = "refuse",
        iteration: Annotated[int | None, Field(ge=0, description="The iteration (default: "
                                               "the newest).")] = None,
        attempt: Annotated[int | None, Field(ge=1, description="The attempt (default: the "
                                             "newest).")] = None,
        force: Annotated[bool, Field(description="Revert even though an attempt is active "
                                     "on the worktree (e.g. your own session). The safety "
                                     "checkpoint is still taken.")] = False,
    ) -> dict[str, Any]:
        """Undo a change against the worktree as it is now, keeping later changes: paths
        nobody changed since go back, paths changed since are merged line by line; any
        conflict writes nothing (`refused`, `conflicts` with both sides). Applied: a safety
        checkpoint first, `undo_command` returned; only the worktree is written."""

        def work() -> dict:
            return guarded(ops.revert_checkpoint)(
                run_id=run_id, node_id=node_id, seq=seq, to_seq=to_seq, tool_call=tool_call,
                all_=all, dry_run=dry_run, conflicts=conflicts, iteration=iteration,
                attempt=attempt, force=force, turn=turn)

        return await anyio.to_thread.run_sync(work)
