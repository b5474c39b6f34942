"""Recording a capture: what turns a worktree's tree into the attempt's next checkpoint.

Owns the steps after a capture read the worktree (``service.service`` reads it under the
worktree's lock and calls ``Recorder.record`` still holding it): the seq (from the ledger's row
and the ref's trailer, never below ``service.seqmarks``' durable reservation), the commit and
the ref (``Store.commit``), the ledger row, the listeners told of it (replication), and the
reply with the capture's latency sample (``Recorder.reply``, also for a repeated tool call or an
unchanged tree). Promises:
- Write order is seq reservation → objects, commit, ref → ledger row → listeners → reply. Each
  failure before the row leaves a gap naming its reason (``commit-failed``, ``store-write-failed``,
  ``ledger-failed``) and raises ``ServiceError``; nothing failed is ever acknowledged.
- A tool call another daemon sharing the ledger recorded first is answered with that daemon's
  checkpoint, and ours is rewound (never left as a row-less ref to be "repaired"); a seq another
  daemon took at the same time rewinds ours and is a gap.
- A listener that fails is logged and never fails an acknowledged capture.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import pygit2

from snapshotd.capture import Capture
from snapshotd.core import (
    CAPTURE_FAILED,
    Checkpoint,
    ServiceError,
    Trailers,
    crash_point,
    cut_line,
    injected_delay,
    user_gitdir,
    user_head,
    worktree_findings,
)
from snapshotd.ledger import IN_FLIGHT, Attempt, DuplicateToolCall, Ledger, SeqConflict
from snapshotd.service.labels import relative_label
from snapshotd.service.ownership import Ownership
from snapshotd.service.request import HOOK_LABEL_MAX, SnapshotRequest, outcome_json, tool_ids_of
from snapshotd.service.seqmarks import SeqMarks
from snapshotd.store import Store, StoreError

log = logging.getLogger("snapshotd.recording")

# Findings kept on one checkpoint (its trailer and row stay small); any one withholds it.
MAX_SECRET_FINDINGS = 100
# Capture latencies kept per tier for ``status`` (the older half is dropped past this).
_LATENCY_SAMPLES = 2000

# ``record_gap(request, attempt, reason, detail)``: the service's gap writer.
GapWriter = Callable[[SnapshotRequest, Attempt | None, str, str], None]


class Recorder:
    """Commits captures and records their rows for one service; callable from any thread (the
    caller holds the worktree's lock)."""

    def __init__(self, store: Store, ledger: Ledger, seqmarks: SeqMarks, record_gap: GapWriter,
                 counters: dict[str, int],
                 on_checkpoint: list[Callable[[Attempt, dict], None]],
                 ownership: Ownership) -> None:
        self.store = store
        self.ownership = ownership  # the tool calls in flight, and who owns a tier-2 capture
        self.ledger = ledger
        self.seqmarks = seqmarks
        self.record_gap = record_gap
        self.counters = counters  # the service's, shown by ``status``
        self.on_checkpoint = on_checkpoint  # the service's listeners, added to after this
        self.latencies: dict[int, list[float]] = {1: [], 2: []}

    def record(self, attempt: Attempt, req: SnapshotRequest, capture: Capture,
               head: pygit2.Commit | None, last: dict | None, started: float) -> dict:
        """Commit ``capture`` as the attempt's next checkpoint and record its row."""
        root = str(attempt.worktree)
        try:
            seq = max(self._next_seq(head, last), self.seqmarks.floor(attempt.key))
            self.seqmarks.reserve(attempt.key, seq)
        except OSError as exc:
            self.record_gap(req, attempt, "commit-failed", f"seq reservation: {exc}")
            raise ServiceError(CAPTURE_FAILED,
                               f"could not reserve a seq for {attempt.key}: {exc}") from exc
        added, modified, deleted = self._changes(head, capture.tree)
        # An attempt's first checkpoint also answers for the worktree's path, which every one
        # of its commits names (held there, all the attempt is: pushing a ref sends history).
        found = _unique(([] if head is not None else worktree_findings(root))
                        + capture.secrets)[:MAX_SECRET_FINDINGS] or None
        parent = str(head.id) if head else None
        base, base_tree = self._base(attempt) if head is None else (None, None)
        owner = self.ownership.capture_owner(attempt, req.tier)
        checkpoint = Checkpoint(key=attempt.key, seq=seq, tier=req.tier, source=req.source,
                                worktree=root, label=checkpoint_label(req, root),
                                tool_use_id=req.tool_use_id, base=base, base_tree=base_tree,
                                secrets=found, tree=capture.tree, parent=parent, added=added,
                                modified=modified, deleted=deleted,
                                skipped=capture.skipped or None, owner=owner,
                                owner_how=IN_FLIGHT if owner else None)
        commit = None
        try:
            commit = self.store.commit(checkpoint, capture.tree, parent)
            row = replace(checkpoint, commit=commit, created_at=time.time()).to_row()
            row["outcome"] = outcome_json(req)  # a failed tool call's mark (not in the commit)
            row["tool_aliases"] = req.tool_aliases  # the call's other ids: tool_calls rows
            row["started_at"] = self.ownership.started_at(attempt, tool_ids_of(req))
            injected_delay("before-row")
            self.ledger.record_checkpoint(attempt, row)
            crash_point("after-row")
        except DuplicateToolCall as exc:
            # Another daemon sharing the ledger recorded this tool call first: its checkpoint
            # is the answer, and ours never happened (a row-less ref would be "repaired" later).
            assert commit is not None
            self.store.rewind(attempt.key, commit, parent)
            winner = self.ledger.tool_call(attempt.pk, exc.tool_use_id)
            self.counters["repeats"] += 1
            return self.reply(attempt, winner or {"seq": exc.seq, "commit": None,
                                                   "tree": None},
                               deduped=True, repeated=True, started=started)
        except SeqConflict as exc:
            assert commit is not None
            self.store.rewind(attempt.key, commit, parent)
            self.record_gap(req, attempt, "commit-failed", f"another daemon recorded into "
                            f"{attempt.key} at the same time: {exc}")
            raise ServiceError(CAPTURE_FAILED,
                               f"could not record the checkpoint: {exc}") from exc
        except StoreError as exc:  # the commit or ref: store-write-failed or commit-failed
            self.record_gap(req, attempt, exc.reason, exc.message)
            raise ServiceError(CAPTURE_FAILED,
                               f"could not record the checkpoint: {exc}") from exc
        except Exception as exc:  # noqa: BLE001 - the ledger row
            self.record_gap(req, attempt, "ledger-failed", f"{type(exc).__name__}: {exc}")
            raise ServiceError(CAPTURE_FAILED,
                               f"could not record the checkpoint: {exc}") from exc
        self.counters[f"captures_tier{req.tier}"] += 1
        self.ownership.recorded(attempt, seq=seq, tier=req.tier, created_at=row["created_at"],
                                owner=owner)
        self.ownership.closed(attempt, tool_ids_of(req))
        self._announce(attempt, row)
        reply = self.reply(attempt, {"seq": seq, "commit": commit, "tree": capture.tree},
                            deduped=False, started=started, skipped=capture.skipped,
                            changes={"added": added, "modified": modified, "deleted": deleted},
                            tier=req.tier, scan="full" if capture.full_scan else "fast")
        if found:
            reply["secrets"] = found  # kept here, withheld from replication (``withhold``)
        return reply

    def _base(self, attempt: Attempt) -> tuple[str | None, str | None]:
        """For an attempt's first checkpoint: the commit the worktree's HEAD names (export's
        base) and its tree, brought into the store and kept there (review's base; None when
        that failed, logged: review then compares with an empty tree)."""
        root = Path(attempt.worktree)
        commit = user_head(root)
        gitdir = user_gitdir(root) if commit else None
        if commit is None or gitdir is None:
            return commit, None
        return commit, self.store.keep_base(attempt.key, gitdir, commit)

    def reply(self, attempt: Attempt, cp: dict, *, deduped: bool, started: float,
              repeated: bool = False, skipped: list | None = None,
              changes: dict | None = None, tier: int | None = None,
              scan: str | None = None) -> dict:
        """The reply to a capture of ``attempt`` answered with ``cp`` (a new checkpoint, the
        newest one for an unchanged tree, or a repeated tool call's); with ``tier``, its
        latency counts in ``status``."""
        elapsed = (time.perf_counter() - started) * 1000
        if tier is not None:
            samples = self.latencies[tier]
            samples.append(elapsed)
            if len(samples) > _LATENCY_SAMPLES:
                del samples[:_LATENCY_SAMPLES // 2]
        answer = Checkpoint(key=attempt.key, seq=cp["seq"], commit=cp["commit"],
                            tree=cp["tree"], worktree=attempt.worktree)
        return answer.to_reply(deduped=deduped, elapsed_ms=round(elapsed, 3),
                               repeated=repeated, skipped=skipped, changes=changes, scan=scan)

    def _announce(self, attempt: Attempt, row: dict) -> None:
        for listener in self.on_checkpoint:
            try:
                listener(attempt, row)
            except Exception:  # noqa: BLE001 - a listener never fails an acknowledged capture
                log.exception("checkpoint listener failed for %s", attempt.worktree)

    def _next_seq(self, head: pygit2.Commit | None, last: dict | None) -> int:
        from_row = int(last["seq"]) if last is not None else -1
        # A head without a seq trailer counts as none: the row decides.
        from_ref = Trailers(head.message).seq if head is not None else None
        return max(from_row, -1 if from_ref is None else from_ref) + 1

    def _changes(self, head: pygit2.Commit | None, tree: str) -> tuple[int, int, int]:
        """Files added, modified and deleted against the previous checkpoint: walks only the
        subtrees whose ids differ, so the cost follows the change."""
        return self.store.tree_changes(str(head.tree_id) if head else None, tree)


def _unique(findings: list[dict]) -> list[dict]:
    """``findings`` without repeats (a directory's name is found once per new file under it)."""
    seen: set[tuple] = set()
    out = []
    for f in findings:
        key = (f.get("path"), f.get("line"), f.get("kind"), f.get("in"))
        if key not in seen:
            seen.add(key)
            out.append(f)
    return out


def checkpoint_label(req: SnapshotRequest, root: str) -> str | None:
    """The checkpoint's label: a hook's path named relative to the worktree, then cut (cut
    first, a long absolute path would lose the very part that names the file)."""
    if req.label_whole is None:
        return relative_label(req.label, root)
    return cut_line(relative_label(req.label_whole, root) or "", HOOK_LABEL_MAX)
