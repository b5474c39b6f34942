"""Bad input gets a clear error, the daemon keeps serving; other users are refused."""

from __future__ import annotations

import os
import pwd
import struct
import subprocess
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, make_git_worktree
from tests.support.helpers import connect_raw
from tests.support.helpers import recv_frame as recv
from tests.support.helpers import send_frame as send

pytestmark = pytest.mark.one_ledger("bad requests and foreign users")


def assert_alive(daemon: Daemon) -> None:
    with daemon.client(timeout=5) as c:
        assert c.ping()["pid"] == daemon.proc.pid


def test_garbage_bytes_close_the_connection(sd_env: Env, daemon: Daemon) -> None:
    s = connect_raw(sd_env.socket)
    s.sendall(struct.pack(">I", 5) + b"\xc1\xc1\xc1\xc1\xc1")
    reply = recv(s)
    assert reply is not None and reply["ok"] is False and reply["error"]["code"] == "bad-frame"
    assert recv(s) is None
    assert_alive(daemon)


def test_oversized_frame_is_refused(sd_env: Env, daemon: Daemon) -> None:
    s = connect_raw(sd_env.socket)
    s.sendall(struct.pack(">I", (1 << 20) + 1))
    reply = recv(s)
    assert reply is not None and reply["error"]["code"] == "frame-too-large"
    assert recv(s) is None
    assert_alive(daemon)


def test_truncated_frame_then_close(sd_env: Env, daemon: Daemon) -> None:
    s = connect_raw(sd_env.socket)
    s.sendall(struct.pack(">I", 100) + b"\x81")
    s.close()
    assert_alive(daemon)


@pytest.mark.parametrize("request_, code", [
    ({"v": 1, "op": "frobnicate", "id": 1}, "unknown-op"),
    ({"v": 2, "op": "ping", "id": 1}, "unsupported-version"),
    ({"v": 1, "op": "ping"}, "bad-request"),
    ([1, 2, 3], "bad-frame"),
    ({"v": 1, "op": "snapshot", "id": 1, "cwd": 5}, "bad-request"),
    ({"v": 1, "op": "snapshot", "id": 1, "cwd": "relative/dir", "run_id": "r", "node_id": "n"},
     "bad-request"),
    ({"v": 1, "op": "snapshot", "id": 1, "cwd": "/tmp", "run_id": "r", "node_id": "n",
      "tier": "one"}, "bad-request"),
    ({"v": 1, "op": "snapshot", "id": 1, "cwd": "/tmp", "run_id": "r"}, "bad-request"),
])
def test_bad_requests_get_error_replies(sd_env: Env, daemon: Daemon, request_: object,
                                        code: str) -> None:
    s = connect_raw(sd_env.socket)
    send(s, request_)
    reply = recv(s)
    assert reply is not None and reply["ok"] is False and reply["error"]["code"] == code
    assert reply["error"]["message"]
    assert_alive(daemon)


@pytest.mark.parametrize("bad_id", ["../x", "a/b", "x\0y", "x" * 10_000, "", "..", "tab\there"])
def test_invalid_ids_are_rejected_and_nothing_is_created(sd_env: Env, daemon: Daemon,
                                                         tmp_path: Path, bad_id: str) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "f").write_text("x")
    s = connect_raw(sd_env.socket)
    send(s, {"v": 1, "op": "snapshot", "id": 7, "cwd": str(wt), "run_id": bad_id,
             "node_id": "n"})
    reply = recv(s)
    assert reply is not None and reply["id"] == 7 and reply["error"]["code"] == "bad-id"
    refs = subprocess.run(["git", "--git-dir", str(sd_env.home / "store.git"), "for-each-ref"],
                          capture_output=True, text=True).stdout
    assert refs == ""
    assert_alive(daemon)


def test_many_requests_on_one_connection(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    s = connect_raw(sd_env.socket)
    for i in range(50):
        send(s, {"v": 1, "op": "ping", "id": i})
        reply = recv(s)
        assert reply is not None and reply["id"] == i and reply["ok"]


SYSTEM_PYTHON = Path("/usr/bin/python3")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid (nobody)")
@pytest.mark.skipif(not SYSTEM_PYTHON.exists(),
                    reason="needs a Python that user nobody can execute (/usr/bin/python3)")
def test_other_uid_is_refused_by_peer_credentials(sd_env: Env, daemon: Daemon) -> None:
    nobody = pwd.getpwnam("nobody")
    # Open the permissions so that only the SO_PEERCRED check stands in the way.
    os.chmod(sd_env.sockdir, 0o777)
    os.chmod(sd_env.socket, 0o777)
    # The refusal comes before any request is read, so the probe sends nothing (data left
    # unread would turn the server's close into a reset). Plain stdlib on the system Python: the reply frame is read raw and searched for the code.
    code = (
        "import socket,struct\n"
        f"s=socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect({str(sd_env.socket)!r})\n"
        "body=bytes([0x83,0xa1,0x76,1,0xa2,0x6f,0x70,0xa4])+b'ping'+bytes([0xa2,0x69,0x64,1])\n"
        "import sys\n"
        "if sys.argv[1:] == ['send']: s.sendall(struct.pack('>I',len(body))+body)\n"
        "data=b''\n"
        "while len(data) < 4 or len(data) < 4 + struct.unpack('>I', data[:4])[0]:\n"
        "    c=s.recv(4096)\n"
        "    if not c: break\n"
        "    data+=c\n"
        "print('forbidden' if b'forbidden' in data else ('pid' if b'pid' in data else 'closed'))\n"
    )
    proc = subprocess.run([str(SYSTEM_PYTHON), "-I", "-c", code], capture_output=True,
                          text=True, user=nobody.pw_uid, group=nobody.pw_gid, timeout=30,
                          cwd="/", env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "forbidden"
    # The same bytes from our own uid are served: only the uid made the difference.
    own = subprocess.run([str(SYSTEM_PYTHON), "-I", "-c", code, "send"], capture_output=True,
                         text=True, timeout=30)
    assert own.stdout.strip() == "pid"
    os.chmod(sd_env.sockdir, 0o700)  # our own Client refuses a world-writable socket directory
    assert_alive(daemon)
