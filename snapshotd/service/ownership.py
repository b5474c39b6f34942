"""Which tool call owns a tier-2 checkpoint: the calls in flight, and the sweep at a call's end.

Owns, in the service's memory, per active attempt: the tool calls that started (``before_tool``)
and have not ended (their ids, label, start time), and the tier-2 checkpoints recorded since the
attempt's last tool call ended (seq, time, whether the session was working). Promises (in full:
docs/review.md, "Who changed what: tool calls own their changes"):
- A tier-2 capture while exactly one call with an id is in flight is that call's, ``in-flight``
  (commit trailer and row); with several, it is left to the first of them to end.
- A call's end closes it (``closed``): its row gets its start time, and the unowned tier-2
  checkpoints since its start become its, ``in-flight``; with no start event, those taken since
  the previous call's end while the session worked become its, ``inferred``. A checkpoint taken
  while the session was idle, or before it last went idle, never becomes a call's.
- Memory is bounded (``MAX_ATTEMPTS``, ``MAX_CALLS``, ``MAX_PENDING``); a daemon restart forgets
  it all (a call in flight then ends as if it had no start event). A failed owner write is
  logged and counted (``owner_failures``), never a failed capture.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from snapshotd.ledger import IN_FLIGHT, INFERRED, Attempt, Ledger

log = logging.getLogger("snapshotd.ownership")

# Attempts whose state is kept (the least recently used is forgotten past this).
MAX_ATTEMPTS = 1024
# Calls in flight kept per attempt (a start with no end, a denied call, waits for the turn's end).
MAX_CALLS = 16
# Tier-2 checkpoints kept per attempt between two tool call ends (older ones stay unowned).
MAX_PENDING = 512


@dataclass
class Call:
    """A tool call in flight: every id its start named (none: an agent whose start and end ids
    differ, matched by order), its label, and when it started (wall clock)."""

    ids: tuple[str, ...]
    label: str | None
    started_at: float


@dataclass
class _Pending:
    seq: int
    created_at: float
    working: bool  # taken while the session worked, and it has not gone idle since
    owned: bool


@dataclass
class _State:
    attempt: Attempt
    calls: list[Call] = field(default_factory=list)
    pending: list[_Pending] = field(default_factory=list)


class Ownership:
    """The owners of one service's tier-2 checkpoints; callable from any thread."""

    def __init__(self, ledger: Ledger, counters: dict[str, int]) -> None:
        self.ledger = ledger
        self.counters = counters
        self.counters.setdefault("owner_failures", 0)
        self._lock = threading.Lock()
        self._states: OrderedDict[tuple, _State] = OrderedDict()

    def start(self, attempt: Attempt, call: Call) -> None:
        """``call`` started in ``attempt`` (a retried start of the same call counts once)."""
        with self._lock:
            state = self._state(attempt)
            if call.ids and any(set(c.ids) & set(call.ids) for c in state.calls):
                return
            state.calls.append(call)
            del state.calls[:-MAX_CALLS]

    def capture_owner(self, attempt: Attempt, tier: int) -> str | None:
        """The id of the call a tier-2 capture of ``attempt`` is taken for: the one in flight."""
        if tier != 2:
            return None
        with self._lock:
            state = self._states.get(attempt.key)
            calls = state.calls if state is not None else []
            return calls[0].ids[0] if len(calls) == 1 and calls[0].ids else None

    def started_at(self, attempt: Attempt, ids: list[str]) -> float | None:
        """When the call named by ``ids`` started, if its start was seen."""
        with self._lock:
            state = self._states.get(attempt.key)
            call = _match(state.calls, ids) if state is not None else None
            return call.started_at if call is not None else None

    def recorded(self, attempt: Attempt, *, seq: int, tier: int, created_at: float,
                 owner: str | None) -> None:
        """A new tier-2 checkpoint of ``attempt`` (its row is committed)."""
        if tier != 2:
            return
        with self._lock:
            state = self._state(attempt)
            state.pending.append(_Pending(seq, created_at, attempt.idle_since is None,
                                          owner is not None))
            del state.pending[:-MAX_PENDING]

    def closed(self, attempt: Attempt, ids: list[str]) -> None:
        """The call named by ``ids`` ended (its capture is recorded or deduplicated): the tier-2
        checkpoints it owns get their owner in the ledger."""
        if not ids:
            return
        with self._lock:
            state = self._states.get(attempt.key)
            if state is None:
                return
            call = _match(state.calls, ids)
            if call is not None:
                state.calls.remove(call)
                seqs = [p.seq for p in state.pending
                        if not p.owned and p.created_at >= call.started_at]
                how = IN_FLIGHT
            else:
                seqs = [p.seq for p in state.pending if not p.owned and p.working]
                how = INFERRED
            state.pending.clear()
        if not seqs:
            return
        try:
            self.ledger.set_owner(attempt, seqs, ids[0], how)
        except Exception as exc:  # noqa: BLE001 - the call's capture is already acknowledged
            self.counters["owner_failures"] += 1
            log.warning("could not give checkpoints %s of %s to tool call %s: %s", seqs,
                        attempt.key, ids[0], exc)

    def went_idle(self, attempt: Attempt) -> None:
        """The session waits for its user: no call runs any more, and nothing taken so far
        is the next call's."""
        with self._lock:
            state = self._states.get(attempt.key)
            if state is None:
                return
            state.calls.clear()
            for pending in state.pending:
                pending.working = False

    def forget(self, attempt: Attempt) -> None:
        """``attempt`` ended: its state goes."""
        with self._lock:
            self._states.pop(attempt.key, None)

    def in_flight(self, worktree: str) -> list[Attempt]:
        """The attempts on ``worktree`` with a tool call in flight."""
        with self._lock:
            return [s.attempt for s in self._states.values()
                    if s.calls and s.attempt.worktree == worktree]

    def _state(self, attempt: Attempt) -> _State:
        """``attempt``'s state, made when new (under the lock)."""
        state = self._states.get(attempt.key)
        if state is None:
            state = self._states[attempt.key] = _State(attempt)
            while len(self._states) > MAX_ATTEMPTS:
                self._states.popitem(last=False)
        else:
            self._states.move_to_end(attempt.key)
        return state


def _match(calls: list[Call], ids: list[str]) -> Call | None:
    """The call in flight that ``ids`` name, else the oldest one whose start named no id."""
    wanted = set(ids)
    for call in calls:
        if wanted & set(call.ids):
            return call
    return next((c for c in calls if not c.ids), None)
