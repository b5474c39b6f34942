"""Agent sessions: the ``session`` op, which turns an agent's own lifecycle events into states.

Owns the ``session`` op (docs/protocol.md, "Ops"; docs/agents.md, "Session lifecycle"): a hook
reports that a session started (``start``), began a turn (``working``), waits for its user
(``idle``) or ended (``end``); and ``agent_process``, the process owning a session's attempt (the
hook's parent, or its nearest ancestor that is not a shell or launcher running the hook).
Promises (in full: docs/agents.md, "Session lifecycle"):
- The attempt concerned is the one the session's tool calls go to (``session_attempt``); a
  session never touches another's attempt and ``start`` supersedes nothing. While an attempt
  registered by ``attempt_begin`` is active on the worktree, it owns the folder: nothing changes.
- ``start`` registers the session's attempt owned by the agent's process (abandoned once it is
  gone); one still active under another owner ends ``superseded``; a baseline capture follows
  (source ``hook``, label ``session start``), whose failure is a gap, never a failed start.
- ``working`` and ``idle`` set ``idle_since`` (registering the attempt if unseen), ``working``
  records a turn (``features.turns``); ``end`` ends it ``finished``; an ended one is left.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import psutil

from snapshotd.core import BAD_REQUEST, Config, Registry, ServiceError, opt_int_field
from snapshotd.features.turns import record_turn, turn_request
from snapshotd.ledger import ACTIVE, Attempt
from snapshotd.service import Service, SnapshotRequest

log = logging.getLogger("snapshotd.sessions")

EVENTS = ("start", "working", "idle", "end")
# Processes that stand between an agent and its hook without being the agent: the shell that
# runs the hook's command line (Claude Code and Gemini CLI run it through one), and launchers.
LAUNCHERS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "tcsh", "csh",
                       "busybox", "env", "nice", "nohup", "timeout", "stdbuf", "setsid"})
# How many launchers the walk up from the hook's parent goes through at most.
_MAX_LAUNCHERS = 8


def attach(service: Service, server: Registry, config: Config) -> None:
    """Register the ``session`` op on the daemon's server."""
    sessions = Sessions(service, server, config.record_prompts)
    server.register("session", sessions.session)


class Sessions:
    """The ``session`` op's handler."""

    def __init__(self, service: Service, server: Registry | None = None,
                 record_prompts: str = "local") -> None:
        self.service = service
        self.server = server
        self.record_prompts = record_prompts

    def session(self, fields: dict) -> dict:
        """One lifecycle event of an agent session; the reply describes its attempt."""
        event = fields.get("event")
        if event not in EVENTS:
            raise ServiceError(BAD_REQUEST, f"event must be one of {', '.join(EVENTS)}")
        agent_pid = opt_int_field(fields, "agent_pid", 1)
        turn = turn_request(fields.get("turn")) if event == "working" else None
        req = SnapshotRequest.from_fields({
            "cwd": fields.get("cwd"), "source": "hook", "fallback": fields.get("fallback"),
            "label": f"session {event}"})
        if req.fallback is None:
            raise ServiceError(BAD_REQUEST, "fallback (the session's run) is required")
        registered = self.service.attribution.active_for(req.cwd, registered_only=True)
        if registered is not None:
            return _reply(event, registered, registered=True)
        if event == "end":
            return self._end(req)
        if event == "start":
            return self._start(req, agent_process(agent_pid) if agent_pid else None)
        attempt = self.service.attribution.session_attempt(req)
        self.service.route_tier2(attempt)
        self.service.set_idle(attempt, event == "idle")
        number = None
        if event == "working":  # a prompt: the attempt's next turn (features.turns)
            number = record_turn(self.service.ledger, self.record_prompts, attempt, turn or {})
        reply = _reply(event, self._reread(attempt))
        if number is not None:
            reply["turn"] = number
        return reply

    # -- helpers ---------------------------------------------------------------------------

    def _start(self, req: SnapshotRequest, owner: int | None) -> dict:
        attribution = self.service.attribution
        attempt = attribution.session_attempt(req, owner_pid=owner)
        if owner is not None and attempt.owner_pid != owner:
            # Begun earlier under another process (or none we could name): liveness must now
            # follow the agent that runs the session, so the session goes on in a new attempt.
            self._supersede(attempt)
            attempt = attribution.session_attempt(req, owner_pid=owner, renew=True)
        self.service.route_tier2(attempt)
        self.service.ledger.set_attempt_idle(attempt.key, False)
        baseline = None
        try:
            baseline = self.service.capture_attempt(attempt, tier=1, source="hook",
                                                    label="session start", require_active=True)
        except ServiceError as exc:  # its gap is written; the session is registered anyway
            log.warning("baseline capture of %s failed: %s", attempt.key, exc.message)
        reply = _reply("start", self._reread(attempt))
        reply["baseline_seq"] = baseline["seq"] if baseline else None
        return reply

    def _end(self, req: SnapshotRequest) -> dict:
        fb = req.fallback
        assert fb is not None
        attempt = self.service.attribution.newest_attempt(fb["run_id"], fb["node_id"],
                                                          fb["iteration"])
        if attempt is None:  # never registered (no daemon then): nothing to end
            return {"event": "end", "run_id": fb["run_id"], "node_id": fb["node_id"],
                    "iteration": fb["iteration"], "attempt": None, "state": None}
        if attempt.state == ACTIVE:
            end = self.server.handler("attempt_end") if self.server is not None else None
            fields = {**attempt.key.as_dict(), "status": "finished"}
            (end or self.service.attempt_end)(fields)
        return _reply("end", self._reread(attempt))

    def _supersede(self, attempt: Attempt) -> None:
        service = self.service
        with service.worktree_lock(Path(attempt.worktree)):
            current = service.ledger.get_attempt(attempt.key)
            if current is None or current.state != ACTIVE:
                return
            head = service.store.head(current.key)
            service.ledger.set_attempt_state(current.key, "superseded", ended=True,
                                             final_commit=str(head.id) if head else None)
            ended = service.ledger.get_attempt(current.key)
        if ended is not None:
            service.announce_inactive(ended)

    def _reread(self, attempt: Attempt) -> Attempt:
        return self.service.ledger.get_attempt(attempt.key) or attempt


def agent_process(pid: int) -> int | None:
    """The agent process behind a hook whose parent is ``pid``: ``pid`` itself, or, when that is
    a shell or launcher (``LAUNCHERS``) that ran the hook's command, its nearest ancestor that is
    not one. None when there is none to name (gone, pid 1, this daemon): the attempt then has no
    owner and liveness leaves it alone."""
    try:
        proc: psutil.Process | None = psutil.Process(pid)
        for _ in range(_MAX_LAUNCHERS):
            if proc is None or proc.pid <= 1 or proc.pid == os.getpid():
                return None
            if proc.name().lstrip("-") not in LAUNCHERS:
                return proc.pid
            proc = proc.parent()
    except psutil.Error as exc:
        log.warning("cannot name the agent process behind pid %d: %s", pid, exc)
        return None
    log.warning("no agent process found within %d launchers above pid %d", _MAX_LAUNCHERS, pid)
    return None


def _reply(event: str, attempt: Attempt, *, registered: bool = False) -> dict:
    out = attempt.key.as_dict()
    out.update(event=event, worktree=attempt.worktree, state=attempt.state,
               idle=attempt.idle_since is not None, owner_pid=attempt.owner_pid,
               registered=registered)
    return out
