"""One run of bisect's command in the scratch directory, and what its exit means.

Owns ``run_command``. Promises, as ``git bisect run`` reads an exit: 0 is good, 125 skip,
1..127 (but 125) bad; 128 or more, or death by a signal it did not get from us, aborts the
bisection (the command itself broke, not the checkpoint). A run past ``timeout`` counts as bad
(a checkpoint whose tests hang is broken). The command runs in a session of its own, stdin
``/dev/null``; its whole process group is killed (TERM, then KILL) when it times out, when
the caller is interrupted (any exception, Ctrl-C included, re-raised) and after it exits, so
nothing it started writes into the next checkpoint. ``output`` is a file descriptor (the CLI's
stderr) or a file whose tail is returned (the MCP tool's).
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any

SKIP_EXIT = 125
# After TERM, how long the group gets before KILL.
TERM_GRACE_S = 2.0
TAIL_BYTES = 2000


@dataclass
class Outcome:
    """A run's verdict (``good``, ``bad``, ``skip`` or ``abort``) and why."""

    verdict: str
    exit_code: int | None
    signal: int | None
    timed_out: bool
    seconds: float
    output_tail: str | None = None

    def as_dict(self) -> dict:
        out = {"verdict": self.verdict, "exit_code": self.exit_code, "signal": self.signal,
               "timed_out": self.timed_out, "seconds": round(self.seconds, 3)}
        if self.output_tail is not None:
            out["output_tail"] = self.output_tail
        return out


def verdict_of(code: int) -> str:
    """``git bisect run``'s reading of an exit status (a signal death is negative)."""
    if code == 0:
        return "good"
    if code == SKIP_EXIT:
        return "skip"
    if 0 < code < 128:
        return "bad"
    return "abort"


def run_command(argv: list[str], cwd: Path, *, env: dict[str, str], timeout: float | None,
                output: int | Path) -> Outcome:
    """Run ``argv`` in ``cwd`` and read its exit. ``OSError`` when it cannot be started."""
    sink = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600) \
        if isinstance(output, Path) else output
    started = time.monotonic()
    # A signal that lands while Popen is starting the command would leave it running unseen
    # (Popen has not returned its pid yet): held until ``proc`` is known, then delivered.
    hold = _SignalHold()
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                stdout=sink, stderr=sink, start_new_session=True)
    except BaseException:
        hold.release()
        raise
    finally:
        if isinstance(output, Path):
            os.close(sink)
    timed_out = False
    try:
        hold.release()
        try:
            code = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _stop_group(proc)
            code = proc.wait()
    finally:
        # Interrupted or not, nothing of the command outlives its run.
        _stop_group(proc)
    seconds = time.monotonic() - started
    tail = _tail(output) if isinstance(output, Path) else None
    verdict = "bad" if timed_out else verdict_of(code)
    return Outcome(verdict, code if code >= 0 else None, -code if code < 0 else None, timed_out,
                   seconds, tail)


class _SignalHold:
    """SIGINT and SIGTERM recorded instead of handled (main thread only: Python runs signal
    handlers there), until ``release`` puts the handlers back and re-raises what came."""

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.caught: list[int] = []
        self.saved: dict[int, Any] = {}
        if threading.current_thread() is threading.main_thread():
            self.saved = {sig: signal.signal(sig, self._record) for sig in self.SIGNALS}

    def _record(self, signum: int, _frame: FrameType | None) -> None:
        self.caught.append(signum)

    def release(self) -> None:
        saved, self.saved = self.saved, {}
        for sig, handler in saved.items():
            signal.signal(sig, handler)
        if saved and self.caught:
            signal.raise_signal(self.caught[0])


def _stop_group(proc: subprocess.Popen) -> None:
    """TERM the command's process group, give the command a grace to exit, then KILL whatever
    is left of the group (a zombie no one reaps yet counts as a member: not waited for)."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        pass
    else:
        try:
            proc.wait(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _tail(path: Path) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - TAIL_BYTES))
        return f.read().decode("utf-8", "replace")
