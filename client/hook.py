"""``snapshot-hook``: the agents' hook (tier 1, ``hook``): Claude Code, Codex, Gemini and more.

Owns reading the agent's payload from stdin, routing it (``agents``: one module per agent),
the tool call id and label, the attribution (docs/protocol.md), one time budget for the capture,
autostart (``autostart``), and a gap when no checkpoint came; lifecycle events go to
``lifecycle``, before-tool events ask for a bracketing capture. Promises (each in full:
docs/agents.md, "snapshot-hook's promises"):
- exits 0 and prints nothing but a session start's one context line: stdout and stderr point at
  /dev/null first thing (exit 2 + stderr would be fed to the model);
- returns within ``SNAPSHOTD_HOOK_TIMEOUT_MS`` of starting, gap write included;
- every outcome that is not a checkpoint is a gap, exactly once (the hook's for what the daemon
  records no gap for, timeouts, unreachable or untrusted sockets, bad payloads, its own bugs),
  naming the intended attempt and the payload's ``cwd``, over-long fields cut;
- every setting it reads is bounded (timeout clamped, integers checked, ``SNAPSHOTD_AUTOSTART=0``);
- never leaves a child holding the agent's stdout/stderr; imports only what its path needs.
"""

from __future__ import annotations

import os
import stat  # already loaded by os itself: free on the hook's path
import sys
import time

# Annotations are never evaluated (PEP 563); `typing` costs milliseconds on the hook's path.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

DEFAULT_TIMEOUT_MS = 5000
# SNAPSHOTD_HOOK_TIMEOUT_MS is clamped to this range (a value `select` and the agent can live
# with); text that is not a positive decimal integer falls back to the default.
MIN_TIMEOUT_MS = 100
MAX_TIMEOUT_MS = 120_000
# Longest text kept in a gap's detail and in each of its other string fields: a 10 MB run id
# from the environment must not become a 10 MB spool line.
GAP_DETAIL_MAX = 2000
GAP_FIELD_MAX = 1024
# The most of a command (or of apply_patch's paths) a label sends: the daemon redacts it whole,
# then keeps a hook label's first 100 characters (its request limit is 1000 bytes in all).
LABEL_PART_MAX_BYTES = 800
# The most of a shell command ``before_tool`` sends for the guard to read (docs/protocol.md).
COMMAND_MAX_BYTES = 16 * 1024
# An agent session's lifecycle events and what each tells the daemon (docs/agents.md has the table
# per agent): each agent module's LIFECYCLE (snapshotd_client.agents) renames its events to these.
SESSION_EVENTS = {"SessionStart": "start", "UserPromptSubmit": "working", "BeforeAgent": "working",
                  "Stop": "idle", "AfterAgent": "idle", "SessionEnd": "end"}
# What the capture leaves of the budget for writing a gap (at most a tenth of the budget).
_GAP_RESERVE_S = 0.05
# Before-tool events (Claude Code and Codex, Gemini): a bracketing capture, see _before_tool.
BEFORE_TOOL_EVENTS = ("PreToolUse", "BeforeTool")
# The environment variables the hook reads to attribute a payload; snapshot-hook-native sends
# them with the payload (client/native/snapshot_hook.c lists the same names).
RELAYED_ENV = ("SNAPSHOTD_RUN_ID", "SNAPSHOTD_NODE_ID", "SNAPSHOTD_ITERATION",
               "SNAPSHOTD_ATTEMPT", "CLAUDE_PROJECT_DIR", "GEMINI_PROJECT_DIR")


def main() -> None:
    """Entry point of the ``snapshot-hook`` console script."""
    try:
        start = started_at(os.environ, time.monotonic())
        # Not for the daemon this hook may start, nor anything else it runs.
        os.environ.pop("SNAPSHOTD_HOOK_STARTED_NS", None)
        _silence_output()
        budget_ms, note = budget_setting(os.environ)
        deadline = start + budget_ms / 1000.0
        handle(_read_stdin(deadline), deadline=deadline, budget_ms=budget_ms, note=note)
    except BaseException as exc:  # noqa: B036 - the hook's contract is exit 0, even on ^C
        last_resort(f"snapshot-hook failed outside its gap handling: {exc!r}")
    sys.exit(0)


def last_resort(message: str) -> None:
    """Leave ``message`` in the system log: the channel of a hook that could not write a gap
    (stdout and stderr would reach the model). Never raises."""
    try:
        import syslog
    except ImportError:  # a platform without syslog (the daemon runs on none of them)
        return
    # syslog(3) itself never fails; Python refuses a NUL or an unencodable character.
    text = message.replace("\0", "\\0").encode("utf-8", "backslashreplace").decode("utf-8")
    syslog.openlog("snapshot-hook", syslog.LOG_PID, syslog.LOG_USER)
    syslog.syslog(syslog.LOG_WARNING, text)


def handle(data: bytes | None, *, deadline: float, budget_ms: int, note: str = "") -> str:
    """Process one payload (``None``: stdin did not close in time). Returns the outcome: ``"ok"``
    or the reason of the failure (also the gap's reason when one was written). ``note`` (a
    setting that was out of range) is added to the detail of any gap written."""
    from .protocol import BAD_PAYLOAD, INTERNAL

    env = os.environ
    gaps = _GapWriter(deadline, note)
    try:
        payload = parse_json(data) if data is not None else None
    except Exception:  # ValueError, and RecursionError for absurdly nested input
        payload = None
    if not isinstance(payload, dict):
        if data is None:
            detail = f"stdin was not closed within {budget_ms} ms"
        else:
            detail = f"stdin is not a JSON object ({len(data)} bytes)"
        gaps.write(_gap_attribution(None, env, {}), tool_use_id=None, reason=BAD_PAYLOAD,
                   detail=detail)
        return BAD_PAYLOAD

    fields: dict[str, Any] = {}
    try:
        payload, kind = route(payload)
        if kind == "before_tool":
            return _before_tool(payload, env, deadline=deadline, budget_ms=budget_ms)
        if kind == "session":
            return _session(payload, gaps, deadline=deadline, budget_ms=budget_ms)
        fields = snapshot_fields(payload, env)
        return _capture(fields, gaps, deadline=deadline, budget_ms=budget_ms)
    except Exception as exc:  # a hook bug must still leave a trace of the missed capture
        gaps.write(_gap_attribution(payload, env, fields), tool_use_id=fields.get("tool_use_id"),
                   reason=INTERNAL, detail=f"snapshot-hook failed: {type(exc).__name__}: {exc}")
        return INTERNAL


def route(payload: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The payload in Claude Code's shape (the other agents' normalized by
    ``snapshotd_client.agents``) and what the hook does for it: ``"before_tool"`` (a bracketing
    capture), ``"session"`` (a lifecycle event) or ``"snapshot"`` (the after-tool capture)."""
    from .agents import normalize

    payload = normalize(payload) or payload  # Copilot, Qwen, Cline, Cursor, ...: agents/
    event = payload.get("hook_event_name")
    if event in BEFORE_TOOL_EVENTS:
        return payload, "before_tool"
    if event in SESSION_EVENTS:
        return payload, "session"
    return payload, "snapshot"


def started_at(env: Mapping[str, str], now: float) -> float:
    """When this hook began, in ``time.monotonic()`` seconds: ``now``, or the start that
    ``snapshot-hook-native`` passes in ``SNAPSHOTD_HOOK_STARTED_NS`` when it hands a payload over,
    so both share one budget. A value that is not a time of the last ``MAX_TIMEOUT_MS`` (set by
    something else, or inherited from long ago) is ignored."""
    raw = env.get("SNAPSHOTD_HOOK_STARTED_NS", "")
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 20:
        return now
    started = int(raw) / 1e9
    return started if now - MAX_TIMEOUT_MS / 1000.0 <= started <= now else now


def budget_setting(env: Mapping[str, str]) -> tuple[int, str]:
    """The hook's budget in ms from ``SNAPSHOTD_HOOK_TIMEOUT_MS``, and a note ("" when the
    value was used as given). Unset: the default. Not a positive decimal integer (text, ``nan``,
    a negative number, ``0``): the default, noted. Outside ``[MIN_TIMEOUT_MS, MAX_TIMEOUT_MS]``:
    clamped into it, noted."""
    raw = env.get("SNAPSHOTD_HOOK_TIMEOUT_MS")
    if raw is None or raw == "":
        return DEFAULT_TIMEOUT_MS, ""
    text = raw.strip()
    shown = repr(raw) if len(raw) <= 40 else repr(raw[:37]) + "..."
    if not (text.isascii() and text.isdigit()) or not text.strip("0"):
        return DEFAULT_TIMEOUT_MS, (f"SNAPSHOTD_HOOK_TIMEOUT_MS={shown} is not a positive "
                                    f"number of ms; used {DEFAULT_TIMEOUT_MS}")
    # Digits only, so int() is exact; a very long one is simply over the maximum.
    value = int(text) if len(text) <= 12 else MAX_TIMEOUT_MS + 1
    clamped = min(max(value, MIN_TIMEOUT_MS), MAX_TIMEOUT_MS)
    if clamped != value:
        return clamped, (f"SNAPSHOTD_HOOK_TIMEOUT_MS={shown} is outside {MIN_TIMEOUT_MS}.."
                         f"{MAX_TIMEOUT_MS}; used {clamped}")
    return value, ""


def parse_json(data: bytes) -> Any:
    """``json.loads(data)``, without importing ``json`` when it can: ``json.decoder`` imports
    ``re`` (about 8 ms of the hook's start-up, after every tool call) for patterns the C scanner
    that does the parsing never uses. The same scanner, set up as ``json.loads`` sets it up, is
    called directly; whatever it does not take the plain way (not UTF-8, a byte order mark,
    trailing data, an error, no C accelerator) goes to ``json.loads``, which decides."""
    try:
        from _json import make_scanner

        text = data.decode("utf-8")
        start = len(text) - len(text.lstrip(_JSON_SPACE))
        value, end = make_scanner(_JsonContext)(text, start)
        if text[end:].strip(_JSON_SPACE):
            raise ValueError("extra data")
        return value
    except Exception:  # noqa: BLE001 - json.loads gives the answer, or the error
        import json

        return json.loads(data)


_JSON_SPACE = " \t\n\r"


class _JsonContext:
    """What ``_json.make_scanner`` reads from a ``json.JSONDecoder()``: its defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = {"-Infinity": float("-inf"), "Infinity": float("inf"),
                      "NaN": float("nan")}.__getitem__


def detect_agent(payload: Mapping[str, Any]) -> str:
    """The agent of a payload in Claude Code's shape: the one a normalized payload names, else
    ``gemini``, ``codex`` or ``claude`` (``snapshotd_client.agents.agent_of``)."""
    from .agents import agent_of

    return agent_of(payload)


def tool_use_id_for(payload: Mapping[str, Any], agent: str) -> str | None:
    """The payload's ``tool_use_id``; for an agent that sends none but whose module derives a
    stable one (Gemini), that one, so a retried hook for the same call stays idempotent."""
    given = payload.get("tool_use_id")
    if isinstance(given, str) and given:
        return given
    from .agents import derived_tool_use_id

    return derived_tool_use_id(payload, agent)


def label_for(payload: Mapping[str, Any]) -> str | None:
    """``"<tool_name> <path-or-command>"``: the file the tool touched, else its command on one
    line; for ``apply_patch`` the patched paths. The daemon redacts the label whole and then
    cuts it; here the command is only bounded (``word_cut``), never split inside a word."""
    tool = _text(payload.get("tool_name")).strip()
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict):
        tool_input = {}
    part = ""
    if tool == "apply_patch":
        patch = tool_input.get("command") or tool_input.get("input") or tool_input.get("patch")
        if isinstance(patch, str):
            from .agents import patched_paths

            part = word_cut(patched_paths(patch), LABEL_PART_MAX_BYTES)
    if not part:
        for key in ("file_path", "notebook_path", "path"):
            value = tool_input.get(key)
            if isinstance(value, str) and value:
                part = value  # kept as given: Gemini's may be relative to cwd
                break
    if not part:
        command = tool_input.get("command")
        if isinstance(command, list):  # older Codex: argv, e.g. ["bash", "-lc", "..."]
            command = " ".join(_text(arg) for arg in command)
        if isinstance(command, str):
            part = word_cut(_one_line(command), LABEL_PART_MAX_BYTES).rstrip()
    label = f"{tool} {part}" if tool and part else (tool or part)
    return label or None


def snapshot_fields(payload: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The keyword arguments of ``Client.snapshot`` for this payload and environment."""
    agent = detect_agent(payload)
    cwd = payload.get("cwd")
    fields: dict[str, Any] = {
        "cwd": cwd if isinstance(cwd, str) and cwd else os.getcwd(),
        "tier": 1,
        "source": "hook",
        "label": label_for(payload),
        "tool_use_id": tool_use_id_for(payload, agent),
    }
    from .outcome import outcome_fields, tool_aliases

    aliases = tool_aliases(payload, fields["tool_use_id"])  # Qwen Code: the model's call id
    if aliases and not fields["tool_use_id"]:
        fields["tool_use_id"] = aliases.pop(0)
    # An id too long for the request (1000 bytes) is left out: the capture must not fail on it.
    fields["tool_aliases"] = [a for a in aliases if len(a.encode(errors="replace")) <= 200][:4] \
        or None
    fields.update(outcome_fields(payload))  # failed, exit_code, error: a failed tool call
    if fields.get("error"):
        fields["error"] = word_cut(fields["error"], LABEL_PART_MAX_BYTES)
    run_id, node_id = env.get("SNAPSHOTD_RUN_ID"), env.get("SNAPSHOTD_NODE_ID")
    if run_id and node_id:
        # Set by `snapshotd exec` or an engine for the agent process; the hook inherits it.
        # A malformed number is sent as given: the daemon's bad-request reply becomes a gap.
        fields.update(run_id=run_id, node_id=node_id,
                      iteration=_env_int(env.get("SNAPSHOTD_ITERATION"), 0),
                      attempt=_env_int(env.get("SNAPSHOTD_ATTEMPT"), None))
    else:
        # Zero-setup: the daemon uses this only if no attempt is registered for the worktree.
        session = _text(payload.get("session_id")) or "unknown"
        # No iteration either: the hook names no attempt, so it must not claim part of one.
        fields["iteration"] = None
        fields["fallback"] = {
            "run_id": f"{agent}-{session}",
            "node_id": "session",
            "iteration": 0,
            "attempt": 1,
            "worktree": _worktree_guess(payload, agent, env),
        }
    return fields


def before_tool_fields(payload: Mapping[str, Any], env: Mapping[str, str]) -> dict[str, Any]:
    """The fields of the ``before_tool`` request for a before-tool payload: the call's ids (the
    daemon keeps the call in flight until the end that names one of them), and the label says
    the capture came before the tool. An id derived from the payload (Gemini, Copilot, Cursor:
    it includes the event's own timestamp) names no end, so none is sent: the daemon then
    matches the start with the next end by order."""
    fields = snapshot_fields(payload, env)
    if _derived_id(fields["tool_use_id"] or "", detect_agent(payload)):
        fields["tool_use_id"] = None
    if fields.get("label"):
        fields["label"] = "before " + fields["label"]
    command = shell_command(payload)
    if command:
        fields["command"] = command  # the guard reads it whole (docs/guard.md)
    return fields


def shell_command(payload: Mapping[str, Any]) -> str | None:
    """The shell command a tool call runs, whole (its first ``COMMAND_MAX_BYTES``), or None: a
    list (older Codex argv) quoted back into one line; never ``apply_patch``'s patch."""
    tool_input = payload.get("tool_input")
    if not isinstance(tool_input, dict) or _text(payload.get("tool_name")) == "apply_patch":
        return None
    command = tool_input.get("command")
    if isinstance(command, list) and all(isinstance(a, str) for a in command):
        import shlex

        command = shlex.join(command)
    if not isinstance(command, str) or not command.strip():
        return None
    data = command.encode(errors="replace")
    if len(data) > COMMAND_MAX_BYTES:
        command = data[:COMMAND_MAX_BYTES].decode(errors="ignore")
    return command.replace("\0", "")


def _derived_id(tool_id: str, agent: str) -> bool:
    """Whether ``tool_id`` is one ``snapshotd_client.agents`` derived (``<agent>-<24 hex>``)."""
    digits = tool_id[len(agent) + 1:]
    return (tool_id.startswith(agent + "-") and len(digits) == 24
            and all(c in "0123456789abcdef" for c in digits))


def try_autostart(socket_path: str, deadline: float, argv: list[str] | None = None) -> bool:
    """Start the daemon when none answers; True once its socket accepts connections
    (``snapshotd_client.autostart``, loaded only when no daemon answered)."""
    from .autostart import start_daemon

    return start_daemon(socket_path, deadline, argv)


def _capture(fields: dict[str, Any], gaps: _GapWriter, *, deadline: float,
             budget_ms: int) -> str:
    from .client import Client, DaemonUnavailable, SnapshotdError
    from .protocol import DAEMON_UNAVAILABLE, TIMEOUT

    env = os.environ
    # The capture stops a little short of the deadline so that a gap can still be written
    # within the budget.
    capture_deadline = deadline - min(_GAP_RESERVE_S, budget_ms / 10000.0)
    client = Client(timeout=budget_ms / 1000.0, deadline=capture_deadline)
    autostart_note = ""
    try:
        try:
            client.snapshot(**fields)
        except DaemonUnavailable:
            if not try_autostart(client.socket_path, capture_deadline):
                autostart_note = ("; autostart off (SNAPSHOTD_AUTOSTART=0)"
                                  if env.get("SNAPSHOTD_AUTOSTART") == "0"
                                  else "; autostart did not bring the daemon up")
                raise
            autostart_note = "; daemon was autostarted"
            client.snapshot(**fields)  # the one retry
    except SnapshotdError as exc:
        if exc.daemon_recorded:
            return exc.code
        if exc.code == TIMEOUT:
            detail = f"no reply from snapshotd at {client.socket_path} within {budget_ms} ms"
        else:
            detail = exc.message
        if exc.code in (DAEMON_UNAVAILABLE, TIMEOUT):
            detail += autostart_note
        gaps.write(_gap_attribution(None, env, fields), tool_use_id=fields.get("tool_use_id"),
                   reason=exc.code, detail=detail)
        return exc.code
    finally:
        client.close()
    return "ok"


def _before_tool(payload: Mapping[str, Any], env: Mapping[str, str], *, deadline: float,
                 budget_ms: int) -> str:
    """Ask for a bracketing capture (``before_tool`` op, source ``outside``) before a tool call.
    The daemon decides whether bracketing is on (a no-op reply when not), so the hook reads no
    configuration. No autostart and no gap: when no daemon answers, the after-tool capture of
    this call takes whatever changed and writes the gap if it cannot either."""
    from .client import Client, SnapshotdError

    fields = before_tool_fields(payload, env)
    client = Client(timeout=budget_ms / 1000.0, deadline=deadline)
    try:
        client.request("before_tool", **fields)
    except SnapshotdError as exc:
        return exc.code
    finally:
        client.close()
    return "ok"


def _session(payload: Mapping[str, Any], gaps: _GapWriter, *, deadline: float,
             budget_ms: int) -> str:
    """Tell the daemon a session's lifecycle event (``snapshotd_client.lifecycle``). An attempt
    begun for the agent (``SNAPSHOTD_RUN_ID``: exec, an engine) has its own lifecycle."""
    from .lifecycle import tell_daemon, turn_fields

    env = os.environ
    if env.get("SNAPSHOTD_RUN_ID") and env.get("SNAPSHOTD_NODE_ID"):
        return "ok"
    fields = snapshot_fields(payload, env)
    event = SESSION_EVENTS[payload["hook_event_name"]]
    return tell_daemon(
        event, fields, turn=turn_fields(payload) if event == "working" else None,
        budget_ms=budget_ms,
        deadline=deadline - min(_GAP_RESERVE_S, budget_ms / 10000.0), autostart=try_autostart,
        write_gap=lambda reason, detail: gaps.write(_gap_attribution(None, env, fields),
                                                    tool_use_id=None, reason=reason,
                                                    detail=detail),
        stdout=_AGENT_STDOUT)


def _gap_attribution(payload: Mapping[str, Any] | None, env: Mapping[str, str],
                     fields: Mapping[str, Any]) -> dict[str, Any]:
    # The attempt the capture was meant for: explicit ids when sent, else the fallback's.
    fallback = fields.get("fallback")
    if isinstance(fallback, dict):
        return {k: fallback.get(k) for k in ("run_id", "node_id", "iteration", "attempt",
                                               "worktree")}
    if fields.get("run_id"):
        # An explicit attempt: the daemon captures the request's cwd (the payload's), so the
        # gap names that directory, not wherever the hook process happens to run.
        return {k: fields.get(k) for k in ("run_id", "node_id", "iteration", "attempt")} | {
            "worktree": fields.get("cwd") or _worktree_guess(payload or {}, "", env)}
    source: Mapping[str, Any] = {}  # no usable payload: the environment is all we have
    if env.get("SNAPSHOTD_RUN_ID") and env.get("SNAPSHOTD_NODE_ID"):
        source = {"run_id": env["SNAPSHOTD_RUN_ID"], "node_id": env["SNAPSHOTD_NODE_ID"],
                  "iteration": _env_int(env.get("SNAPSHOTD_ITERATION"), 0),
                  "attempt": _env_int(env.get("SNAPSHOTD_ATTEMPT"), None)}
    agent = detect_agent(payload) if payload is not None else ""
    return {
        "run_id": source.get("run_id"),
        "node_id": source.get("node_id"),
        "iteration": source.get("iteration"),
        "attempt": source.get("attempt"),
        "worktree": _worktree_guess(payload or {}, agent, env),
    }


class _GapWriter:
    """Writes the hook's gap records: within the hook's deadline (``append_gap`` never waits
    for the spool's lock past it), with over-long strings cut and ``note`` added to the
    detail."""

    def __init__(self, deadline: float, note: str) -> None:
        self.deadline = deadline
        self.note = note

    def write(self, attribution: Mapping[str, Any], *, tool_use_id: str | None, reason: str,
              detail: str) -> None:
        from .gaps import append_gap, make_gap

        if self.note:
            detail = f"{detail}; {self.note}"
        try:
            append_gap(make_gap(
                run_id=_cut(attribution.get("run_id"), GAP_FIELD_MAX),
                node_id=_cut(attribution.get("node_id"), GAP_FIELD_MAX),
                iteration=_cut(attribution.get("iteration"), GAP_FIELD_MAX),
                attempt=_cut(attribution.get("attempt"), GAP_FIELD_MAX),
                worktree=_cut(attribution.get("worktree"), GAP_FIELD_MAX), tier=1,
                source="hook", tool_use_id=_cut(tool_use_id, GAP_FIELD_MAX), reason=reason,
                detail=word_cut(detail, GAP_DETAIL_MAX)), deadline=self.deadline)
        except Exception as exc:  # noqa: BLE001 - the spool is unwritable (its path is a
            # directory, the disk is full): stdout/stderr would reach the model, and the agent
            # must not be disturbed; the system log gets the gap. docs/durability.md says so.
            last_resort(f"gap not written ({exc!r}): {reason} for tool call {tool_use_id}: "
                        f"{detail}")


def word_cut(text: str, limit: int) -> str:
    """``text`` in at most ``limit`` UTF-8 bytes, ``…`` marking a cut, which never leaves a piece
    of a word: the word it would split is dropped whole. The hook has no secret rules (the
    daemon redacts what it receives), and a token cut in two is one no rule recognises."""
    data = text.encode(errors="replace")
    if len(data) <= limit:
        return text
    head = data[:max(limit - 3, 0)].decode(errors="ignore")  # room for the 3 bytes of "…"
    if not text[len(head)].isspace() and head and not head[-1].isspace():
        head = head[:len(head) - len(head.split()[-1])]
    return head.rstrip() + "…"


def _cut(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit - 1] + "…"
    return value


def _worktree_guess(payload: Mapping[str, Any], agent: str, env: Mapping[str, str]) -> str:
    from .agents import project_dir_env

    for name in project_dir_env(agent):
        if env.get(name):
            return env[name]
    cwd = payload.get("cwd")
    return cwd if isinstance(cwd, str) and cwd else os.getcwd()


def _read_stdin(deadline: float) -> bytes | None:
    # Bounded by the deadline: an agent that never closes stdin must not hang its own turn.
    # A regular file ends, though: read it whole, deadline or not (snapshot-hook-native hands
    # its payload over in one, maybe with the deadline already passed: a timeout to record).
    import select

    chunks: list[bytes] = []
    try:
        regular = stat.S_ISREG(os.fstat(0).st_mode)
    except OSError:
        regular = False
    while regular:
        chunk = os.read(0, 1 << 20)
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            ready, _, _ = select.select([0], [], [], remaining)
            if not ready:
                return None
            chunk = os.read(0, 1 << 16)
        except OSError:  # stdin closed or unreadable: what we have is the payload
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


# The agent's stdout, kept (not inheritable) for the one line a session start prints.
_AGENT_STDOUT: int | None = None


def _silence_output() -> None:
    # Point fds 1 and 2 at /dev/null: nothing (warnings, tracebacks at exit, a child process)
    # can write to the agent's stdout/stderr or keep its pipes open.
    global _AGENT_STDOUT
    try:
        _AGENT_STDOUT = os.dup(1)
    except OSError:  # no stdout: nobody to give context to
        _AGENT_STDOUT = None
    fd = os.open(os.devnull, os.O_WRONLY)
    for target in (1, 2):
        if fd != target:
            os.dup2(fd, target)
    if fd > 2:
        os.close(fd)


def _env_int(raw: str | None, default: int | None) -> int | str | None:
    # A decimal integer the protocol can carry; anything else is sent as given (cut short), so
    # the daemon's bad-request reply becomes a gap that names it.
    if raw is None or raw == "":
        return default
    text = raw.strip()
    if text.isascii() and text.isdigit() and len(text) <= 19 and int(text) < 1 << 63:
        return int(text)
    return _cut(raw, 100)


def _one_line(text: str) -> str:
    return text.strip().replace("\r\n", " ").replace("\r", " ").replace("\n", " ")


def _text(value: object) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))
