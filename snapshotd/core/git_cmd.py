"""Running the git command line safely: one way for every part that runs git on a remote or on
the store.

Owns ``run_git`` (``git *args`` under a scrubbed environment: the daemon's ``GIT_*`` variables
never redirect it, and a remote that wants a password fails instead of waiting on a terminal
that is not there; a timeout comes back as a failed result, exit -1, because ``TimeoutExpired``
would carry the command line, a remote URL included) and ``last_lines`` (git's own words, on one
line, credentials redacted).

Promises: no credential of a remote URL is ever on a command line (``ps`` shows every user
argv): ``user:password@`` is taken out of each URL argument and handed to git by a credential
helper that reads it from the child's environment (readable by this user only), for that
host only. git runs in its own process group, killed whole on a timeout: no ``git-remote-*``
helper outlives it.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
from urllib.parse import unquote

from snapshotd.core.config import redact_text

_NICE = shutil.which("nice") is not None

# ``scheme://userinfo@rest``: the userinfo ends at the last ``@`` before the path.
_URL_USERINFO = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*)://(?P<userinfo>[^/?#]*)@"
                           r"(?P<host>[^/?#@]*)(?P<rest>.*)$", re.DOTALL)
_HTTP_SCHEMES = ("http", "https", "ftp", "ftps")
# The helper answers ``get`` for the one origin whose credentials it holds (a redirect to
# another host gets nothing) and ignores ``store``/``erase``. ``printf`` is a shell builtin:
# the secret is in no argv. The text holds variable names only.
_HELPER = ("!f() { test \"$1\" = get || return 0; p=; h=; "
           "while IFS= read -r l; do case \"$l\" in protocol=*) p=${l#protocol=};; "
           "host=*) h=${l#host=};; esac; done; "
           "test \"$p://$h\" = \"$SNAPSHOTD_GIT_ORIGIN\" || return 0; "
           "printf 'username=%s\\n' \"$SNAPSHOTD_GIT_USERNAME\"; "
           "test -z \"${SNAPSHOTD_GIT_PASSWORD+set}\" || "
           "printf 'password=%s\\n' \"$SNAPSHOTD_GIT_PASSWORD\"; }; f")


def run_git(args: list[str], *, timeout: float | None, stdin: bytes | None = None,
            env: dict[str, str] | None = None,
            background: bool = False) -> subprocess.CompletedProcess:
    """``git *args`` under a scrubbed environment (plus ``env``); ``background`` runs it niced,
    so it yields the CPU to captures (a push's budget is capture latency, not lag)."""
    full_env = {k: v for k, v in os.environ.items()
                if not k.startswith(("GIT_", "SNAPSHOTD_GIT_"))}
    full_env["GIT_TERMINAL_PROMPT"] = "0"
    full_env.setdefault("SSH_ASKPASS_REQUIRE", "never")
    full_env.update(env or {})
    try:
        args, config, secret_env = strip_credentials(args)
    except ValueError as exc:
        return subprocess.CompletedProcess(["git", _verb(args)], -1, b"", str(exc).encode())
    full_env.update(secret_env)
    nice = ["nice", "-n", "10"] if background and _NICE else []
    command = [*nice, "git", *config, *args]
    return _run_group(command, full_env, stdin, timeout, _verb(args))


def strip_credentials(args: list[str]) -> tuple[list[str], list[str], dict[str, str]]:
    """``args`` with the userinfo of each URL taken out, the ``-c`` options that make git ask
    our credential helper (none when no URL had credentials), and the environment that helper
    reads. Over HTTP the user and password both go to the helper; over ssh and other schemes
    the user stays in the URL (ssh needs it; it is not a secret) and a password is dropped
    (git cannot pass one to ssh)."""
    out: list[str] = []
    secret: dict[str, str] = {}
    for arg in args:
        m = _URL_USERINFO.match(arg) if "://" in arg else None
        if m is None:
            out.append(arg)
            continue
        scheme, userinfo, host = m.group("scheme"), m.group("userinfo"), m.group("host")
        user, colon, password = userinfo.partition(":")
        if scheme.lower() not in _HTTP_SCHEMES:
            out.append(f"{scheme}://{user + '@' if user else ''}{host}{m.group('rest')}")
            continue
        out.append(f"{scheme}://{host}{m.group('rest')}")
        found = {"SNAPSHOTD_GIT_ORIGIN": f"{scheme.lower()}://{host}",
                 "SNAPSHOTD_GIT_USERNAME": unquote(user)}
        if colon:
            found["SNAPSHOTD_GIT_PASSWORD"] = unquote(password)
        if secret and secret != found:
            raise ValueError("one git command cannot carry credentials for two remotes")
        secret = found
    if not secret:
        return out, [], {}
    # The empty value first empties the user's helper list: no helper of theirs is asked, or
    # told to store this password (``credential.helper=store`` would write it in clear).
    return out, ["-c", "credential.helper=", "-c", f"credential.helper={_HELPER}"], secret


def _run_group(command: list[str], env: dict[str, str], stdin: bytes | None,
               timeout: float | None, verb: str) -> subprocess.CompletedProcess:
    """Run ``command`` in a new session (its own process group): on a timeout, or if this
    thread is interrupted, the whole group is killed, git's transport helpers included (killing
    git alone would leave ``git-remote-http`` running, re-parented to init)."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                            start_new_session=True)
    try:
        out, err = proc.communicate(stdin, timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        return subprocess.CompletedProcess(
            command, -1, b"", f"git {verb} timed out after {timeout:.0f}s".encode())
    except BaseException:
        _kill_group(proc)
        raise
    return subprocess.CompletedProcess(command, proc.returncode, out, err)


def _kill_group(proc: subprocess.Popen) -> None:
    """SIGKILL to git's process group, then reap git. Only while git is unreaped: its pid,
    which is the group's id, cannot have been reused."""
    if proc.returncode is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # the group is already empty
    try:
        # The pipes close when the group is gone; a process that left the group (a daemonised
        # ssh master) could hold them: bounded, then only git is waited for.
        proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


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
