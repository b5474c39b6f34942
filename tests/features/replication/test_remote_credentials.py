"""A password in the remote URL never reaches a command line (docs/secrets.md, "Remote
credentials"): another local user (``nobody``) looking at ``ps`` and ``/proc/*/cmdline`` while
the daemon's git talks to an HTTP remote sees no password; a timed-out git leaves no process
behind; and the credentials still work (the push lands, the git CLI on the server says so).

The remote is a real ``git http-backend`` behind basic auth on 127.0.0.1 (tests/support/git_http).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from snapshotd.features.replication.gitremote import ls_remote, push_refs
from tests.conftest import git
from tests.features.replication.test_replication import (
    Host,
    populate,
    ref_of,
    wait_replicated,
)
from tests.support.git_http import GitHttpServer, StalledServer
from tests.support.helpers import wait_for

PASSWORD = "Tr0ub4dor-and-3-horses"
USER = "alice"

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runuser -u nobody needs root")


def as_nobody(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["runuser", "-u", "nobody", "--", *argv], capture_output=True,
                          timeout=60)


def seen_by_nobody() -> bytes:
    """Every command line another local user can read: ``ps`` (unlimited width) and the raw
    ``/proc/*/cmdline`` files."""
    ps = as_nobody("ps", "-eww", "-o", "pid=,ppid=,args=").stdout
    raw = as_nobody("sh", "-c", "cat /proc/[0-9]*/cmdline 2>/dev/null").stdout
    return ps + b"\n" + raw.replace(b"\0", b" ")


def leaks(seen: bytes) -> list[str]:
    """The lines of ``seen`` holding the password, shown with it masked."""
    return [line.replace(PASSWORD, "<PASSWORD>") for line in seen.decode(errors="replace")
            .splitlines() if PASSWORD in line]


def processes_naming(port: int) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose argv names 127.0.0.1:<port>."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        text = cmdline.replace(b"\0", b" ").decode(errors="replace")
        if f"127.0.0.1:{port}" in text and "pytest" not in text:
            found.append((int(entry), text))
    return found


@pytest.fixture
def http_remote(tmp_path: Path):
    root = tmp_path / "srv"
    root.mkdir()
    subprocess.run(["git", "init", "-q", "--bare", str(root / "remote.git")], check=True)
    server = GitHttpServer(root, USER, PASSWORD, hold=True)
    yield server, root / "remote.git"
    server.close()


def test_password_is_in_no_argv_while_the_daemon_replicates(http_remote, tmp_path: Path) -> None:
    server, bare = http_remote
    a = Host(tmp_path / "hostA", server.url("remote.git", f"{USER}:{PASSWORD}"))  # type: ignore[arg-type]
    a.start()
    wt = tmp_path / "wtA"
    populate(wt, 0)
    assert a.snap(wt, "toolu_0")["seq"] == 0
    # An authorised request is held at the gate: git and its git-remote-http are running now.
    running = wait_for(lambda: processes_naming(server.port), timeout=30,
                       what="a git process naming the remote")
    seen = seen_by_nobody()
    assert f"127.0.0.1:{server.port}".encode() in seen  # nobody does see the processes...
    assert PASSWORD.encode() not in seen, leaks(seen)  # ...but not the password
    for pid, _text in running:
        # Where the password is (the git child's environment), nobody cannot read.
        assert as_nobody("cat", f"/proc/{pid}/environ").returncode != 0
    server.gate.set()
    wait_replicated(a, bare, ref_of(), timeout=60)
    # The push really landed: the server's repository holds the commit, whole (git checks).
    assert git(bare, "rev-parse", ref_of()).strip() == git(a.store, "rev-parse", ref_of()).strip()
    subprocess.run(["git", "-C", str(bare), "fsck", "--strict"], check=True, capture_output=True)
    assert server.authorised >= 2
    status = a.status()
    assert PASSWORD not in str(status) and status["last_error"] is None


def test_ls_remote_and_push_authenticate_without_argv(http_remote, tmp_path: Path) -> None:
    server, bare = http_remote
    server.gate.set()
    store = tmp_path / "store.git"
    subprocess.run(["git", "init", "-q", "--bare", str(store)], check=True)
    blob = subprocess.run(["git", "-C", str(store), "hash-object", "-w", "--stdin"],
                          input=b"hello\n", capture_output=True, check=True).stdout.decode().strip()
    tree = subprocess.run(["git", "-C", str(store), "mktree"],
                          input=f"100644 blob {blob}\thello.txt\n".encode(), capture_output=True,
                          check=True).stdout.decode().strip()
    commit = git(store, "-c", "user.name=t", "-c", "user.email=t@t.invalid", "commit-tree",
                 tree, "-m", "one").strip()
    url = server.url("remote.git", f"{USER}:{PASSWORD.replace('-', '%2D')}")
    ok, err = push_refs(store, url, {"refs/snapshotd/runs/r/n/0/1": commit})
    assert err is None and ok == ["refs/snapshotd/runs/r/n/0/1"]
    assert git(bare, "rev-parse", "refs/snapshotd/runs/r/n/0/1").strip() == commit
    assert ls_remote(url, "refs/snapshotd/*") == {"refs/snapshotd/runs/r/n/0/1": commit}
    # A wrong password is refused, and the error names the remote without any password.
    ok, err = push_refs(store, server.url("remote.git", f"{USER}:wrong-{PASSWORD}"),
                        {"refs/snapshotd/runs/r/n/0/2": commit})
    assert ok == [] and err and PASSWORD not in err


def test_a_timed_out_git_leaves_no_process_behind(tmp_path: Path) -> None:
    stalled = StalledServer()
    try:
        store = tmp_path / "store.git"
        subprocess.run(["git", "init", "-q", "--bare", str(store)], check=True)
        url = f"http://{USER}:{PASSWORD}@127.0.0.1:{stalled.port}/remote.git"
        ok, err = push_refs(store, url, {"refs/snapshotd/runs/r/n/0/1": "0" * 40}, timeout=2)
        assert ok == [] and err and "timed out" in err and PASSWORD not in err
        # Neither git nor its git-remote-http (which would be re-parented to init) survives.
        wait_for(lambda: not processes_naming(stalled.port), timeout=15,
                 what="every process talking to the stalled remote to be gone")
    finally:
        stalled.close()
