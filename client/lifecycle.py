"""The hook's side of an agent session's lifecycle: telling the daemon, and the agent's context.

Owns ``tell_daemon``: one ``session`` request (docs/protocol.md, "Ops") for a lifecycle event the
hook has read (``start``, ``working``, ``idle``, ``end``; ``snapshotd_client.hook.SESSION_EVENTS``
maps the agents' event names), with one autostart of the daemon (never for an ``end``), and on a
``start`` the one line of context the agent reads from the hook's stdout, in the shape that agent
reads (its module's ``CONTEXT_SHAPE``, ``snapshotd_client.agents``).

Promises: returns within the deadline it is given; every failure the daemon did not record
itself is handed to ``write_gap`` exactly once; writes to ``stdout`` only a start's context,
once, and nothing for an agent that reads none from this hook (``CONTEXT_SHAPE``: ``None``).
Imports only the stdlib and the client (the hook's budget), ``json`` only to print that context.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any


# A prompt's first line sent at most this long (the daemon redacts it whole, then keeps its
# first ``snapshotd.features.sessions.FIRST_LINE_MAX`` characters); other turn fields this long.
PROMPT_SENT_MAX = 800
TURN_FIELD_MAX = 1000


def turn_fields(payload: Mapping[str, Any]) -> dict[str, Any]:
    """What a prompt's payload tells of its turn (docs/review.md, "Turns"): the prompt's first
    non-blank line (cut), the agent's session id, its turn or prompt id (Codex ``turn_id``,
    Qwen ``prompt_id``), its transcript file and that file's size now (one ``stat``). Fields
    the payload lacks, or too long to send, are left out."""
    out: dict[str, Any] = {}
    prompt = payload.get("prompt")
    if isinstance(prompt, str):
        line = next((part.strip() for part in prompt.splitlines() if part.strip()), "")
        out["prompt"] = line[:PROMPT_SENT_MAX]
    for name, keys in (("session_id", ("session_id",)), ("agent_turn_id", ("turn_id", "prompt_id")),
                       ("transcript_path", ("transcript_path",))):
        value = next((payload[k] for k in keys if isinstance(payload.get(k), str) and payload[k]),
                     None)
        if value is not None and len(value.encode(errors="replace")) <= TURN_FIELD_MAX:
            out[name] = value
    path = out.get("transcript_path")
    if path:
        try:
            out["transcript_pos"] = os.stat(path).st_size
        except (OSError, ValueError):  # not written yet, or not on this host
            pass
    return out


def tell_daemon(event: str, fields: Mapping[str, Any], *, deadline: float, budget_ms: int,
                autostart: Callable[[str, float], bool], write_gap: Callable[[str, str], None],
                stdout: int | None, turn: Mapping[str, Any] | None = None) -> str:
    """Send the ``session`` request for ``event`` of the session ``fields`` (the hook's
    snapshot fields: ``cwd`` and the zero-setup ``fallback``) and return the outcome: ``"ok"`` or
    the failure's code. ``autostart(socket, deadline)`` starts a daemon; ``write_gap(reason,
    detail)`` records a failure; ``stdout`` is the agent's stdout for a start's context;
    ``turn``, a ``working`` event's ``turn_fields``."""
    from .client import Client, DaemonUnavailable, SnapshotdError

    # The hook's parent is the agent, or a shell the agent ran the hook's command with: the
    # daemon walks up from it past shells (snapshotd.features.sessions.agent_process).
    request = {"event": event, "cwd": fields["cwd"], "fallback": fields["fallback"],
               "agent_pid": os.getppid()}
    if turn:
        request["turn"] = dict(turn)
    client = Client(timeout=budget_ms / 1000.0, deadline=deadline)
    try:
        try:
            result = client.request("session", **request)
        except DaemonUnavailable:
            if event == "end" or not autostart(client.socket_path, deadline):
                raise
            result = client.request("session", **request)
    except SnapshotdError as exc:
        if not exc.daemon_recorded:
            write_gap(exc.code, f"session {event} was not recorded: {exc.message}")
        return exc.code
    finally:
        client.close()
    if event == "start" and stdout is not None:
        _tell_agent(result, stdout, _agent_of(fields))
    return "ok"


def context_line(result: Mapping[str, Any]) -> str:
    """What a session's start tells the agent: its run, and where to find its checkpoints."""
    return (f"snapshotd checkpoints this session's files as run {result.get('run_id')} (node "
            f"{result.get('node_id')}, attempt {result.get('attempt')}); the snapshotd MCP "
            "tools (list_checkpoints, diff_checkpoint, restore_checkpoint) can list and restore "
            "them.")


def context_output(result: Mapping[str, Any], agent: str) -> str | None:
    """What the hook prints for ``agent`` on a session's start, or None: in the shape its module
    names (``agents.context_shape``): Claude Code's ``hookSpecificOutput`` JSON (also read by Codex,
    Gemini CLI, Qwen Code, Goose and any agent without a module), Copilot CLI's top-level
    ``additionalContext``, Cursor's ``additional_context``, plain ``text`` (Kiro), or nothing
    (``None``: Cline's hook scripts print Cline's own answer, the plugins discard the output)."""
    import json

    from .agents import context_shape

    shape = context_shape(agent)
    line = context_line(result)
    if shape == "copilot":
        return json.dumps({"additionalContext": line})
    if shape == "cursor":
        return json.dumps({"additional_context": line})
    if shape == "text":
        return line
    if shape == "claude":
        return json.dumps({"hookSpecificOutput": {"hookEventName": "SessionStart",
                                                  "additionalContext": line}})
    return None


def _agent_of(fields: Mapping[str, Any]) -> str:
    # The hook names a zero-setup run `<agent>-<session>` (snapshotd_client.hook.snapshot_fields),
    # and agent names hold no "-": the part before the first one is the agent.
    run_id = fields["fallback"].get("run_id")
    return run_id.split("-", 1)[0] if isinstance(run_id, str) else ""


def _tell_agent(result: Mapping[str, Any], stdout: int, agent: str) -> None:
    text = context_output(result, agent)
    if text is None:
        return
    try:
        os.write(stdout, text.encode() + b"\n")
    except OSError:  # the agent closed its end: the context is a courtesy, the session is kept
        pass
