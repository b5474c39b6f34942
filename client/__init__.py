"""snapshotd's thin client (import name ``snapshotd_client``, stdlib + msgpack only): all an
agent process needs to talk to the daemon, and the ``snapshot-hook`` run after every tool call."""

# Owns the wire format (``protocol``), the connection (``Client``), the in-process tool wrapper
# (``wrap``), the gap spool (``gaps``), the agents' hook (``hook``) and each agent's payloads
# (``agents``). Promises:
# - never imports the daemon, click, pygit2, watchfiles or psutil, so the hook, which runs after
#   every tool call, loads in a few milliseconds;
# - talks only to the current user's daemon: a socket in a directory that is not the user's or
#   is writable by group/others, a socket file or a listener of another uid is refused
#   (``SocketUntrusted``, gap reason ``socket-untrusted``);
# - every capture asked for and not checkpointed is a gap, written once (by the daemon when it
#   can attribute it, here otherwise), and writing it never waits past the caller's deadline;
# - the hook always exits 0, silently, within its bounded ``SNAPSHOTD_HOOK_TIMEOUT_MS``.

from __future__ import annotations

__version__ = "0.1.0"

# The package's face (the same shape as snapshotd's, snapshotd/faces.py, which the client may
# not import): module -> the public names it gives the package, each loaded on first use.
FACE: dict[str, tuple[str, ...]] = {
    "client": ("Client", "DaemonTimeout", "DaemonUnavailable", "SnapshotdError", "SocketUntrusted"),
    "gaps": ("append_gap", "make_gap", "read_gaps"),
    "hook": ("RELAYED_ENV", "before_tool_fields", "parse_json", "route", "snapshot_fields",
        "try_autostart"),
    "paths": ("gaps_path", "home_dir", "socket_dir_problem", "socket_path"),
    "protocol": ("BAD_FRAME", "BAD_ID", "BAD_PAYLOAD", "BAD_REQUEST", "BUSY", "CAPTURE_FAILED",
        "CONFLICT", "DAEMON_UNAVAILABLE", "ERROR_CODES", "FENCED", "FETCH_FAILED", "FORBIDDEN",
        "FRAME_TOO_LARGE", "INTERNAL", "MAX_FRAME", "NOT_FOUND", "NO_REMOTE", "PROTOCOL_VERSION",
        "PUSH_FAILED", "RESTORE_FAILED", "SECRET_HELD", "SHUTTING_DOWN", "UNKNOWN_OP",
        "UNSUPPORTED_VERSION", "VERIFY_FAILED", "WORKTREE_MISSING", "WORKTREE_REFUSED",
        "WORKTREE_REPLACED", "daemon_records_gap", "decode_body", "encode_frame", "pack_plain",
        "validate_id", "validate_int"),
    "wrap": ("wrap",),
}
_HOME = {name: module for module, names in FACE.items() for name in names}


def __getattr__(name: str) -> object:
    # Lazy (PEP 562): ``snapshot-hook`` imports ``snapshotd_client.hook`` after every tool call
    # and must not pay for the wrapper's imports.
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'snapshotd_client' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__all__ = sorted(["__version__", *_HOME])
