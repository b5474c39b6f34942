"""The MCP twins of ``snapshotd turns`` and ``restore --before-turn/--after-turn``:
``list_turns`` and ``restore_turn`` (docs/mcp.md, docs/review.md "Turns").

Owns the tools' declarations. The work is ``Operations.list_turns`` and
``Operations.restore_turn_checkpoint``, the calls behind the CLI's (``snapshotd.ops.turns``).
Promises: ``restore_turn`` is the CLI's restore, every rule kept (a dry run unless
``dry_run=false``, refused while an attempt works unless ``force``, a safety checkpoint and the
undo command, confined), plus ``turn`` and ``resume_command``; both run in a worker thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations
from pydantic import Field

from snapshotd.ops import DEFAULT_PLAN_LIMIT, Operations

INSTRUCTIONS = (" list_turns lists a session's prompts (turns) with their tool calls, files "
                "changed and gaps; restore_turn brings the worktree back to before or after "
                "a prompt (before_turn / after_turn) and returns the command that resumes "
                "the conversation when the agent has one.")


def add_turns_tools(app: MCPServer, ops: Operations, guarded: Callable[..., Any]) -> None:
    """Declare ``list_turns`` and ``restore_turn`` on ``app``; ``guarded(fn)`` turns failures
    into tool errors as every other tool's are."""

    @app.tool(annotations=ToolAnnotations(title="List turns", read_only_hint=True,
                                          destructive_hint=False, idempotent_hint=True,
                                          open_world_hint=False))
    async def list_turns(
        run_id: Annotated[str, Field(description="The run, e.g. `claude-<session_id>`.")],
        node_id: Annotated[str | None, Field(description="Only this node.")] = None,
        attempt: Annotated[int | None, Field(ge=1, description="Only this attempt number.")
                           ] = None,
    ) -> dict[str, Any]:
        """A run's turns (one per prompt: `turn`, `started_at`, `first_line` redacted, the
        transcript file and position, `agent_session`), each with its `seqs`, `tool_calls`,
        `files` changed (additions, deletions) and `gaps`. As `snapshotd turns RUN --json`."""
        return await anyio.to_thread.run_sync(lambda: guarded(ops.list_turns)(
            run_id=run_id, node_id=node_id, attempt=attempt))

    @app.tool(annotations=ToolAnnotations(title="Restore to a turn", read_only_hint=False,
                                          destructive_hint=True, idempotent_hint=False,
                                          open_world_hint=False))
    async def restore_turn(
        run_id: Annotated[str, Field(description="The run.")],
        before_turn: Annotated[int | None, Field(ge=1, description="The state when prompt N "
                                                 "was submitted.")] = None,
        after_turn: Annotated[int | None, Field(ge=1, description="The state at the end of "
                                                "turn N.")] = None,
        node_id: Annotated[str | None, Field(description="The node (default: the one the "
                                             "run's turns are on).")] = None,
        dry_run: Annotated[bool, Field(description="Only compute the plan; pass false to "
                                       "restore.")] = True,
        to_dir: Annotated[str | None, Field(description="Materialize into this new or empty "
                                            "directory (absolute) instead.")] = None,
        iteration: Annotated[int | None, Field(ge=0, description="The iteration.")] = None,
        attempt: Annotated[int | None, Field(ge=1, description="The attempt.")] = None,
        force: Annotated[bool, Field(description="Restore in place even though an attempt "
                                     "works on the worktree.")] = False,
        plan_limit: Annotated[int, Field(ge=1, le=5000, description="At most this many plan "
                                         "entries.")] = DEFAULT_PLAN_LIMIT,
    ) -> dict[str, Any]:
        """Bring the worktree back to before (`before_turn`) or after (`after_turn`) a prompt,
        as restore_checkpoint does (safety checkpoint, `undo_command`, dry run by default);
        adds `turn` and `resume_command` (e.g. `claude --resume <session_id>`, or null)."""
        return await anyio.to_thread.run_sync(lambda: guarded(ops.restore_turn_checkpoint)(
            run_id=run_id, before_turn=before_turn, after_turn=after_turn, node_id=node_id,
            dry_run=dry_run, to_dir=to_dir, iteration=iteration, attempt=attempt,
            force=force, plan_limit=plan_limit))
