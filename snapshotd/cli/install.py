"""``snapshotd install-service`` / ``uninstall-service``: run the daemon under the user's
supervisor (a systemd user unit with socket activation on Linux, a LaunchAgent on macOS).

Owns the unit files' and the plist's text (``contrib/`` holds it rendered for ``/usr/bin/python3``,
a test keeps them equal) and the talk with ``systemctl --user`` / ``launchctl``. Promises:
- ``ExecStart``/``ProgramArguments`` name the absolute interpreter that has snapshotd installed
  (``sys.executable``, or ``--python`` once it imports snapshotd): the service runs the CLI's code.
- The installing shell's path settings (``SNAPSHOTD_HOME``, ``_GAPS``, ``_CONFIG``, ``_SOCKET``,
  ``XDG_STATE_HOME``, ``XDG_CONFIG_HOME``) go into the unit, so daemon, hooks and CLI agree; a
  value with a control character is refused (a newline would add lines), ``%`` is written ``%%``.
- A unit edited since it was written (its sha256 stamp no longer matches) is replaced only with
  ``--force``, which keeps a copy beside it and says where.
- With the supervisor reachable the service is enabled and (re)started, after stopping a daemon
  started outside it (SIGTERM: in-flight captures finish); else the files are written and the
  commands printed. ``--print`` writes nothing. ``uninstall-service`` keeps the home."""

from __future__ import annotations

import hashlib
import os
import plistlib
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import click

from snapshotd.cli.common import fail
from snapshotd_client import socket_path

UNIT = "snapshotd.service"
SOCKET_UNIT = "snapshotd.socket"
LABEL = "dev.snapshotd"
DEFAULT_LISTEN = "%t/snapshotd/snapshotd.sock"
# Variables that decide where the daemon's files are; carried from the installing shell.
PATH_VARIABLES = ("SNAPSHOTD_HOME", "SNAPSHOTD_GAPS", "SNAPSHOTD_CONFIG", "XDG_STATE_HOME",
                  "XDG_CONFIG_HOME")
PLATFORMS = ("linux", "macos")


def default_platform() -> str:
    return "macos" if sys.platform == "darwin" else "linux"


platform_option = click.option(
    "--platform", type=click.Choice(PLATFORMS), default=None,
    help="linux (systemd user units) or macos (LaunchAgent); default: this machine's.")


@click.command("install-service")
@click.option("--print", "print_only", is_flag=True,
              help="Print the unit files (or plist) and change nothing.")
@platform_option
@click.option("--python", "python", type=click.Path(dir_okay=False, path_type=Path),
              default=None, help="Interpreter that has snapshotd installed (default: this one).")
@click.option("--no-start", is_flag=True,
              help="Write the files but do not enable or start anything; print the commands.")
@click.option("--force", is_flag=True,
              help="Replace unit files edited since install-service wrote them (a copy of "
                   "each is kept beside it).")
def install_service(print_only: bool, platform: str | None, python: Path | None,
                    no_start: bool, force: bool) -> None:
    """Install snapshotd as a per-user service that starts at login and on first use."""
    platform = platform or default_platform()
    interpreter = _interpreter(python)
    unsafe = unsafe_value(interpreter, dict(os.environ))
    if unsafe:
        fail(unsafe)
    plan = plan_for(platform, interpreter, dict(os.environ))
    if print_only:
        for index, (path, content) in enumerate(plan.files.items()):
            if platform == "linux":
                click.echo(("\n" if index else "") + f"# {path}")
            click.echo(content, nl=not content.endswith("\n"))
        return
    _write_files(plan.files, force)
    if no_start or not plan.supervisor_reachable():
        if not no_start:
            click.echo(f"{plan.supervisor} is not reachable from here; to enable and start "
                       "snapshotd, run:")
        else:
            click.echo("to enable and start snapshotd, run:")
        for command in plan.start_commands:
            click.echo("  " + _shell(command))
        return
    _stop_unsupervised_daemon(plan.managed_pid())
    for command in plan.start_commands:
        _run(command, plan.tolerate)
    click.echo(f"snapshotd is installed and running under {plan.supervisor}; "
               "`snapshotd status` shows what it does.")


@click.command("uninstall-service")
@platform_option
def uninstall_service(platform: str | None) -> None:
    """Stop and remove the per-user service (your checkpoints and ledger are kept)."""
    platform = platform or default_platform()
    plan = plan_for(platform, sys.executable, dict(os.environ))
    reachable = plan.supervisor_reachable()
    if reachable:
        for command in plan.stop_commands:
            _run(command, tolerate_all=True)
    removed = []
    for path in plan.files:
        try:
            path.unlink()
            removed.append(path)
        except FileNotFoundError:
            pass
    for path in removed:
        click.echo(f"removed {path}")
    if not removed:
        click.echo("no snapshotd service files were installed")
    if reachable and platform == "linux":
        _run(["systemctl", "--user", "daemon-reload"], tolerate_all=True)
    elif not reachable and removed:
        click.echo(f"{plan.supervisor} is not reachable from here; if the service is still "
                   "loaded, run:")
        for command in plan.stop_commands:
            click.echo("  " + _shell(command))
    click.echo("your snapshotd home (checkpoints, ledger, gaps) is untouched.")


# -- what to write ---------------------------------------------------------------------------


@dataclass
class Plan:
    platform: str
    supervisor: str
    files: dict[Path, str]
    start_commands: list[list[str]]
    stop_commands: list[list[str]]
    tolerate: tuple[str, ...] = ()

    def supervisor_reachable(self) -> bool:
        if self.platform == "linux":
            if shutil.which("systemctl") is None:
                return False
            try:
                probe = subprocess.run(["systemctl", "--user", "show-environment"],
                                       capture_output=True, timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                return False
            return probe.returncode == 0
        return sys.platform == "darwin" and shutil.which("launchctl") is not None

    def managed_pid(self) -> int | None:
        """The pid of the daemon the supervisor already runs for us, if any."""
        if self.platform != "linux":
            return None  # launchd's bootout/kickstart replace its own process anyway
        try:
            out = subprocess.run(["systemctl", "--user", "show", "-p", "MainPID", "--value", UNIT],
                                 capture_output=True, text=True, timeout=10)
            pid = int(out.stdout.strip() or "0")
        except (OSError, subprocess.TimeoutExpired, ValueError):
            return None
        return pid or None


def plan_for(platform: str, python: str, environ: dict[str, str]) -> Plan:
    if platform == "linux":
        unit_dir = systemd_user_dir(environ)
        listen = environ.get("SNAPSHOTD_SOCKET") or DEFAULT_LISTEN
        files = {
            unit_dir / UNIT: stamped(render_service(python, carried_environment(environ))),
            unit_dir / SOCKET_UNIT: stamped(render_socket(_absolute_or_specifier(listen))),
        }
        start = [["systemctl", "--user", "daemon-reload"],
                 ["systemctl", "--user", "enable", SOCKET_UNIT, UNIT],
                 ["systemctl", "--user", "restart", UNIT]]
        stop = [["systemctl", "--user", "disable", "--now", UNIT, SOCKET_UNIT]]
        return Plan(platform, "systemd (systemctl --user)", files, start, stop)
    home = Path(environ.get("HOME") or os.path.expanduser("~"))
    plist_path = home / "Library" / "LaunchAgents" / f"{LABEL}.plist"
    log_path = home / "Library" / "Logs" / "snapshotd.log"
    sock = str(_socket_for(environ))
    files = {plist_path: stamped(render_plist(python, sock, str(log_path),
                                              carried_environment(environ)))}
    domain = f"gui/{os.getuid()}"
    start = [["launchctl", "bootout", f"{domain}/{LABEL}"],
             ["launchctl", "bootstrap", domain, str(plist_path)],
             ["launchctl", "enable", f"{domain}/{LABEL}"],
             ["launchctl", "kickstart", "-k", f"{domain}/{LABEL}"]]
    stop = [["launchctl", "bootout", f"{domain}/{LABEL}"]]
    # bootout of a service that is not loaded fails; that is the normal first install.
    return Plan(platform, "launchd (launchctl)", files, start, stop, tolerate=("bootout",))


def systemd_user_dir(environ: dict[str, str]) -> Path:
    config = environ.get("XDG_CONFIG_HOME", "")
    if not os.path.isabs(config):
        config = os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".config")
    return Path(config) / "systemd" / "user"


def carried_environment(environ: dict[str, str]) -> dict[str, str]:
    carried = {}
    for name in PATH_VARIABLES + ("SNAPSHOTD_SOCKET",):
        value = environ.get(name, "")
        if value and (name.startswith("SNAPSHOTD_") or os.path.isabs(value)):
            carried[name] = os.path.abspath(os.path.expanduser(value))
    return carried


def render_service(python: str, environment: dict[str, str] | None = None) -> str:
    """The systemd user service unit."""
    env_lines = "".join(f"Environment={_unit_quote(f'{k}={v}')}\n"
                        for k, v in sorted((environment or {}).items()))
    return f"""\
# snapshotd: a systemd user service. `snapshotd install-service` writes this file into
# ~/.config/systemd/user/ with ExecStart naming the Python that has snapshotd installed.
# Started at login (default.target) and on first use of its socket (snapshotd.socket).
[Unit]
Description=snapshotd: durable checkpoints of coding agents' worktrees
Requires={SOCKET_UNIT}
After={SOCKET_UNIT}

[Service]
Type=notify
NotifyAccess=main
ExecStart={_exec_quote(python)} -m snapshotd serve
Environment=PYTHONUNBUFFERED=1
{env_lines}\
# The daemon pings the watchdog every WatchdogSec/2 while its event loop answers.
WatchdogSec=30
Restart=on-failure
RestartSec=2
# Start-up reconciles the ledger with the store; stop lets in-flight captures finish and
# commits pending tier-2 windows.
TimeoutStartSec=120
TimeoutStopSec=60
UMask=0077
# Hardening that works unprivileged in a user unit (seccomp-based, no namespaces). No
# ProtectHome/ProtectSystem/PrivateTmp: worktrees live anywhere, /tmp included, and restore
# writes into them. No MemoryDenyWriteExecute: cffi (pygit2) may need executable trampolines.
NoNewPrivileges=yes
LockPersonality=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
RestrictNamespaces=yes
RestrictAddressFamilies=AF_UNIX
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallErrorNumber=EPERM

[Install]
WantedBy=default.target
Also={SOCKET_UNIT}
"""


def render_socket(listen: str = DEFAULT_LISTEN) -> str:
    """The systemd user socket unit: the control socket, owned by systemd."""
    return f"""\
# snapshotd's control socket, held by systemd: the first connection (a hook, the CLI) starts
# snapshotd.service, and connections made while it restarts wait instead of failing.
[Unit]
Description=snapshotd control socket

[Socket]
ListenStream={listen}
SocketMode=0600
DirectoryMode=0700
RemoveOnStop=yes

[Install]
WantedBy=sockets.target
"""


def render_plist(python: str, sock: str, log_path: str,
                 environment: dict[str, str] | None = None) -> str:
    """The LaunchAgent: started at login, restarted after an unsuccessful exit."""
    env = {"PYTHONUNBUFFERED": "1", **(environment or {}), "SNAPSHOTD_SOCKET": sock}
    data = {
        "Label": LABEL,
        "ProgramArguments": [python, "-m", "snapshotd", "serve"],
        "RunAtLoad": True,
        "KeepAlive": {"SuccessfulExit": False},
        "ThrottleInterval": 5,
        "ExitTimeOut": 60,
        "ProcessType": "Standard",
        "Umask": 0o077,
        "WorkingDirectory": "/",
        "StandardOutPath": log_path,
        "StandardErrorPath": log_path,
        "EnvironmentVariables": dict(sorted(env.items())),
    }
    text = plistlib.dumps(data, sort_keys=False).decode()
    comment = ("<!-- snapshotd LaunchAgent: `snapshotd install-service` writes it to "
               "~/Library/LaunchAgents/ with the Python that has snapshotd installed. -->\n")
    head, sep, rest = text.partition("<plist")
    return head + comment + sep + rest


# -- helpers ---------------------------------------------------------------------------------


def _interpreter(python: Path | None) -> str:
    if python is None:
        return os.path.abspath(sys.executable)
    # Keep the path as given (absolute, not resolved): a venv's bin/python is a symlink whose
    # target would lose the venv.
    path = os.path.abspath(os.path.expanduser(str(python)))
    if not os.access(path, os.X_OK):
        fail(f"{path} is not an executable interpreter; pass --python of the environment "
             "where snapshotd is installed")
    try:
        probe = subprocess.run([path, "-c", "import snapshotd"], capture_output=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        fail(f"could not run {path}: {exc}")
        raise AssertionError("unreachable") from None
    if probe.returncode != 0:
        fail(f"{path} cannot import snapshotd; pass --python of the environment where "
             "snapshotd is installed (or install it there)")
    return path


def _absolute_or_specifier(listen: str) -> str:
    """The default's ``%t`` is systemd's; a path given is a path, its ``%`` escaped."""
    if listen == DEFAULT_LISTEN:
        return listen
    return os.path.abspath(os.path.expanduser(listen)).replace("%", "%%")


def _socket_for(environ: dict[str, str]) -> Path:
    # The same rule every client uses (snapshotd_client.paths), applied to `environ`.
    if environ.get("SNAPSHOTD_SOCKET"):
        return Path(os.path.abspath(os.path.expanduser(environ["SNAPSHOTD_SOCKET"])))
    runtime = environ.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        return Path(runtime) / "snapshotd" / "snapshotd.sock"
    return Path("/tmp") / f"snapshotd-{os.getuid()}" / "snapshotd.sock"


def _unit_quote(value: str) -> str:
    """A value for a unit file: %-specifiers escaped, quoted when it has spaces or quotes."""
    value = value.replace("%", "%%")
    if any(c in value for c in " \t\"'\\"):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return value


def _exec_quote(path: str) -> str:
    # ExecStart also treats '$' specially (variable expansion).
    return _unit_quote(path).replace("$", "$$")


def unsafe_value(python: str, environ: dict[str, str]) -> str | None:
    """Why a value install-service would write cannot be written safely, else None: a control
    character (a newline would end the ``Environment=`` line and start another of the
    unit's, ``ExecStartPre=`` say; a plist cannot hold most of them)."""
    values = {"--python": python, **{name: environ.get(name, "")
                                     for name in PATH_VARIABLES + ("SNAPSHOTD_SOCKET",)}}
    for name, value in values.items():
        if any(ord(c) < 0x20 or 0x7F <= ord(c) <= 0x9F for c in value):
            return (f"{name} holds a control character ({value!r}); a service file cannot "
                    f"carry it safely: set {name} to a path without one, or unset it")
    return None


_STAMP = "snapshotd-install-service sha256="


def stamped(content: str) -> str:
    """``content`` with a line naming its sha256: a file whose stamp still matches is
    install-service's own, unedited, and may be replaced."""
    digest = hashlib.sha256(content.encode()).hexdigest()
    if content.startswith("<?xml"):
        head, _, rest = content.partition("\n")
        return f"{head}\n<!-- {_STAMP}{digest} -->\n{rest}"
    return f"# {_STAMP}{digest}\n{content}"


def _edited(path: Path) -> bool:
    """Whether ``path`` holds something install-service did not write as it is (edited by
    hand, written by another tool, a symlink); False when nothing is there."""
    if path.is_symlink():
        return True
    try:
        text = path.read_text()
    except FileNotFoundError:
        return False
    except (OSError, UnicodeDecodeError):
        return True
    lines = text.splitlines(keepends=True)
    for index, line in enumerate(lines):
        if _STAMP in line:
            digest = line.split(_STAMP, 1)[1].split()[0].rstrip("->").strip()
            rest = "".join(lines[:index] + lines[index + 1:])
            return hashlib.sha256(rest.encode()).hexdigest() != digest
    return True


def _write_files(files: dict[Path, str], force: bool) -> None:
    """Write ``files``; one edited since install-service wrote it is refused unless ``force``,
    which first keeps it as ``NAME.bak`` (``.bak.<time>`` when that is taken)."""
    edited = [path for path in files if _edited(path)]
    if edited and not force:
        fail("not replacing " + ", ".join(str(p) for p in edited) + ": changed since "
             "install-service wrote it (or not written by it); pass --force to replace it "
             "(a copy is kept beside it)")
    for path, content in files.items():
        if path in edited:
            backup = path.with_name(f"{path.name}.bak")
            if backup.exists() or backup.is_symlink():
                backup = path.with_name(f"{path.name}.bak.{int(time.time())}")
            os.rename(path, backup)
            click.echo(f"kept your edited {path} as {backup}")
        _write(path, content)
        click.echo(f"wrote {path}")


def _write(path: Path, content: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    tmp.write_text(content)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def _shell(command: list[str]) -> str:
    import shlex

    return " ".join(shlex.quote(part) for part in command)


def _run(command: list[str], tolerate: tuple[str, ...] = (), tolerate_all: bool = False) -> None:
    click.echo("+ " + _shell(command))
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        fail(f"`{_shell(command)}` could not run: {exc}")
        return
    if result.returncode != 0 and not tolerate_all and not any(t in command for t in tolerate):
        fail(f"`{_shell(command)}` failed ({result.returncode}): "
             f"{(result.stderr or result.stdout).strip()}")


def _stop_unsupervised_daemon(managed_pid: int | None) -> None:
    """A daemon started by hand or by a hook's autostart holds the home lock; the service could
    not start beside it. Stop it gracefully (in-flight captures finish) and let the supervisor
    take over. The supervisor's own daemon is left to the restart that follows."""
    from snapshotd_client import Client, SnapshotdError

    sock = socket_path()
    try:
        with Client(sock, timeout=5) as client:
            pid = int(client.ping()["pid"])
    except (SnapshotdError, OSError, KeyError, ValueError):
        return
    if pid == managed_pid:
        return
    click.echo(f"stopping the snapshotd (pid {pid}) running outside the supervisor so the "
               "service can take over")
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    except PermissionError:
        fail(f"cannot stop snapshotd pid {pid}; stop it yourself, then run install-service again")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    fail(f"snapshotd pid {pid} did not stop within 60 s; stop it, then run install-service again")
