"""Tier-1 capture for in-process agents (source ``wrap``): a decorator and a context manager.

Owns: capturing the worktree after each wrapped tool call, whether the call returned or raised,
and recording a gap when that capture could not be taken.

Promises:
- The tool's own result and exception pass through untouched; a capture failure is never raised
  from the wrapper. It is kept on ``.error``, logged (logger ``snapshotd_client.wrap``) and
  appended to the gap spool unless the daemon has already recorded it (an ``ok: false`` reply
  the daemon could attribute; ``busy``, ``shutting-down``, ``internal`` and the other
  ``protocol.NO_DAEMON_GAP_CODES`` are recorded here): one gap per failed capture.
- ``.result`` holds the last successful snapshot reply (the last call's, when decorating).
- Each call gets its own ``tool_use_id`` (a fresh uuid4 hex unless the caller passes one).
"""

from __future__ import annotations

import functools
import os

from .client import Client, SnapshotdError
from .gaps import append_gap, make_gap
from .protocol import INTERNAL

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, TypeVar

    F = TypeVar("F", bound=Callable[..., Any])


class wrap:  # lower-case: at the call site it reads as a function, `@wrap(...)`
    """Capture ``cwd`` for attempt ``(run_id, node_id, iteration, attempt)`` after a tool call.

    As a decorator, the wrapped function accepts an optional ``tool_use_id=`` keyword, which is
    consumed (not passed on) and labels the checkpoint; the label is the function's name unless
    ``label`` is given. As a context manager, the capture happens on exit, also on an exception.
    ``client`` defaults to a ``Client()`` created on first use and kept for later captures.
    """

    def __init__(self, cwd: str | os.PathLike[str], run_id: str, node_id: str,
                 iteration: int = 0, attempt: int | None = None, client: Client | None = None,
                 label: str | None = None, *, tool_use_id: str | None = None) -> None:
        self.cwd = os.path.abspath(os.fspath(cwd))
        self.run_id = run_id
        self.node_id = node_id
        self.iteration = iteration
        self.attempt = attempt
        self.label = label
        self.tool_use_id = tool_use_id
        self.result: dict | None = None
        self.error: Exception | None = None
        self._client = client
        self._owns_client = client is None

    def __call__(self, fn: F) -> F:
        label = self.label or getattr(fn, "__name__", None)
        # Imported here: decorating happens once, and inspect is heavy for the hook's import path.
        import inspect

        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
                tool_use_id = kwargs.pop("tool_use_id", None) or _new_tool_use_id()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    # Blocking, on purpose: the checkpoint must exist before the agent's next
                    # step can see the tool's result.
                    self.capture(label=label, tool_use_id=tool_use_id)
            return async_wrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            tool_use_id = kwargs.pop("tool_use_id", None) or _new_tool_use_id()
            try:
                return fn(*args, **kwargs)
            finally:
                self.capture(label=label, tool_use_id=tool_use_id)
        return wrapper  # type: ignore[return-value]

    def __enter__(self) -> wrap:
        return self

    def __exit__(self, *exc_info: object) -> bool:
        try:
            self.capture(label=self.label, tool_use_id=self.tool_use_id or _new_tool_use_id())
        finally:
            if self._owns_client and self._client is not None:
                self._client.close()
                self._client = None
        return False  # never swallow the block's exception

    def capture(self, *, label: str | None, tool_use_id: str | None) -> dict | None:
        """Take one tier-1 checkpoint now; return its reply, or None (see ``.error``)."""
        try:
            if self._client is None:
                self._client = Client()
            result = self._client.snapshot(
                self.cwd, run_id=self.run_id, node_id=self.node_id, iteration=self.iteration,
                attempt=self.attempt, tier=1, source="wrap", label=label,
                tool_use_id=tool_use_id)
        except Exception as exc:  # a capture failure must never replace the tool's outcome
            self.error = exc
            self._record_failure(exc, tool_use_id)
            return None
        self.result = result
        self.error = None
        return result

    def _record_failure(self, exc: Exception, tool_use_id: str | None) -> None:
        import logging

        log = logging.getLogger(__name__)
        if isinstance(exc, SnapshotdError):
            reason, detail = exc.code, exc.message
            if exc.daemon_recorded:
                log.warning("snapshotd capture failed for %s (daemon recorded the gap): %s",
                            self.cwd, exc)
                return
        else:
            reason, detail = INTERNAL, f"{type(exc).__name__}: {exc}"
        log.warning("snapshotd capture failed for %s: %s: %s", self.cwd, reason, detail)
        try:
            append_gap(make_gap(
                run_id=self.run_id, node_id=self.node_id, iteration=self.iteration,
                attempt=self.attempt, worktree=self.cwd, tier=1, source="wrap",
                tool_use_id=tool_use_id, reason=reason, detail=detail))
        except Exception as gap_exc:
            log.error("could not write the gap for %s: %s", self.cwd, gap_exc)


def _new_tool_use_id() -> str:
    import uuid  # lazily: uuid pulls in more than the hook path needs

    return uuid.uuid4().hex
