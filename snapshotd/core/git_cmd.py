"""Running the git command line safely: one way for every part that runs git on a remote or on
the store.

Owns ``run_git`` (``git *args`` under a scrubbed environment: the daemon's ``GIT_*`` variables
never redirect it, and a remote that wants a password fails instead of waiting on a terminal
that is not there; a timeout comes back as a failed result, exit -1, because ``TimeoutExpired``
would carry the command line, a remote URL included) and ``last_lines`` (git's own words, on one
line, credentials redacted).
"""

from __future__ import annotations

import os
import shutil
import subprocess

from snapshotd.core.config import redact_text

_NICE = shutil.which("nice") is not None


def run_git(args: list[str], *, timeout: float | None, stdin: bytes | None = None,
            env: dict[str, str] | None = None,
            background: bool = False) -> subprocess.CompletedProcess:
    """``git *args`` under a scrubbed environment (plus ``env``); ``background`` runs it niced,
    so it yields the CPU to captures (a push's budget is capture latency, not lag)."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    full_env["GIT_TERMINAL_PROMPT"] = "0"
    full_env.setdefault("SSH_ASKPASS_REQUIRE", "never")
    full_env.update(env or {})
    nice = ["nice", "-n", "10"] if background and _NICE else []
    command = [*nice, "git", *args]
    try:
        return subprocess.run(command, env=full_env, capture_output=True, timeout=timeout,
                              input=stdin,
                              stdin=None if stdin is not None else subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        return subprocess.CompletedProcess(
            command, -1, exc.stdout or b"",
            f"git {_verb(args)} timed out after {timeout:.0f}s".encode())


def last_lines(proc: subprocess.CompletedProcess, n: int = 4) -> str:
    """The last ``n`` non-blank lines of git's stderr on one line, credentials redacted."""
    text = (proc.stderr or b"").decode(errors="replace").splitlines()
    lines = [line.strip() for line in text if line.strip()]
    joined = " | ".join(lines[-n:]) or f"git exited {proc.returncode}"
    return redact_text(joined)


def _verb(args: list[str]) -> str:
    """The git command's name among its arguments (past ``-C DIR`` and ``-c KEY=VALUE``)."""
    i = 0
    while i < len(args) and args[i] in ("-C", "-c"):
        i += 2
    return args[i] if i < len(args) else ""
