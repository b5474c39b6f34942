"""The client talks only to its own user's daemon; the daemon serves only from a directory no one
else controls. Another local user is simulated (the tests run as root) by chown'ing the
directory or socket to ``nobody``, by a 0777 directory, and by a real listener process that
runs as ``nobody``."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from snapshotd_client import Client, SocketUntrusted
from snapshotd_client.gaps import read_gaps
from snapshotd_client.paths import socket_dir_problem, socket_problem
from snapshotd_client.protocol import SOCKET_UNTRUSTED
from tests.conftest import Env
from tests.support.fake_daemon import (
    WAIT_WOULD_HANG,
    FakeDaemon,
    assert_silent_success,
    hook_stdin,
    ok,
    run_hook_timed,
)

NOBODY = 65534

pytestmark = [pytest.mark.skipif(os.getuid() != 0, reason="simulating another user needs root"),
              pytest.mark.one_ledger("ownership of the socket and its directory")]


def _squat(directory: Path, how: str) -> None:
    if how == "other-owner":
        os.chown(directory, NOBODY, NOBODY)
    else:
        os.chmod(directory, 0o777)


@pytest.mark.parametrize("how", ["other-owner", "world-writable"])
def test_client_refuses_a_socket_in_a_squatted_directory(short_dir, how):
    with FakeDaemon(short_dir / "d.sock", ok()) as fake:
        _squat(short_dir, how)
        with pytest.raises(SocketUntrusted) as info, Client(short_dir / "d.sock") as c:
            c.ping()
        assert fake.requests == [] and fake.connections == 0
    assert info.value.code == SOCKET_UNTRUSTED and not info.value.remote
    assert str(short_dir) in info.value.message and "SNAPSHOTD_SOCKET" in info.value.message


@pytest.mark.parametrize("how", ["other-owner", "world-writable"])
def test_hook_records_socket_untrusted_for_a_squatted_directory(hook_env, short_dir, how):
    hook_env["SNAPSHOTD_GAPS"] = str(Path(hook_env["SNAPSHOTD_HOME"]) / "gaps.ndjson")
    with FakeDaemon(short_dir / "d.sock", ok()) as fake:
        _squat(short_dir, how)
        hook_env.update(WAIT_WOULD_HANG)  # it refuses at once, never waiting on its budget
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)
    assert fake.requests == []
    (gap,) = read_gaps(hook_env["SNAPSHOTD_GAPS"])
    assert gap["reason"] == "socket-untrusted"
    assert gap["worktree"] == "/srv/proj" and gap["tool_use_id"] == "toolu_test_1"


def test_a_squatted_directory_without_a_socket_is_untrusted_not_unavailable(short_dir):
    os.chown(short_dir, NOBODY, NOBODY)
    with pytest.raises(SocketUntrusted):
        Client(short_dir / "absent.sock").ping()


def test_client_refuses_a_socket_file_owned_by_another_user(hook_env, short_dir):
    with FakeDaemon(short_dir / "d.sock", ok()) as fake:
        os.chown(short_dir / "d.sock", NOBODY, NOBODY)
        with pytest.raises(SocketUntrusted, match="owned by uid 65534"):
            Client(short_dir / "d.sock").ping()
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
        assert fake.requests == []
    assert_silent_success(proc)
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert gap["reason"] == "socket-untrusted"


def test_client_refuses_a_symlinked_directory_owned_by_another_user(short_dir):
    real = short_dir / "real"
    real.mkdir(mode=0o700)
    link = short_dir / "link"
    link.symlink_to(real)
    os.lchown(link, NOBODY, NOBODY)
    with FakeDaemon(real / "d.sock", ok()) as fake:
        with pytest.raises(SocketUntrusted, match="symlink"):
            Client(link / "d.sock").ping()
        assert fake.requests == []
    assert socket_problem(str(real / "d.sock")) is None


FOREIGN_LISTENER = textwrap.dedent("""
    import os, socket, sys
    from snapshotd_client.protocol import encode_frame, read_frame
    path = sys.argv[1]
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)                 # as root, in root's private directory
    os.setgid(65534); os.setuid(65534)
    s.listen(4)                  # the peer credentials are taken here: nobody's
    print("ready", flush=True)
    while True:
        conn, _ = s.accept()
        req = read_frame(conn)
        if req is not None:
            conn.sendall(encode_frame({"id": req["id"], "ok": True, "result": {"seq": 1}}))
        conn.close()
""")


def test_client_refuses_a_listener_running_as_another_user(hook_env, short_dir):
    # The listener answers "ok" to everything: a client that trusted it would see a checkpoint.
    sock = short_dir / "d.sock"
    proc = subprocess.Popen([sys.executable, "-c", FOREIGN_LISTENER, str(sock)],
                            stdout=subprocess.PIPE, env=hook_env)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        # The socket file and its directory are root's: only SO_PEERCRED can tell.
        assert os.stat(sock).st_uid == 0 and socket_problem(str(sock)) is None
        with pytest.raises(SocketUntrusted, match="runs as uid 65534"):
            Client(sock).ping()
        hook, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert_silent_success(hook)
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert gap["reason"] == "socket-untrusted" and "uid 65534" in gap["detail"]


def test_socket_dir_problem_rule(short_dir):
    assert socket_dir_problem(str(short_dir)) is None
    os.chmod(short_dir, 0o750)
    assert socket_dir_problem(str(short_dir)) is None  # readable by group: nobody can plant
    os.chmod(short_dir, 0o770)
    assert "written by group or others" in socket_dir_problem(str(short_dir))
    os.chmod(short_dir, 0o700)
    os.chown(short_dir, NOBODY, NOBODY)
    assert "owned by uid 65534" in socket_dir_problem(str(short_dir))
    (short_dir / "f").touch()
    assert "not a directory" in socket_dir_problem(str(short_dir / "f"))


@pytest.mark.parametrize("how", ["other-owner", "world-writable"])
def test_daemon_refuses_to_serve_in_a_squatted_directory(sd_env: Env, how):
    squatted = sd_env.sockdir / "squatted"
    squatted.mkdir(mode=0o700)
    _squat(squatted, how)
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "serve"],  # it exits: refuses
                          env=sd_env.environ(SNAPSHOTD_SOCKET=str(squatted / "s.sock")),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert f"refusing to serve in {squatted}" in proc.stderr
    assert "remove it" in proc.stderr and "SNAPSHOTD_SOCKET" in proc.stderr
    assert not (squatted / "s.sock").exists()
    # The directory is left as the squatter made it: nothing was chmod'ed into "ours".
    st = squatted.stat()
    assert (st.st_uid, st.st_mode & 0o777) == (
        (NOBODY, 0o700) if how == "other-owner" else (0, 0o777))


def test_a_socket_path_that_cannot_be_examined_is_not_trusted(short_dir):
    loop = short_dir / "loop"
    loop.symlink_to(loop)  # ELOOP on every stat through it
    problem = socket_problem(str(loop / "d.sock"))
    assert problem is not None and "cannot be examined" in problem
    with pytest.raises(SocketUntrusted):
        Client(loop / "d.sock").ping()
