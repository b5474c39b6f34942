"""Which tool call each checkpoint is, and which tool calls an attempt saw: the one read model
every front end (snapshots, runs, show, log, find, blame, export, the web app, MCP) uses
(issue 43, docs/review.md "Who changed what").

Owns ``ToolCallIndex`` (built from checkpoint rows and ``Ledger.tool_calls`` rows), ``annotate``
and ``with_tool_calls`` (rows given ``tool_call`` and ``tool_calls``), ``call_span`` (the
checkpoints one tool call's change runs over, by any of its ids), ``run_calls`` (one entry per
call of a listing) and ``count_calls``.
Promises: a checkpoint's ``tool_call`` is its own id ("own"), else its owner ("in-flight",
"inferred") with the owner's label and outcome from its tool call row, else None; its
``tool_calls`` are the deduplicated calls and snapshotd's events mapped to its seq, one entry
per call (rows of one attempt and seq written together with one label are one call: its
other ids are ``aliases``). Nothing is written. ``ToolCallIndex.of_change`` is where a per-path attribution
(another session's tool call, issue 43 "Other actors") plugs in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from snapshotd.ledger import Ledger

OWN = "own"
# The ledger writes a call's ids ``ALIAS_STEP`` (a microsecond) apart, its own id first: rows of
# one seq with the same label, kind and outcome this close are one call's.
ALIAS_WINDOW = 1e-3
OUTCOME = ("failed", "exit_code", "error")
Key = tuple[str, str, int, int]


def key_of(row: dict) -> Key:
    """The attempt a checkpoint or tool call row belongs to."""
    return row["run_id"], row["node_id"], row["iteration"], row["attempt"]


def group_calls(rows: Iterable[dict]) -> list[dict]:
    """The ledger's tool call rows (in its order) as one entry per call: ``id`` (its first
    row's), ``aliases`` (the others), ``label``, ``kind``, the outcome, ``seq``, ``deduped``,
    ``started_at``, ``created_at`` and the attempt's key fields. A checkpoint's own rows
    (not deduplicated) are one call per seq; deduplicated rows are one call when they share
    seq, label, kind and outcome and were written together (``ALIAS_WINDOW``)."""
    out: list[dict] = []
    by_group: dict[tuple, dict] = {}
    for row in rows:
        group = (key_of(row), row["seq"], bool(row["deduped"])) + (
            (row.get("label"), row.get("kind"), *(row.get(k) for k in OUTCOME))
            if row["deduped"] else ())
        found = by_group.get(group)
        if found is not None and (not row["deduped"] or abs(
                (row["created_at"] or 0) - (found["created_at"] or 0)) <= ALIAS_WINDOW):
            found["aliases"].append(row["tool_use_id"])
            continue
        entry = {k: row[k] for k in ("run_id", "node_id", "iteration", "attempt", "seq")}
        entry.update(id=row["tool_use_id"], aliases=[], label=row.get("label"),
                     kind=row.get("kind"), deduped=bool(row["deduped"]),
                     started_at=row.get("started_at"), created_at=row.get("created_at"),
                     **{k: row.get(k) for k in OUTCOME})
        by_group[group] = entry
        out.append(entry)
    return out


def listed(call: dict) -> dict:
    """A deduplicated call or event as a checkpoint's ``tool_calls`` lists it."""
    return {"id": call["id"], "aliases": list(call["aliases"]), "label": call["label"],
            "kind": call["kind"], **{k: call[k] for k in OUTCOME}}


class ToolCallIndex:
    """The tool calls of some attempts, looked up by checkpoint or by any id."""

    def __init__(self, checkpoints: Iterable[dict], call_rows: Iterable[dict]) -> None:
        self.calls = group_calls(call_rows)
        self.checkpoints = list(checkpoints)
        self._by_id: dict[tuple[Key, str], dict] = {}
        self._held: dict[tuple[Key, int], list[dict]] = {}
        self._own: dict[tuple[Key, int], dict] = {}
        for call in self.calls:
            for tool_id in (call["id"], *call["aliases"]):
                self._by_id.setdefault((key_of(call), tool_id), call)
            place = (key_of(call), call["seq"])
            if call["deduped"]:
                self._held.setdefault(place, []).append(call)
            else:
                self._own[place] = call

    def call(self, key: Key, tool_id: str) -> dict | None:
        """The call of attempt ``key`` one of whose ids is ``tool_id``."""
        return self._by_id.get((key, tool_id))

    def of_checkpoint(self, cp: dict) -> dict | None:
        """The checkpoint's ``tool_call``: its own, else its owner, else None."""
        key = key_of(cp)
        if cp.get("tool_use_id"):
            own = self._own.get((key, cp["seq"]))
            aliases = [a for a in ([own["id"], *own["aliases"]] if own else [])
                       if a != cp["tool_use_id"]]
            return {"id": cp["tool_use_id"], "aliases": aliases, "label": cp.get("label"),
                    "how": OWN, **{k: cp.get(k) for k in OUTCOME}}
        owner = cp.get("owner")
        if not owner:
            return None
        found = self.call(key, owner)
        if found is None:  # its end has not come yet: known by its id alone
            return {"id": owner, "aliases": [], "label": None, "how": cp.get("owner_how"),
                    "failed": False, "exit_code": None, "error": None}
        return {"id": owner, "aliases": [i for i in (found["id"], *found["aliases"])
                                         if i != owner],
                "label": found["label"], "how": cp.get("owner_how"),
                **{k: found[k] for k in OUTCOME}}

    def of_change(self, cp: dict, path: str | None = None) -> dict | None:
        """The tool call a change in ``cp`` (of ``path``, when given) is credited to; today the
        checkpoint's ``tool_call`` for every path (the extension point for a change another
        session's tool call made)."""
        return self.of_checkpoint(cp)

    def held_at(self, cp: dict) -> list[dict]:
        """The deduplicated calls and events whose state is this checkpoint."""
        return [listed(c) for c in self._held.get((key_of(cp), cp["seq"]), [])]

    def annotate(self, cp: dict) -> dict:
        """A copy of ``cp`` with ``tool_call`` and ``tool_calls``."""
        return dict(cp, tool_call=self.of_checkpoint(cp), tool_calls=self.held_at(cp))


def annotate(checkpoints: list[dict], call_rows: Iterable[dict],
             extend: Callable[[dict, ToolCallIndex], dict] | None = None) -> list[dict]:
    """Copies of ``checkpoints`` with ``tool_call`` and ``tool_calls`` (``extend``, when given,
    adds more keys to each from the same index)."""
    index = ToolCallIndex(checkpoints, call_rows)
    out = [index.annotate(cp) for cp in checkpoints]
    return out if extend is None else [dict(cp, **extend(cp, index)) for cp in out]


def run_calls(annotated: list[dict]) -> list[dict]:
    """One entry per tool call (and event) of annotated checkpoint rows, in the order they
    first appear: ``id``, ``aliases``, ``label``, ``kind``, ``how`` (its first checkpoint's;
    None for a call that owns none), the outcome, the attempt's key fields, ``seqs`` (the
    checkpoints it owns) and ``held_at`` (the seq its deduplicated capture found, or None)."""
    out: dict[tuple, dict] = {}

    def entry(cp: dict, call: dict, how: str | None) -> dict:
        ids = (call["id"], *call.get("aliases", ()))
        place = next((k for k in ((key_of(cp), i) for i in ids) if k in out), None)
        if place is None:
            place = (key_of(cp), call["id"])
            out[place] = {"id": call["id"], "aliases": list(call.get("aliases", [])),
                          "label": call.get("label"), "kind": call.get("kind"), "how": how,
                          **{k: call.get(k) for k in OUTCOME},
                          **{k: cp[k] for k in ("run_id", "node_id", "iteration", "attempt")},
                          "seqs": [], "held_at": None}
        found = out[place]
        found["label"] = found["label"] or call.get("label")
        found["how"] = found["how"] or how
        return found

    for cp in annotated:
        if cp.get("tool_call"):
            entry(cp, cp["tool_call"], cp["tool_call"].get("how"))["seqs"].append(cp["seq"])
        for held in cp.get("tool_calls") or []:
            entry(cp, held, None)["held_at"] = cp["seq"]
    return list(out.values())


def read_calls(ledger: Ledger, rows: list[dict]) -> list[dict]:
    """The ledger's tool call rows of the attempts ``rows`` belong to, in as few reads as the
    filters allow (one per run)."""
    out: list[dict] = []
    for run in dict.fromkeys(r["run_id"] for r in rows):
        mine = [r for r in rows if r["run_id"] == run]
        nodes = {r["node_id"] for r in mine}
        attempts = {r["attempt"] for r in mine}
        node = next(iter(nodes)) if len(nodes) == 1 else None
        attempt = next(iter(attempts)) if node is not None and len(attempts) == 1 else None
        out.extend(ledger.tool_calls(run, node, attempt))
    return out


def with_tool_calls(ledger: Ledger, rows: list[dict]) -> list[dict]:
    """``annotate`` on ``rows`` with their attempts' tool call rows read from ``ledger``."""
    return annotate(rows, read_calls(ledger, rows)) if rows else []


def call_span(checkpoints: list[dict], call_rows: Iterable[dict],
              tool_id: str) -> list[tuple[dict, list[dict], dict | None]]:
    """Each attempt's tool call one of whose ids is ``tool_id``: ``(call, owned, held)``, the
    checkpoints it owns (its own capture, in-flight or inferred ones) by seq, and the checkpoint
    holding its state when its capture deduplicated (None otherwise)."""
    index = ToolCallIndex(checkpoints, call_rows)
    found: list[tuple[dict, list[dict], dict | None]] = []
    keys = dict.fromkeys(key_of(cp) for cp in checkpoints)
    for key in keys:
        call = index.call(key, tool_id)
        rows = [cp for cp in checkpoints if key_of(cp) == key]
        if call is None:  # an owner whose end has not come yet has no row of its own
            owned = [cp for cp in rows if cp.get("owner") == tool_id]
            if owned:
                found.append(({"id": tool_id, "aliases": [], "label": None, "kind": None,
                               "seq": None, "deduped": False,
                               **dict.fromkeys(OUTCOME)} | dict(zip(
                                   ("run_id", "node_id", "iteration", "attempt"), key,
                                   strict=True)), sorted(owned, key=lambda c: c["seq"]), None))
            continue
        ids = {call["id"], *call["aliases"]}
        owned = [cp for cp in rows if cp.get("tool_use_id") in ids or cp.get("owner") in ids]
        held = next((cp for cp in rows if call["deduped"] and cp["seq"] == call["seq"]), None)
        found.append((call, sorted(owned, key=lambda c: c["seq"]), held))
    return found


def count_calls(call_rows: Iterable[dict]) -> dict[str, int]:
    """``tool_calls`` (every tool call seen, by its ids once), ``tool_calls_deduped`` (those
    whose capture deduplicated) and ``events`` (snapshotd's own: restore, revert, purge)."""
    calls = group_calls(call_rows)
    tools = [c for c in calls if not c["kind"]]
    return {"tool_calls": len(tools), "tool_calls_deduped": sum(c["deduped"] for c in tools),
            "events": len(calls) - len(tools)}
