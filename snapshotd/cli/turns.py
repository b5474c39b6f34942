"""``snapshotd turns RUN``: a session's prompts, each with what it did (docs/review.md, "Turns").

Owns the human listing of a run's turns: per turn its number, age and first line (redacted when
recorded; ``(prompt not recorded)`` with ``record_prompts = false``), then one line per tool call
(label, id, FAILED), the files it changed with ``+/-`` line counts, and its gaps. The listing is
``Operations.list_turns`` (``snapshotd.ops.turns``), the one the MCP ``list_turns`` returns.
Promises: ``--json`` prints that listing whole; control characters are escaped; an unknown run
exits 1 naming the known runs.
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from snapshotd.cli.common import op_options, operations, print_json, run_call
from snapshotd.cli.terminal import field
from snapshotd.cli.texts import age, call_text

FILES_SHOWN = 20


@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", default=None, help="Only this node.")
@click.option("--attempt", type=click.IntRange(min=1), default=None,
              help="Only this attempt number.")
@op_options
def turns(run_id: str, node_id: str | None, attempt: int | None, home: Path | None,
          socket_: Path | None, as_json: bool) -> None:
    """List the turns (prompts) of RUN with their tool calls, files changed and gaps."""
    result = run_call(operations(home, socket_).list_turns, run_id=run_id, node_id=node_id,
                      attempt=attempt)
    if as_json:
        print_json(result)
        return
    if not result["turns"]:
        click.echo(f"run {field(run_id)}: no turns recorded (no prompt event reached the "
                   "daemon; docs/agents.md, \"Turns\")")
        return
    now = time.time()
    for t in result["turns"]:
        first = field(t["first_line"]) if t.get("first_line") else "(prompt not recorded)"
        click.echo(f"turn {t['turn']}  {age(now - t['started_at'])} ago  "
                   f"{field(t['node_id'])}/{t['iteration']}/{t['attempt']}: {first}")
        for call in t["tool_calls"]:
            failed = "  FAILED" if call.get("failed") else ""
            click.echo(f"  {call_text(call)}{failed}")
        for f in (t.get("files") or [])[:FILES_SHOWN]:
            counts = "binary" if f.get("binary") else f"+{f['additions']} -{f['deletions']}"
            click.echo(f"    {f['status']} {field(f['path'])}  {counts}")
        if len(t.get("files") or []) > FILES_SHOWN:
            click.echo(f"    ... and {len(t['files']) - FILES_SHOWN} more file(s)")
        for gap in t["gaps"]:
            state = "resolved" if gap.get("resolved") else "UNRESOLVED"
            click.echo(f"  GAP {field(gap.get('reason'))} {state}: {field(gap.get('detail'))}")
