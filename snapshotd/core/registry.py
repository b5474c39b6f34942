"""What a part of the daemon may do to the daemon it is attached to: the ``Registry`` interface.

Owns ``Registry`` (a Protocol), the handler and wrapper shapes of an op and ``LAYERS``, the
order wrappers sit around an op's handler. The optional parts (watch, features, the daemon's own
extras) receive the daemon's control socket server as a ``Registry`` in their ``attach(service,
server, config)``: they register an op, wrap one, read an op's chain, add a status section, a
flush hook, a shutdown hook or a start/stop callback, and know nothing else of the daemon.

Promises: ``snapshotd.daemon.server.Server`` implements every member with these signatures
(tests/test_server_hooks.py checks it); an op's wrappers run in the order of ``LAYERS``, the
first innermost, whatever order the parts attached in.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol, runtime_checkable

# An op's handler: the request's fields in, the result map out (or a ``ServiceError``).
Handler = Callable[[dict], dict]
# A wrapper of an op: called with the request's fields and the next handler inward (the op's
# handler, or the wrapper of the layer below); it returns the result, calling the next handler
# or not.
Wrapper = Callable[[dict, Handler], dict]

# Where a wrapper sits around an op's handler, innermost first: the engine extends the core ops
# (``resume`` on attempt_begin, the flush before attempt_end); metrics completes ``status`` after
# everything else has contributed to it; the guard takes its checkpoint before ``before_tool``
# records the call. A part that wraps an op names its layer here.
LAYERS = ("guard", "engine", "metrics")


@runtime_checkable
class Registry(Protocol):
    """The daemon as its parts see it (``snapshotd.daemon.server.Server``)."""

    # Called with a worktree's root to land its pending tier-2 work now (the watcher sets it;
    # the engine calls it before an attempt ends); None when nothing watches.
    flush_hook: Callable[[Path], None] | None
    # Each returns a map merged into the ``status`` op's reply.
    status_extras: list[Callable[[], dict]]
    # Run once as the daemon stops, after the last request, each within a deadline.
    shutdown_hooks: list[Callable[[], None]]
    # Run once the socket accepts, and as the stop begins (before in-flight requests finish).
    on_ready: list[Callable[[], None]]
    on_stopping: list[Callable[[], None]]

    def register(self, op: str, handler: Handler) -> None:
        """Make ``handler`` the op's own handler, replacing any earlier one, keeping the op's
        wrappers."""

    def wrap(self, op: str, wrapper: Wrapper, *, layer: str) -> None:
        """Put ``wrapper`` around ``op`` at ``layer`` (one of ``LAYERS``, at most one wrapper
        per op and layer), before or after the op is registered."""

    def handler(self, op: str) -> Handler | None:
        """What a request for ``op`` runs: its handler inside its wrappers; None if unknown."""
