"""Bracketing: a capture before each tool call, so changes made between two tool calls (by a
person, a background process) are their own checkpoint instead of part of the next tool call's.

Owns the ``before_tool`` op (``attach``), which ``snapshot-hook`` sends on an agent's before-tool
event (Claude Code and Codex ``PreToolUse``, Gemini ``BeforeTool``). The hook never reads the
daemon's configuration; this op decides (docs/agents.md, docs/protocol.md).

Promises:
- With ``bracket = false`` (the default) the op is a no-op that touches nothing (no attempt is
  created, no gap written) and answers ``{"bracket": false}`` at once.
- With ``bracket = true`` it is a ``snapshot`` request with source ``outside``, tier 1 and no
  tool call id (so the after-tool capture of the same call is not taken for a retry of it); an
  unchanged tree deduplicates, so a call with nothing in between costs one stat pass and adds
  no checkpoint. The reply is the ``snapshot`` reply with ``"bracket": true``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from snapshotd.core import Config, Registry
    from snapshotd.service import Service

SOURCE = "outside"


def before_tool(service: Service, fields: dict) -> dict:
    """The ``before_tool`` op: a capture with source ``outside`` when bracketing is on."""
    if not service.config.bracket:
        return {"bracket": False}
    request = dict(fields, source=SOURCE, tier=1, tool_use_id=None)
    result = service.snapshot(request)
    result["bracket"] = True
    return result


def attach(service: Service, server: Registry, config: Config) -> None:
    """Register the ``before_tool`` op on the daemon's server."""
    server.register("before_tool", lambda fields: before_tool(service, fields))
