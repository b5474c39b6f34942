"""A FIFO planted where git or libgit2 reads a worktree (a ``.gitignore`` in any directory, a
``.gitattributes``, the repository's ``info/attributes``) never stops the daemon. Both open
those files with a blocking ``open``; libgit2 does it holding Python's interpreter lock, so
before the guard a FIFO ``.gitignore`` froze the whole daemon (every worktree, the socket) at
its first full scan, and one read by git (the first capture's ``git add -A``) held that
capture and its worktree for good. The guards (``snapshotd.daemon.fifo_guard``) release such waits;
the file reads as empty, as git takes a rules file it cannot read for an absent one.

The daemon runs as a real subprocess; the oracle for the trees is the git CLI."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from snapshotd.daemon import fifo_guard
from tests.conftest import Env, MakeDaemon, git, make_git_worktree
from tests.support.helpers import in_time, release_fifo, wait_for

pytestmark = pytest.mark.skipif(fifo_guard.open_calls() is None,
                                reason="the FIFO guard knows no open calls on this machine")

# Where the FIFO is planted, and whether the worktree is a git repository.
PLANTED = [(".gitignore", False), ("sub/.gitignore", True), ("sub/.gitattributes", False),
           (".git/info/attributes", True)]


def blocked_reader(path: Path) -> tuple[threading.Thread, list[bytes], int]:
    """A thread of this process blocked opening FIFO ``path`` to read: (thread, what it read,
    its native id)."""
    got: list[bytes] = []
    ids: list[int] = []

    def read() -> None:
        ids.append(threading.get_native_id())
        with open(path, "rb") as f:
            got.append(f.read())

    thread = threading.Thread(target=read, daemon=True)
    thread.start()
    wait_for(lambda: ids and fifo_guard.waiters([(os.getpid(), ids[0])]), timeout=10,
             what="the reader waiting on the FIFO")
    return thread, got, ids[0]


def test_a_thread_and_a_child_waiting_on_a_fifo_are_found_and_released(tmp_path: Path) -> None:
    fifo = tmp_path / ".gitignore"
    os.mkfifo(fifo)
    thread, got, tid = blocked_reader(fifo)
    [waiter] = fifo_guard.waiters([(os.getpid(), tid)])
    assert (waiter.path, waiter.for_writing) == (str(fifo), False)
    assert fifo_guard.release(waiter)
    thread.join(timeout=10)
    assert got == [b""]  # end of file: nothing was written into it

    # A writer waiting for a reader, and a child process (relative path, its own cwd).
    ids: list[int] = []
    opened: list[bool] = []

    def write() -> None:
        ids.append(threading.get_native_id())
        with open(fifo, "wb"):
            opened.append(True)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    wait_for(lambda: ids and fifo_guard.waiters([(os.getpid(), ids[0])]), timeout=10,
             what="the writer waiting on the FIFO")
    [waiter] = fifo_guard.waiters([(os.getpid(), ids[0])])
    assert waiter.for_writing and fifo_guard.release(waiter)
    writer.join(timeout=10)
    assert opened == [True]

    child = subprocess.Popen(["cat", ".gitignore"], cwd=tmp_path, stdout=subprocess.PIPE)
    try:
        wait_for(lambda: fifo_guard.waiters(fifo_guard.descendant_tasks(os.getpid())),
                 timeout=10, what="cat waiting on the FIFO")
        [waiter] = fifo_guard.waiters(fifo_guard.descendant_tasks(os.getpid()))
        assert (waiter.pid, waiter.path) == (child.pid, str(fifo))
        assert fifo_guard.release(waiter)
        assert child.wait(timeout=10) == 0
    finally:
        child.kill()
        child.wait()


def test_a_fifo_swapped_for_a_file_is_not_opened(tmp_path: Path) -> None:
    """The release opens only a FIFO: a name that is a regular file by then is left alone."""
    fifo = tmp_path / "x"
    os.mkfifo(fifo)
    thread, got, tid = blocked_reader(fifo)
    [waiter] = fifo_guard.waiters([(os.getpid(), tid)])
    plain = tmp_path / "plain"
    plain.write_text("kept\n")
    assert not fifo_guard.release(fifo_guard.Waiter(waiter.pid, waiter.tid, str(plain), False))
    assert plain.read_text() == "kept\n" and thread.is_alive()
    assert fifo_guard.release(waiter)
    thread.join(timeout=10)


@pytest.mark.parametrize(("planted", "repo"), PLANTED)
def test_a_fifo_where_git_reads_rules_never_stops_the_daemon(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon, planted: str, repo: bool) -> None:
    wt = tmp_path / "wt"
    (wt / "sub").mkdir(parents=True)
    (wt / "a.txt").write_text("a\n")
    (wt / "sub" / "b.txt").write_text("b\n")
    if repo:
        make_git_worktree(wt)
        git(wt, "add", "-A")
        git(wt, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one")
    target = wt / planted
    target.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(target)
    daemon = make_daemon(sd_env)
    store = ["--git-dir", str(sd_env.home / "store.git")]
    try:
        with daemon.client(timeout=60) as c:
            first = in_time(lambda: c.snapshot(str(wt), run_id="g", node_id="n"), target, 60)
            assert git(wt, *store, "ls-tree", "-r", "--name-only", first["tree"]).split() == \
                ["a.txt", "sub/b.txt"]
            if not planted.startswith(".git/"):
                assert {"path": planted, "reason": "special", "kind": "fifo"} in first["skipped"]
            (wt / "sub" / "c.txt").write_text("c\n")
            second = in_time(lambda: c.snapshot(str(wt), run_id="g", node_id="n"), target, 60)
            assert git(wt, *store, "show", f"{second['tree']}:sub/c.txt") == "c\n"
            guard = c.status()["fifo_guard"]
        assert guard["off"] == {}, guard
        if planted != ".git/info/attributes":  # the seed gives up there: nobody waits on it
            assert guard["releases"] >= 1 and guard["last"]["path"] == str(target), guard
    finally:
        release_fifo(target)
    assert daemon.stop() == 0  # the stop's own captures met the FIFO too, and went on


def test_the_guard_process_ends_with_the_daemon(sd_env: Env, make_daemon: MakeDaemon) -> None:
    daemon = make_daemon(sd_env)
    pid = daemon.proc.pid
    [guard] = wait_for(lambda: guard_processes(pid), timeout=20, what="the guard process")
    assert not ended_process(guard)
    daemon.kill9()

    assert wait_for(lambda: ended_process(guard), timeout=10,
                    what="the guard process to end with the daemon")


def guard_processes(pid: int) -> list[int]:
    """The guard processes among process ``pid``'s descendants."""
    found = []
    for child in fifo_guard.descendant_tasks(pid):
        try:
            cmdline = Path(f"/proc/{child[0]}/cmdline").read_bytes()
        except OSError:
            continue
        if b"snapshotd.daemon.fifo_guard" in cmdline:
            found.append(child[0])
    return found


def ended_process(pid: int) -> bool:
    """Whether process ``pid`` is gone, or a zombie its new parent has not reaped yet."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_guarding_releases_this_process_only_while_the_block_runs(tmp_path: Path) -> None:
    fifo = tmp_path / ".gitignore"
    os.mkfifo(fifo)
    with fifo_guard.guarding() as guards:
        thread, got, _tid = blocked_reader(fifo)
        thread.join(timeout=20)
        assert got == [b""]
        # Counted once its report is read, just after the release.
        assert wait_for(lambda: guards.summary()["releases"] == 1, timeout=10,
                        what="the release counted")
        assert guard_processes(os.getpid())
    assert not guard_processes(os.getpid())  # ended with the block, not left to the process
    thread, got, _tid = blocked_reader(fifo)
    thread.join(timeout=2 * fifo_guard.CHILDREN_INTERVAL_S)
    assert thread.is_alive()  # nothing watches now
    assert guards.summary()["releases"] == 1
    release_fifo(fifo)
    thread.join(timeout=10)


def test_a_fifo_where_git_reads_rules_never_stops_a_command_run_without_a_daemon(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """Without a daemon a command runs the op itself (``backend.run_locally``); restore and a
    diff against the worktree scan the tree there, so the guards must watch that process."""
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("one\n")
    daemon = make_daemon(sd_env)
    with daemon.client(timeout=60) as c:
        first = c.snapshot(str(wt), run_id="g", node_id="n")["seq"]
        (wt / "a.txt").write_text("two\n")
        c.snapshot(str(wt), run_id="g", node_id="n")
    assert daemon.stop() == 0
    target = wt / ".gitignore"
    os.mkfifo(target)

    def command(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=sd_env.environ(),
                              capture_output=True, text=True, timeout=120)

    try:
        diff = in_time(lambda: command("diff", "g", "--node", "n", "--seq", str(first),
                                       "--worktree"), target, 60)
        assert diff.returncode == 0, diff.stderr
        assert "a.txt" in diff.stdout
        restored = in_time(lambda: command("restore", "g", "--node", "n", "--seq", str(first),
                                           "--force"),
                           target, 60)
        assert restored.returncode == 0, restored.stderr
        assert (wt / "a.txt").read_text() == "one\n"
        assert stat.S_ISFIFO(os.lstat(target).st_mode)  # an uncaptured file: never touched
        assert "released a wait on the FIFO" in diff.stderr + restored.stderr
    finally:
        release_fifo(target)


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node takes root")
def test_a_git_child_reading_a_device_node_in_the_tree_is_stopped(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """A device node named ``.gitattributes`` (``mknod``, by a root agent) is read by git line
    by line without end: the first capture's ``git add -A`` of a plain directory grew to
    13 GB in 26 s. The children guard stops a child that holds a device open from outside
    ``/dev``; the capture goes on without git (libgit2 reads no more than the stat size, 0)."""
    wt = tmp_path / "wt"
    (wt / "sub").mkdir(parents=True)
    (wt / "a.txt").write_text("a\n")
    (wt / "sub" / "b.txt").write_text("b\n")
    os.mknod(wt / ".gitattributes", 0o600 | stat.S_IFCHR, os.makedev(1, 9))  # urandom
    daemon = make_daemon(sd_env)
    store = ["--git-dir", str(sd_env.home / "store.git")]
    with daemon.client(timeout=60) as c:
        first = c.snapshot(str(wt), run_id="g", node_id="n")
        guard = c.status()["fifo_guard"]
    assert git(wt, *store, "ls-tree", "-r", "--name-only", first["tree"]).split() == \
        ["a.txt", "sub/b.txt"]
    assert {"path": ".gitattributes", "reason": "special", "kind": "char-device"} in \
        first["skipped"]
    assert guard["stopped"] >= 1 and guard["last"]["path"] == str(wt / ".gitattributes"), guard
    assert daemon.stop() == 0
