"""``snapshotd exec -- CMD …``: run any agent command inside an attempt.

Owns the life of one wrapped command: begin an attempt owned by the command's own process (we
fork, the child waits on a pipe while the parent begins the attempt with its pid, then ``exec``s
the command), run it with the ``SNAPSHOTD_*`` environment, forward SIGINT/SIGTERM/SIGHUP, take a
last capture when it exits, end the attempt and exit with its status. So if ``snapshotd exec`` is
killed, the attempt lives as long as the agent does. Promises:
- exit status: the command's own; ``128 + N`` when a signal N killed it; 125 when snapshotd could
  not begin the attempt (nothing run); 126 when the command cannot be executed, 127 when it is
  not found (the attempt then ends ``failed``).
- the attempt ends ``finished`` on exit 0, ``cancelled`` when we forwarded a signal and the command
  exited non-zero, else ``failed``; its final pointer is its newest checkpoint, after the last
  capture. The command is reaped only after the attempt ended (liveness cannot abandon it).
- A terminal's SIGINT reaches the command directly; it is forwarded only when it did not. With
  no daemon answering, one is started unless ``SNAPSHOTD_AUTOSTART=0``.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import sys
import time
from pathlib import Path

import click

from snapshotd.cli.attempt import attempt_env, describe
from snapshotd.cli.common import resolve_socket, socket_option
from snapshotd_client import Client, DaemonUnavailable, SnapshotdError

EXIT_SNAPSHOTD = 125
EXIT_CANNOT_EXECUTE = 126
EXIT_NOT_FOUND = 127
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
AUTOSTART_WAIT_S = 20.0


@click.command("exec", context_settings={"allow_interspersed_args": False})
@click.option("--run", "run_id", required=True, help="Run id.")
@click.option("--node", "node_id", required=True, help="Node (task) id within the run.")
@click.option("--iteration", type=click.IntRange(min=0), default=0, show_default=True,
              help="Iteration of the node.")
@click.option("--cwd", type=click.Path(exists=True, file_okay=False, path_type=Path),
              default=".", show_default=True,
              help="The worktree; the command runs there.")
@click.option("--resume", is_flag=True,
              help="First restore the worktree to the previous attempt's newest checkpoint.")
@click.option("--quiet", "-q", is_flag=True, help="Print no summary line on stderr.")
@socket_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def exec_command(run_id: str, node_id: str, iteration: int, cwd: Path, resume: bool,
                 quiet: bool, socket_: Path | None, command: tuple[str, ...]) -> None:
    """Run COMMAND in an attempt: `snapshotd exec --run R --node N -- CMD ARGS…`.

    Exits with COMMAND's status (128+N for signal N; 125 if no attempt could be begun).
    """
    worktree = cwd.resolve()
    sock = resolve_socket(socket_)
    client = Client(sock, timeout=600)
    home = _daemon_home(client, sock)
    child = _Gate(list(command), worktree)
    try:
        begun = client.attempt_begin(run_id, node_id, str(worktree), iteration=iteration,
                                     owner_pid=child.pid, resume=resume)
    except SnapshotdError as exc:
        child.abort()
        _fail(f"could not begin the attempt: {exc.message} ({exc.code}); nothing was run")
    env = dict(os.environ)
    env.update(attempt_env(begun, sock, home))
    forwarder = _Forwarder(child.pid)
    forwarder.install()
    try:
        exec_errno = child.release(env)
        code, signum = child.wait_exit()
    finally:
        forwarder.uninstall()
    if exec_errno is not None:
        reason = os.strerror(exec_errno)
        click.echo(f"snapshotd: cannot run {command[0]!r}: {reason}", err=True)
    status_code = 128 + signum if signum else code
    if status_code == 0:
        status = "finished"
    elif forwarder.forwarded or forwarder.received:
        status = "cancelled"
    else:
        status = "failed"
    summary = _finish(client, begun, status, status_code, command[0])
    child.reap()
    client.close()
    if not quiet:
        click.echo(f"snapshotd: {summary}", err=True)
    sys.exit(status_code)


def _daemon_home(client: Client, sock: Path) -> str | None:
    """Reach the daemon (starting it when allowed); the home it serves."""
    try:
        return client.ping().get("home")
    except DaemonUnavailable:
        pass
    except SnapshotdError as exc:
        _fail(f"snapshotd at {sock} did not answer: {exc.message} ({exc.code}); nothing was run")
    from snapshotd_client import try_autostart

    if os.environ.get("SNAPSHOTD_AUTOSTART") == "0":
        _fail(f"no daemon answers on {sock} (autostart is off: SNAPSHOTD_AUTOSTART=0); start "
              "it with `snapshotd serve`; nothing was run")
    if not try_autostart(str(sock), time.monotonic() + AUTOSTART_WAIT_S):
        _fail(f"no daemon answers on {sock} and none could be started; run `snapshotd serve` "
              "to see why; nothing was run")
    try:
        return client.ping().get("home")
    except SnapshotdError as exc:
        _fail(f"the daemon started on {sock} does not answer: {exc.message}; nothing was run")
    return None


def _finish(client: Client, begun: dict, status: str, status_code: int, name: str) -> str:
    """Last capture, then end the attempt; a sentence saying how it went."""
    key = {k: begun[k] for k in ("run_id", "node_id", "iteration", "attempt")}
    note = ""
    try:
        # What the command wrote after its last hook (or all of it, for an agent without hooks).
        client.snapshot(begun["worktree"], tier=1, source="cli",
                        label=f"exec {name} exited {status_code}", **key)
    except SnapshotdError as exc:
        if exc.code != "fenced":  # superseded by a newer attempt: its captures are not ours
            note = f"; last capture failed: {exc.message} ({exc.code})"
    try:
        ended = client.attempt_end(status=status, **key)
    except SnapshotdError as exc:
        return (f"{describe(begun)}: could not end the attempt ({exc.message}, {exc.code}); "
                f"command exited {status_code}{note}")
    final = (ended.get("final_commit") or "")[:12] or "no checkpoint"
    state = ended.get("state", status)
    return f"{describe(ended)} {state} (final {final}), command exited {status_code}{note}"


def _fail(message: str) -> None:
    click.echo(f"snapshotd: {message}", err=True)
    sys.exit(EXIT_SNAPSHOTD)


class _Gate:
    """A forked child that waits for its environment, then becomes the command (same pid)."""

    def __init__(self, command: list[str], cwd: Path) -> None:
        env_r, env_w = os.pipe()
        err_r, err_w = os.pipe()  # close-on-exec: EOF on it means the exec succeeded
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child, which becomes the command
            _child(command, cwd, env_r, env_w, err_r, err_w)
        os.close(env_r)
        os.close(err_w)
        self.pid = pid
        self._env_w: int | None = env_w
        self._err_r = err_r
        self._exited = False

    def release(self, env: dict[str, str]) -> int | None:
        """Hand over the environment; the errno of a failed exec, else None."""
        data = json.dumps(env).encode()
        assert self._env_w is not None
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._env_w, view):]
        except BrokenPipeError:
            pass  # the child died first (a forwarded signal): its status says why
        finally:
            os.close(self._env_w)
            self._env_w = None
        chunks = []
        while True:
            chunk = _retry(os.read, self._err_r, 64)
            if not chunk:
                break
            chunks.append(chunk)
        os.close(self._err_r)
        raw = b"".join(chunks)
        return int(raw) if raw.strip().isdigit() else None

    def abort(self) -> None:
        """Never run the command: EOF on its pipe makes the child exit."""
        if self._env_w is not None:
            os.close(self._env_w)
            self._env_w = None
        os.close(self._err_r)
        _retry(os.waitpid, self.pid, 0)

    def wait_exit(self) -> tuple[int, int]:
        """Wait until the command exits, leaving it unreaped: ``(exit code, signal)``."""
        info = _retry(os.waitid, os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        self._exited = True
        if info is not None and info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
            return 0, info.si_status
        return (info.si_status if info is not None else 0), 0

    def reap(self) -> None:
        try:
            _retry(os.waitpid, self.pid, 0)
        except ChildProcessError:
            pass


def _child(command: list[str], cwd: Path, env_r: int, env_w: int, err_r: int,
           err_w: int) -> None:  # pragma: no cover - runs in the forked child
    code = EXIT_SNAPSHOTD
    try:
        os.close(env_w)
        os.close(err_r)
        # Handlers are reset by exec anyway; ignored signals are not, and Python ignores
        # SIGPIPE (and SIGXFSZ): the command must get the defaults a shell would give it.
        for sig in (*FORWARDED, signal.SIGPIPE, getattr(signal, "SIGXFSZ", None)):
            if sig is not None:
                signal.signal(sig, signal.SIG_DFL)
        chunks = []
        while True:
            chunk = _retry(os.read, env_r, 1 << 16)
            if not chunk:
                break
            chunks.append(chunk)
        if not chunks:
            os._exit(EXIT_SNAPSHOTD)  # the parent gave up: no attempt, no command
        env = json.loads(b"".join(chunks))
        os.chdir(cwd)
        os.execvpe(command[0], command, env)
    except OSError as exc:
        code = EXIT_NOT_FOUND if exc.errno == errno.ENOENT else EXIT_CANNOT_EXECUTE
        try:
            os.write(err_w, str(exc.errno or 0).encode())
        except OSError:
            pass
    except BaseException as exc:  # noqa: BLE001 - the child must never return into click
        try:  # the child's stderr is the command's: say why it never started
            os.write(2, f"snapshotd exec: the command was not started: {exc!r}\n".encode())
        except OSError:
            pass  # no stderr left; the exit code still says it
    os._exit(code)


class _Forwarder:
    """Signal handlers that pass SIGINT/SIGTERM/SIGHUP on to the command."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.received: list[int] = []
        self.forwarded: list[int] = []
        self._previous: dict[int, object] = {}

    def install(self) -> None:
        for sig in FORWARDED:
            self._previous[sig] = signal.signal(sig, self._handle)

    def uninstall(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]

    def _handle(self, signum: int, _frame: object) -> None:
        self.received.append(signum)
        if signum == signal.SIGINT and _terminal_already_delivered():
            return  # ^C at the terminal went to the whole foreground group, the command too
        try:
            os.kill(self.pid, signum)
            self.forwarded.append(signum)
        except ProcessLookupError:
            pass


def _terminal_already_delivered() -> bool:
    """Whether we run in the terminal's foreground process group (which the command shares),
    so a terminal-generated SIGINT has reached the command as well."""
    for fd in (0, 1, 2):
        try:
            if os.isatty(fd):
                return os.tcgetpgrp(fd) == os.getpgrp()
        except OSError:
            continue
    return False


def _retry(fn, *args):  # type: ignore[no-untyped-def]
    # PEP 475 retries EINTR already; this covers a handler that raised InterruptedError.
    while True:
        try:
            return fn(*args)
        except InterruptedError:
            continue
