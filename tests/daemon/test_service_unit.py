"""Running under a supervisor: socket activation, sd_notify, the unit files, the LaunchAgent,
``install-service``/``uninstall-service``. Real sockets, a real daemon process, real
``systemd-analyze`` when it is installed."""

from __future__ import annotations

import os
import plistlib
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from snapshotd.cli.install import render_plist, render_service, render_socket
from tests.conftest import REPO, Env, MakeDaemon, make_git_worktree
from tests.support.helpers import wait_for

pytestmark = pytest.mark.one_ledger("socket activation, sd_notify and unit files")

CONTRIB = REPO / "contrib"

# The tiny exec wrapper a supervisor would be: the listening socket becomes fd 3, LISTEN_PID is
# the pid the daemon will have (execv keeps it), then the daemon replaces the wrapper.
ACTIVATE = (
    "import os, sys\n"
    "fd = int(sys.argv[1])\n"
    "os.dup2(fd, 3)\n"
    "os.close(fd)\n"
    "os.environ['LISTEN_FDS'] = '1'\n"
    "os.environ['LISTEN_PID'] = str(os.getpid())\n"
    "os.execv(sys.executable, [sys.executable, '-m', 'snapshotd', 'serve'])\n"
)


def cli(env: Env, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(**extra),
                          capture_output=True, text=True, timeout=60)


# -- socket activation -----------------------------------------------------------------------


def test_socket_activation_adopts_the_passed_socket_and_serves_a_client(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    activated = sd_env.sockdir / "activated.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(activated))
    listener.listen(16)
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("activated\n")
    log = open(sd_env.root / "daemon.log", "wb")
    # SNAPSHOTD_SOCKET points elsewhere: the daemon must serve on the passed fd, bind nothing.
    proc = subprocess.Popen([sys.executable, "-c", ACTIVATE, str(listener.fileno())],
                            pass_fds=(listener.fileno(),), env=sd_env.environ(),
                            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    log.close()
    listener.close()  # the daemon holds its own copy now, as under systemd
    daemon = make_daemon(sd_env, start=False)
    daemon.proc = proc
    from snapshotd_client import Client, SnapshotdError

    def served() -> dict | None:
        if proc.poll() is not None:
            raise AssertionError((sd_env.root / "daemon.log").read_text())
        try:
            with Client(activated, timeout=2) as c:
                return c.ping()
        except (SnapshotdError, OSError):
            return None

    pong = wait_for(served, what="the daemon to answer on the activated socket")
    assert pong["pid"] == proc.pid
    with Client(activated, timeout=30) as c:
        cp = c.snapshot(str(wt), run_id="act", node_id="n", label="via activation")
        status = c.status()
    assert cp["seq"] == 0 and not cp["deduped"]
    assert status["socket"] == str(activated)
    assert not sd_env.socket.exists(), "the daemon bound its own socket despite activation"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    # The socket belongs to the supervisor: the daemon must not remove it on exit.
    assert stat.S_ISSOCK(activated.lstat().st_mode)


def test_listen_fds_ignores_variables_meant_for_another_process_and_unsets_them() -> None:
    code = (
        "import os, json\n"
        "from snapshotd.daemon.activation import listen_fds\n"
        "os.environ.update(LISTEN_FDS='1', LISTEN_PID=str(os.getppid()))\n"
        "a = listen_fds()\n"
        "left = [k for k in ('LISTEN_FDS', 'LISTEN_PID') if k in os.environ]\n"
        "os.environ.update(LISTEN_FDS='1', LISTEN_PID=str(os.getpid()))\n"
        "s = __import__('socket').socket(__import__('socket').AF_UNIX)\n"  # becomes fd 3
        "b = listen_fds()\n"
        "print(json.dumps([len(a), left, len(b), b[0].fileno() if b else None,"
        " b[0].family == __import__('socket').AF_UNIX if b else None,"
        " os.get_inheritable(3)]))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=30, close_fds=True)
    assert out.returncode == 0, out.stderr
    import json

    foreign, left, adopted, fd, unix, inheritable = json.loads(out.stdout)
    assert foreign == 0 and left == []
    assert adopted == 1 and fd == 3 and unix is True
    assert inheritable is False  # adopted fds are close-on-exec


# -- sd_notify -------------------------------------------------------------------------------


def _notify_socket(address: str | bytes) -> socket.socket:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(address)
    sock.settimeout(0.2)
    return sock


def _drain(sock: socket.socket, until: float, stop=None) -> list[str]:
    messages: list[str] = []
    while time.monotonic() < until:
        try:
            messages.append(sock.recv(4096).decode())
        except TimeoutError:  # socket.timeout is TimeoutError since Python 3.10
            continue
        if stop is not None and stop(messages):
            break
    return messages


def test_sd_notify_ready_then_watchdog_pings_then_stopping_on_sigterm(
        sd_env: Env, make_daemon: MakeDaemon) -> None:
    path = sd_env.sockdir / "notify.sock"
    listener = _notify_socket(str(path))
    try:
        daemon = make_daemon(sd_env, {"NOTIFY_SOCKET": str(path), "WATCHDOG_USEC": "200000"})
        # start() returns once ping answers; READY=1 was sent when the listener went live.
        messages = _drain(listener, time.monotonic() + 10,
                          stop=lambda m: sum("WATCHDOG=1" in x for x in m) >= 4)
        ready = [i for i, m in enumerate(messages) if "READY=1" in m.split("\n")]
        watchdog = [i for i, m in enumerate(messages) if "WATCHDOG=1" in m.split("\n")]
        assert len(ready) == 1, messages
        assert "STATUS=Serving" in messages[ready[0]]
        assert len(watchdog) >= 4 and min(watchdog) > ready[0], messages
        assert not any("STOPPING=1" in m for m in messages)
        daemon.proc.send_signal(signal.SIGTERM)
        rest = _drain(listener, time.monotonic() + 20,
                      stop=lambda m: any("STOPPING=1" in x for x in m))
        assert any("STOPPING=1" in m.split("\n") for m in rest), rest
        assert daemon.proc.wait(timeout=30) == 0
    finally:
        listener.close()


def test_sd_notify_abstract_address_and_no_watchdog_for_another_pid(
        sd_env: Env, make_daemon: MakeDaemon) -> None:
    name = f"snapshotd-test-{uuid.uuid4().hex}"
    listener = _notify_socket(b"\0" + name.encode())
    # WATCHDOG_PID names another process: the watchdog is not ours to feed.
    try:
        make_daemon(sd_env, {"NOTIFY_SOCKET": "@" + name, "WATCHDOG_USEC": "100000",
                             "WATCHDOG_PID": "1"})
        messages = _drain(listener, time.monotonic() + 1.0)
        assert any("READY=1" in m.split("\n") for m in messages), messages
        assert not any("WATCHDOG=1" in m for m in messages), messages
    finally:
        listener.close()


# -- unit files ------------------------------------------------------------------------------


def test_contrib_files_are_what_install_service_renders() -> None:
    assert (CONTRIB / "systemd" / "snapshotd.service").read_text() == \
        render_service("/usr/bin/python3", {})
    assert (CONTRIB / "systemd" / "snapshotd.socket").read_text() == render_socket()
    plist = plistlib.loads((CONTRIB / "launchd" / "dev.snapshotd.plist").read_bytes())
    assert plist == plistlib.loads(render_plist(
        "/usr/bin/python3", "/tmp/snapshotd-501/snapshotd.sock",
        "/Users/YOU/Library/Logs/snapshotd.log", {}).encode())


def _unit_values(text: str) -> dict[str, list[str]]:
    values: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            key, value = line.split("=", 1)
            values.setdefault(key, []).append(value)
    return values


def test_unit_files_declare_the_supervision_contract() -> None:
    service = _unit_values((CONTRIB / "systemd" / "snapshotd.service").read_text())
    sock = _unit_values((CONTRIB / "systemd" / "snapshotd.socket").read_text())
    assert service["Type"] == ["notify"]
    assert service["Restart"] == ["on-failure"]
    assert service["UMask"] == ["0077"]
    assert int(service["WatchdogSec"][0]) > 0
    assert service["ExecStart"] == ["/usr/bin/python3 -m snapshotd serve"]
    assert service["NoNewPrivileges"] == ["yes"]
    assert sock["ListenStream"] == ["%t/snapshotd/snapshotd.sock"]
    assert sock["SocketMode"] == ["0600"] and sock["DirectoryMode"] == ["0700"]


def _verify(unit_dir: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAPSHOTD_")}
    env["XDG_RUNTIME_DIR"] = str(runtime)
    return subprocess.run(
        ["systemd-analyze", "verify", "--user", str(unit_dir / "snapshotd.service"),
         str(unit_dir / "snapshotd.socket")],
        env=env, capture_output=True, text=True, timeout=120, cwd=unit_dir)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None,
                    reason="systemd-analyze is not installed (it comes with the systemd "
                           "package); the unit files are checked by the other tests only")
def test_unit_files_pass_systemd_analyze_verify(sd_env: Env, tmp_path: Path) -> None:
    if not Path("/usr/bin/python3").exists():
        pytest.skip("contrib's ExecStart names /usr/bin/python3, absent here")
    contrib = _verify(CONTRIB / "systemd", tmp_path)
    assert contrib.returncode == 0, contrib.stderr
    assert "ignoring" not in contrib.stderr and "Unknown" not in contrib.stderr, contrib.stderr

    # And what install-service writes for this interpreter, with carried path settings.
    config_home = tmp_path / "xdg config"
    result = cli(sd_env, "install-service", "--no-start", "--platform", "linux",
                 XDG_CONFIG_HOME=str(config_home), SNAPSHOTD_HOME=str(tmp_path / "my home %h"))
    assert result.returncode == 0, result.stderr
    rendered = _verify(config_home / "systemd" / "user", tmp_path)
    assert rendered.returncode == 0, rendered.stderr
    assert "ignoring" not in rendered.stderr and "Unknown" not in rendered.stderr, \
        rendered.stderr


# -- install-service / uninstall-service -----------------------------------------------------


def test_install_service_print_renders_a_launchagent_that_runs_the_daemon(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    fake_home = tmp_path / "user"
    result = cli(sd_env, "install-service", "--print", "--platform", "macos",
                 HOME=str(fake_home))
    assert result.returncode == 0, result.stderr
    plist = plistlib.loads(result.stdout.encode())
    program = plist["ProgramArguments"]
    assert program[1:] == ["-m", "snapshotd", "serve"]
    assert os.path.isabs(program[0]) and os.access(program[0], os.X_OK)
    assert Path(program[0]) == Path(sys.executable)
    assert plist["Label"] == "dev.snapshotd"
    assert plist["RunAtLoad"] is True and plist["KeepAlive"] == {"SuccessfulExit": False}
    assert plist["StandardErrorPath"] == str(fake_home / "Library" / "Logs" / "snapshotd.log")
    env = plist["EnvironmentVariables"]
    assert env["SNAPSHOTD_SOCKET"] == str(sd_env.socket)
    assert env["SNAPSHOTD_HOME"] == str(sd_env.home)
    assert not fake_home.exists(), "--print must write nothing"

    # Run exactly what launchd would run, with the plist's environment: it serves on its socket.
    run_env = {k: v for k, v in sd_env.environ().items() if not k.startswith("SNAPSHOTD_")}
    run_env.update(env)
    proc = subprocess.Popen(program, env=run_env, cwd=plist["WorkingDirectory"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            stdin=subprocess.DEVNULL)
    daemon = make_daemon(sd_env, start=False)
    daemon.proc = proc
    wait_for(daemon.ping, what="the LaunchAgent's program to serve")
    assert daemon.stop() == 0


def test_install_service_print_linux_writes_nothing_and_names_this_interpreter(
        sd_env: Env, tmp_path: Path) -> None:
    config_home = tmp_path / "cfg"
    result = cli(sd_env, "install-service", "--print", "--platform", "linux",
                 XDG_CONFIG_HOME=str(config_home))
    assert result.returncode == 0, result.stderr
    assert f"# {config_home}/systemd/user/snapshotd.service" in result.stdout
    assert f"# {config_home}/systemd/user/snapshotd.socket" in result.stdout
    assert f"ExecStart={sys.executable} -m snapshotd serve" in result.stdout
    assert f"ListenStream={sd_env.socket}" in result.stdout  # SNAPSHOTD_SOCKET is honoured
    assert not config_home.exists()


def test_install_then_uninstall_without_a_reachable_supervisor(sd_env: Env,
                                                               tmp_path: Path) -> None:
    config_home = tmp_path / "cfg"
    extra = {"XDG_CONFIG_HOME": str(config_home), "SNAPSHOTD_SOCKET": ""}
    result = cli(sd_env, "install-service", "--no-start", "--platform", "linux", **extra)
    assert result.returncode == 0, result.stderr
    unit_dir = config_home / "systemd" / "user"
    service = (unit_dir / "snapshotd.service").read_text()
    socket_unit = (unit_dir / "snapshotd.socket").read_text()
    values = _unit_values(service)
    assert shlex.split(values["ExecStart"][0]) == [sys.executable, "-m", "snapshotd", "serve"]
    assert f"SNAPSHOTD_HOME={sd_env.home}" in values["Environment"]
    assert f"XDG_CONFIG_HOME={config_home}" in values["Environment"]
    assert "ListenStream=%t/snapshotd/snapshotd.sock" in socket_unit
    assert stat.S_IMODE((unit_dir / "snapshotd.service").stat().st_mode) == 0o644
    assert "systemctl --user enable snapshotd.socket snapshotd.service" in result.stdout

    result = cli(sd_env, "uninstall-service", "--platform", "linux", **extra)
    assert result.returncode == 0, result.stderr
    assert not (unit_dir / "snapshotd.service").exists()
    assert not (unit_dir / "snapshotd.socket").exists()
    assert "untouched" in result.stdout


def test_install_service_refuses_an_interpreter_without_snapshotd(sd_env: Env,
                                                                  tmp_path: Path) -> None:
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    result = cli(sd_env, "install-service", "--print", "--python", str(fake))
    assert result.returncode == 1
    assert "cannot import snapshotd" in result.stderr and result.stdout == ""
