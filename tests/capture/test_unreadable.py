"""Unreadable files and directories: skipped and listed (reason ``unreadable``), never failing the
whole capture and never silently dropped from the checkpoint (a captured one keeps its last
captured content).

root reads everything, so the daemon and its client run as ``nobody`` here: the test's own
interpreter imports everything first, then drops to uid 65534 (the way
tests/client/test_client_trust.py runs a listener as another user), because the interpreter's own
files may not be readable by ``nobody``. Skipped when not root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Env, git

NOBODY = 65534

pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run as nobody"),
              pytest.mark.one_ledger("unreadable files in a capture")]

# Imports every module first (after the drop, the interpreter's own library may be unreadable).
_DROP = textwrap.dedent("""
    import importlib, json, os, pkgutil, sys
    import snapshotd, snapshotd_client
    for _m in pkgutil.walk_packages(snapshotd.__path__, "snapshotd."):
        importlib.import_module(_m.name)
    from snapshotd_client import Client, SnapshotdError
    os.setgroups([]); os.setgid(65534); os.setuid(65534)
""")

DAEMON = _DROP + textwrap.dedent("""
    from snapshotd.cli import main
    sys.argv = ["snapshotd", "serve"]
    main()
""")

# Runs one client call as nobody: argv[1] is the socket, argv[2] a JSON [method, args, kwargs].
# The client needs only ``snapshotd_client`` (stdlib and msgpack): importing every daemon
# module first, as the daemon must, made each call cost a second of CPU.
CLIENT = textwrap.dedent("""
    import json, os, sys
    from snapshotd_client import Client, SnapshotdError
    from snapshotd_client.protocol import preload_codec
    preload_codec()  # msgpack is imported on first use, and its modules may be unreadable
    os.setgroups([]); os.setgid(65534); os.setuid(65534)
    method, args, kwargs = json.loads(sys.argv[2])
    try:
        with Client(sys.argv[1], timeout=60) as c:
            out = {"ok": getattr(c, method)(*args, **kwargs)}
    except SnapshotdError as exc:
        out = {"error": exc.code, "message": exc.message}
    print(json.dumps(out))
""")


class NobodyDaemon:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.proc: subprocess.Popen | None = None

    def start(self) -> NobodyDaemon:
        log = open(self.env.root / "daemon.log", "ab")
        self.proc = subprocess.Popen([sys.executable, "-c", DAEMON], env=self.env.environ(),
                                     stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, (self.env.root / "daemon.log").read_text()
            if self.call("ping").get("ok"):
                return self
            time.sleep(0.1)
        self.stop()  # never answered: not left running after the test
        raise RuntimeError((self.env.root / "daemon.log").read_text())

    def call(self, method: str, *args: object, **kwargs: object) -> dict:
        proc = subprocess.run([sys.executable, "-c", CLIENT, str(self.env.socket),
                               json.dumps([method, args, kwargs])],
                              env=self.env.environ(), capture_output=True, timeout=120)
        if proc.returncode != 0 or not proc.stdout.strip():
            return {"error": "client", "message": proc.stderr.decode()[-2000:]}
        return json.loads(proc.stdout)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=40)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def nobody_env() -> Iterator[Env]:
    base = Path(tempfile.mkdtemp(prefix="sd-nobody-", dir="/tmp"))
    os.chmod(base, 0o755)
    env = Env(base)
    for d in (env.home.parent, env.sockdir, base / "config", base / "userhome"):
        d.mkdir(exist_ok=True)
        os.chown(d, NOBODY, NOBODY)
    os.chmod(env.sockdir, 0o700)
    # libgit2 reads $HOME/.gitconfig and fails when it cannot even look.
    env.vars.update(HOME=str(base / "userhome"), SNAPSHOTD_SETTLE_MS="60000",
                    SNAPSHOTD_MAX_WAIT_MS="120000")
    yield env
    shutil.rmtree(base, ignore_errors=True)
    shutil.rmtree(env.sockdir, ignore_errors=True)


def as_nobody(path: Path) -> None:
    for dirpath, dirnames, filenames in os.walk(path):
        os.chown(dirpath, NOBODY, NOBODY)
        for name in dirnames + filenames:
            os.lchown(os.path.join(dirpath, name), NOBODY, NOBODY)


def tree_paths(env: Env, commit: str) -> dict[str, str]:
    out = git(env.root, "--git-dir", str(env.home / "store.git"), "ls-tree", "-r", commit)
    return {line.split("\t", 1)[1]: line.split()[2] for line in out.splitlines()}


def unreadable(reply: dict) -> set[str]:
    return {s["path"] for s in reply["skipped"] if s["reason"] == "unreadable"}


def test_unreadable_files_and_directories_are_listed_and_never_dropped(nobody_env: Env) -> None:
    env = nobody_env
    wt = env.root / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("a, later unreadable\n")
    (wt / "b.txt").write_text("b\n")
    (wt / "sub").mkdir()
    (wt / "sub" / "s.txt").write_text("in a directory, later unreadable\n")
    as_nobody(wt)
    d = NobodyDaemon(env).start()
    try:
        run = {"run_id": "unread", "node_id": "n"}
        first = d.call("snapshot", str(wt), **run)
        assert "ok" in first, first
        base = tree_paths(env, first["ok"]["commit"])
        os.chmod(wt / "a.txt", 0)
        (wt / "b.txt").write_text("b changed\n")
        os.chmod(wt / "sub", 0)
        # The watcher's capture: the unreadable file keeps its content, the change is in.
        fast = d.call("snapshot", str(wt), **run, tool_use_id="fast")
        assert "ok" in fast, fast
        replies = []
        for i in range(1):  # a full scan: a fresh daemon's first capture
            d.stop()
            d.start()
            r = d.call("snapshot", str(wt), **run, tool_use_id=f"t{i}")
            assert "ok" in r, r
            assert r["ok"]["scan"] == "full", r
            replies.append(r["ok"])
        listing = d.call("list", "unread")["ok"]
    finally:
        d.stop()
        os.chmod(wt / "sub", 0o755)
    for r in replies:
        assert {"a.txt", "sub"} <= unreadable(r), (r["scan"], r["skipped"])
    kept = tree_paths(env, fast["ok"]["commit"])
    assert kept["a.txt"] == base["a.txt"] and kept["sub/s.txt"] == base["sub/s.txt"]
    assert kept["b.txt"] != base["b.txt"]
    last = tree_paths(env, replies[-1]["commit"])
    assert last["a.txt"] == base["a.txt"]  # kept as last captured
    assert last["sub/s.txt"] == base["sub/s.txt"]  # the directory did not vanish
    assert last["b.txt"] != base["b.txt"]  # the readable change is in
    # The checkpoint row keeps its skipped list (``snapshotd snapshots`` shows it).
    [cp] = [cp for cp in listing["checkpoints"] if cp.get("tool_use_id") == "fast"]
    assert "a.txt" in {s["path"] for s in cp["skipped"] if s["reason"] == "unreadable"}


def test_a_never_captured_unreadable_directory_is_listed_by_the_full_scan(
        nobody_env: Env) -> None:
    """libgit2's diff does not report a directory it cannot list that holds nothing captured:
    the full scan still lists it (as the fast path's crawl does), and an ignored one not."""
    env = nobody_env
    wt = env.root / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("a\n")
    (wt / ".gitignore").write_text("cache/\n")
    for name in ("locked", "cache", "deep/locked"):
        (wt / name).mkdir(parents=True)
        (wt / name / "f.txt").write_text("never captured\n")
    as_nobody(wt)
    for name in ("locked", "cache", "deep/locked"):
        os.chmod(wt / name, 0)
    d = NobodyDaemon(env).start()
    try:
        r = d.call("snapshot", str(wt), run_id="unread", node_id="n")
    finally:
        d.stop()
        for name in ("locked", "cache", "deep/locked"):
            os.chmod(wt / name, 0o755)
    assert "ok" in r, r
    assert r["ok"]["scan"] == "full", r
    assert unreadable(r["ok"]) == {"locked", "deep/locked"}, r["ok"]["skipped"]
    assert set(tree_paths(env, r["ok"]["commit"])) == {".gitignore", "a.txt"}


def test_a_directory_made_readable_again_is_watched_and_its_new_files_captured(
        nobody_env: Env) -> None:
    """A directory that could not be watched when the watch was set up (unreadable after a
    restart) becomes readable: its chmod is the only event, and files made in it later must
    still reach the next fast-path checkpoint (they were silently missing from it)."""
    env = nobody_env
    wt = env.root / "wt"
    (wt / "d").mkdir(parents=True)
    (wt / "d" / "a.txt").write_text("a\n")
    (wt / "top.txt").write_text("top\n")
    as_nobody(wt)
    run = {"run_id": "reread", "node_id": "n"}
    d = NobodyDaemon(env).start()
    try:
        assert "ok" in d.call("attempt_begin", "reread", "n", str(wt))
        assert "ok" in d.call("snapshot", str(wt), **run)
        os.chmod(wt / "d", 0)
        d.stop()
        d.start()  # the watch is set up again while d cannot be entered
        first = d.call("snapshot", str(wt), **run, tool_use_id="locked")
        assert "ok" in first, first
        os.chmod(wt / "d", 0o755)
        (wt / "d" / "new").mkdir()
        (wt / "d" / "new" / "f.txt").write_text("made after the chmod\n")
        (wt / "d" / "b.txt").write_text("b\n")
        as_nobody(wt)
        (wt / "top.txt").write_text("top changed\n")
        last = d.call("snapshot", str(wt), **run, tool_use_id="readable")
    finally:
        d.stop()
        os.chmod(wt / "d", 0o755)
    assert "ok" in last, last
    paths = tree_paths(env, last["ok"]["commit"])
    assert {"d/a.txt", "d/b.txt", "d/new/f.txt", "top.txt"} <= set(paths), \
        (last["ok"]["scan"], sorted(paths))


def test_a_deletion_hidden_by_an_unreadable_directory_is_seen_once_it_is_readable(
        nobody_env: Env) -> None:
    """A file deleted just before its directory became unreadable: the capture then keeps it
    (it cannot tell), but once the directory is readable again the next capture must drop it,
    though the deletion's own event was spent on the capture that could not see it."""
    env = nobody_env
    wt = env.root / "wt"
    (wt / "d" / "x").mkdir(parents=True)
    (wt / "d" / "x" / "gone.txt").write_text("deleted while hidden\n")
    (wt / "top.txt").write_text("top\n")
    as_nobody(wt)
    run = {"run_id": "hidden", "node_id": "n"}
    d = NobodyDaemon(env).start()
    try:
        assert "ok" in d.call("attempt_begin", "hidden", "n", str(wt))
        assert "ok" in d.call("snapshot", str(wt), **run)
        (wt / "d" / "x" / "gone.txt").unlink()
        os.chmod(wt / "d", 0)
        hidden = d.call("snapshot", str(wt), **run, tool_use_id="hidden")
        os.chmod(wt / "d", 0o755)
        (wt / "top.txt").write_text("top changed\n")
        last = d.call("snapshot", str(wt), **run, tool_use_id="readable")
    finally:
        d.stop()
        os.chmod(wt / "d", 0o755)
    assert "ok" in hidden and "ok" in last, (hidden, last)
    assert "d/x/gone.txt" in tree_paths(env, hidden["ok"]["commit"])  # kept: it cannot tell
    paths = tree_paths(env, last["ok"]["commit"])
    assert "d/x/gone.txt" not in paths, (last["ok"]["scan"], sorted(paths))
