"""A tool call's start: it is in flight from now on, and (``bracket``) a capture before it.

Owns the ``before_tool`` op (``attach``), which ``snapshot-hook`` sends on an agent's before-tool
event (Claude Code, Codex and Qwen ``PreToolUse``, Gemini ``BeforeTool``). The hook never reads
the daemon's configuration; this op decides (docs/agents.md, docs/protocol.md).

Promises:
- Always: the attempt the request would be attributed to has the tool call (its ids, its label)
  in flight from now (``Service.tool_started``; docs/review.md, "Who changed what"): memory only,
  no capture, no store or ledger write, no attempt created, no gap. ``"in_flight"`` says whether
  an active attempt was found.
- With ``bracket = true`` first a ``snapshot`` request with source ``outside``, tier 1 and no
  tool call id (so the after-tool capture of the same call is not taken for a retry of it); an
  unchanged tree deduplicates. The reply is the ``snapshot`` reply with ``"bracket": true``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from snapshotd.core import Config, Registry
    from snapshotd.service import Service

SOURCE = "outside"


def before_tool(service: Service, fields: dict) -> dict:
    """The ``before_tool`` op: the call in flight, after a capture with source ``outside`` when
    bracketing is on."""
    started_at = time.time()
    result: dict = {"bracket": False}
    if service.config.bracket:
        request = dict(fields, source=SOURCE, tier=1, tool_use_id=None, tool_aliases=None)
        result = service.snapshot(request)
        result["bracket"] = True
    result["in_flight"] = service.tool_started(fields, started_at)
    return result


def attach(service: Service, server: Registry, config: Config) -> None:
    """Register the ``before_tool`` op on the daemon's server."""
    server.register("before_tool", lambda fields: before_tool(service, fields))
