"""The ``list`` op: a run's checkpoints from the ledger with its gaps from the spool, in one answer.

Owns the ``list`` op's shape (also ``snapshots --json`` and the MCP server's listing): every
checkpoint row of the run (optionally one node, one attempt), and every gap of the run, each
marked ``resolved`` when its tool call later got a checkpoint.

Promises: read-only; checkpoints in attempt and seq order, gaps in spool order.
"""

from __future__ import annotations

from snapshotd.errors import id_field, int_field
from snapshotd.gaps import GapSpool
from snapshotd.ledger import Ledger


def list_op(ledger: Ledger, gaps: GapSpool, fields: dict) -> dict:
    """The ``list`` op: validates ``run_id`` (``node_id``, ``attempt`` optional) and lists."""
    run_id = id_field("run_id", fields.get("run_id"))
    node_id = fields.get("node_id")
    if node_id is not None:
        node_id = id_field("node_id", node_id)
    attempt = fields.get("attempt")
    if attempt is not None:
        attempt = int_field(fields, "attempt", 1, 1)
    return list_run(ledger, gaps, run_id, node_id, attempt)


def list_run(ledger: Ledger, gaps: GapSpool, run_id: str, node_id: str | None = None,
             attempt: int | None = None) -> dict:
    """A run's checkpoints and its gaps; a gap whose tool call later got a checkpoint is
    marked resolved."""
    checkpoints = ledger.checkpoints(run_id, node_id, attempt)
    covered = ledger.tool_use_ids(run_id)
    gap_rows = []
    for gap in gaps.for_run(run_id):
        if node_id is not None and gap.get("node_id") != node_id:
            continue
        if attempt is not None and gap.get("attempt") not in (None, attempt):
            continue
        gap = dict(gap)
        gap["resolved"] = bool(gap.get("tool_use_id")) and gap["tool_use_id"] in covered
        gap_rows.append(gap)
    return {"run_id": run_id, "checkpoints": checkpoints, "gaps": gap_rows}
