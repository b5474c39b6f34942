"""A checkpoint commit's message: what goes in (``CheckpointMeta``), its subject and
``Snapshotd-*`` trailers (``build_message``), and reading them back (``parse_trailers``).

Promises: the trailers name the attempt, seq, tier, source and worktree of the checkpoint (and
its tool call, label, base and secret findings when it has them), one line each, so the ledger
can be rebuilt from the store alone (docs/durability.md, "A damaged ledger").
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from snapshotd.core.keys import AttemptKey


@dataclass
class CheckpointMeta:
    """What goes into a checkpoint commit's trailers."""

    key: AttemptKey
    seq: int
    tier: int
    source: str
    worktree: str
    label: str | None = None
    tool_use_id: str | None = None
    # The user's HEAD commit when the attempt began (its first checkpoint only): export's base.
    base: str | None = None
    # Tokens found in the files this checkpoint changed: [{"path", "line", "kind"}]. A commit
    # holding any is withheld from replication until released (``withhold``).
    secrets: list[dict] | None = None


def build_message(meta: CheckpointMeta) -> str:
    """A checkpoint commit's message: a subject, then the ``Snapshotd-*`` trailers."""
    label = _one_line(meta.label) if meta.label else ""
    subject = f"snapshotd: {meta.source} seq {meta.seq}" + (f" {label}" if label else "")
    trailers = [
        ("Snapshotd-Run", meta.key.run_id),
        ("Snapshotd-Node", meta.key.node_id),
        ("Snapshotd-Iteration", str(meta.key.iteration)),
        ("Snapshotd-Attempt", str(meta.key.attempt)),
        ("Snapshotd-Seq", str(meta.seq)),
        ("Snapshotd-Tier", str(meta.tier)),
        ("Snapshotd-Source", meta.source),
    ]
    if meta.tool_use_id:
        trailers.append(("Snapshotd-Tool-Use-Id", _one_line(meta.tool_use_id)))
    if label:
        trailers.append(("Snapshotd-Label", label))
    trailers.append(("Snapshotd-Worktree", _one_line(meta.worktree)))
    if meta.base:
        trailers.append(("Snapshotd-Base", meta.base))
    if meta.secrets:
        trailers.append(("Snapshotd-Secrets", json.dumps(meta.secrets, ensure_ascii=True,
                                                         separators=(",", ":"))))
    return subject + "\n\n" + "".join(f"{k}: {v}\n" for k, v in trailers)


def parse_trailers(message: str) -> dict[str, str]:
    """The ``Snapshotd-*`` trailers of a checkpoint commit message."""
    out: dict[str, str] = {}
    for line in message.splitlines():
        if line.startswith("Snapshotd-") and ": " in line:
            key, value = line.split(": ", 1)
            out[key] = value
    return out


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:300]
