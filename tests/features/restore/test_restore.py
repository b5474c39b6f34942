"""Restore end to end: a real daemon (or the CLI alone on the home), real git worktrees, the git
CLI reading the store as the oracle of what a checkpoint holds."""

from __future__ import annotations

import json
import os
import pty
import select
import shlex
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Daemon, Env, MakeDaemon, git, make_git_worktree

# -- helpers -------------------------------------------------------------------------------------


def cli(env: Env, *args: str, check: bool = False) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120)
    if check and proc.returncode != 0:
        raise AssertionError(f"snapshotd {' '.join(args)} exited {proc.returncode}: "
                             f"{proc.stderr}")
    return proc


def store_git(env: Env, *args: str) -> str:
    return git(env.home, "--git-dir", str(env.home / "store.git"), *args)


def checkpoint_state(env: Env, commit: str) -> dict[str, tuple]:
    """What the git CLI says a checkpoint holds: path -> ("file", bytes, exec) | ("link", target)."""
    out = subprocess.run(["git", "--git-dir", str(env.home / "store.git"), "ls-tree", "-r", "-z",
                          commit], capture_output=True, check=True).stdout
    state: dict[str, tuple] = {}
    for record in out.split(b"\0"):
        if not record:
            continue
        meta, path = record.split(b"\t", 1)
        mode, _kind, oid = meta.split()
        data = subprocess.run(["git", "--git-dir", str(env.home / "store.git"), "cat-file",
                               "blob", oid.decode()], capture_output=True, check=True).stdout
        name = os.fsdecode(path)
        if mode == b"120000":
            state[name] = ("link", os.fsdecode(data))
        else:
            state[name] = ("file", data, mode == b"100755")
    return state


def disk_state(root: Path, *, dirs: bool = False, skip: tuple[str, ...] = (".git",),
               meta: bool = False) -> dict[str, tuple]:
    """Every file and link under root (and directories when asked), never following links."""
    state: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel
        if not rel:
            dirnames[:] = [d for d in dirnames if d not in skip]
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            key = os.path.join(rel, name) if rel else name
            st = os.lstat(full)
            extra = (st.st_mtime_ns, st.st_ino) if meta else ()
            if stat.S_ISLNK(st.st_mode):
                state[key] = ("link", os.readlink(full), *extra)
            elif stat.S_ISDIR(st.st_mode):
                if dirs:
                    state[key] = ("dir",)
            else:
                with open(full, "rb") as f:
                    state[key] = ("file", f.read(), bool(st.st_mode & 0o100), *extra)
    return state


def stat_state(root: Path) -> dict[str, tuple[int, int, int, int]]:
    """path -> (mtime_ns, inode, size, mode) of every entry: cheap enough for 10,000 files."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            full = os.path.join(dirpath, name)
            st = os.lstat(full)
            out[os.path.relpath(full, root)] = (st.st_mtime_ns, st.st_ino, st.st_size, st.st_mode)
    return out


def files_only(state: dict[str, tuple]) -> dict[str, tuple]:
    return {k: v[:3] if v[0] == "file" else v[:2] for k, v in state.items() if v[0] != "dir"}


def capture(daemon: Daemon, wt: Path, run_id: str = "r", node_id: str = "n") -> dict:
    with daemon.client() as c:
        return c.snapshot(str(wt), run_id=run_id, node_id=node_id)


def end_attempt(daemon: Daemon, run_id: str = "r", node_id: str = "n") -> None:
    with daemon.client() as c:
        c.attempt_end(run_id, node_id)


IGNORED = {"node_modules/pkg/index.js", ".env", "build/out.o", "debug.log", "sub/x.log"}


def build_worktree(root: Path) -> Path:
    wt = make_git_worktree(root)
    (wt / ".gitignore").write_text("node_modules/\n.env\nbuild/\n*.log\n")
    (wt / "src" / "util").mkdir(parents=True)
    (wt / "src" / "app.py").write_text("print('app')\n")
    (wt / "src" / "util" / "helpers.py").write_text("def h():\n    return 1\n")
    (wt / "README.md").write_text("# readme\n")
    (wt / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(wt / "run.sh", 0o755)
    (wt / "data.bin").write_bytes(bytes(range(256)) * 4)
    (wt / "spaced name.txt").write_text("spaces\n")
    (wt / "ünï-日本.txt").write_text("unicode\n")
    os.symlink("src/app.py", wt / "link")
    os.symlink("src", wt / "dirlink")
    (wt / "becomes_dir").write_text("a file now\n")
    (wt / "becomes_file").mkdir()
    (wt / "becomes_file" / "inner.txt").write_text("inner\n")
    (wt / "sub").mkdir()
    (wt / "sub" / "keep.txt").write_text("keep\n")
    # Ignored: never captured, never touched.
    (wt / "node_modules" / "pkg").mkdir(parents=True)
    (wt / "node_modules" / "pkg" / "index.js").write_text("module.exports = 1\n")
    (wt / ".env").write_text("SECRET=1\n")
    (wt / "build").mkdir()
    (wt / "build" / "out.o").write_bytes(b"\0\1\2")
    (wt / "debug.log").write_text("log\n")
    (wt / "sub" / "x.log").write_text("nested ignored\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "initial")
    return wt


def change_everything(wt: Path) -> None:
    (wt / "src" / "app.py").write_text("print('edited')\n")
    (wt / "README.md").unlink()
    (wt / "new.txt").write_text("new\n")
    (wt / "newdir" / "deep").mkdir(parents=True)
    (wt / "newdir" / "deep" / "x.txt").write_text("deep\n")
    os.chmod(wt / "src" / "util" / "helpers.py", 0o755)
    os.chmod(wt / "run.sh", 0o644)
    (wt / "link").unlink()
    os.symlink("README.md", wt / "link")
    (wt / "dirlink").unlink()
    os.symlink("/", wt / "dirlink")
    (wt / "becomes_dir").unlink()
    (wt / "becomes_dir").mkdir()
    (wt / "becomes_dir" / "f.txt").write_text("inside\n")
    (wt / "becomes_file" / "inner.txt").unlink()
    (wt / "becomes_file").rmdir()
    (wt / "becomes_file").write_text("a file now\n")
    (wt / "data.bin").write_bytes(b"\xff" * 10)
    # Ignored files change too; a restore must leave them as they are now.
    (wt / ".env").write_text("SECRET=2\n")


def run_printed(env: Env, command: str) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    assert argv[0] == "snapshotd"
    return cli(env, *argv[1:])


# -- tests ---------------------------------------------------------------------------------------


def test_round_trip_ignored_git_and_undo(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = build_worktree(tmp_path / "wt")
    cp0 = capture(daemon, wt)
    end_attempt(daemon)
    expected = checkpoint_state(sd_env, cp0["commit"])
    assert set(expected).isdisjoint(IGNORED) and "link" in expected
    change_everything(wt)
    before = disk_state(wt, dirs=True)
    ignored_before = {k: v for k, v in disk_state(wt, meta=True).items() if k in IGNORED}
    git_before = disk_state(wt / ".git", meta=True, skip=())
    head_before = git(wt, "rev-parse", "HEAD")

    proc = cli(sd_env, "restore", "r", "--node", "n", "--json", check=True)
    result = json.loads(proc.stdout)
    assert result["seq"] == 0 and result["applied"] and result["mode"] == "in-place"
    assert result["safety"]["seq"] == 1 and result["safety"]["attempt"] == 1
    assert result["undo_command"] == ("snapshotd restore r --node n --iteration 0 --attempt 1 "
                                      "--seq 1 --force")
    ops = {p["path"]: p["op"] for p in result["plan"]}
    assert ops["src/app.py"] == "M" and ops["README.md"] == "A" and ops["new.txt"] == "D"
    assert ops["becomes_dir"] == "A" and ops["becomes_dir/f.txt"] == "D"

    # Byte for byte, with modes and links; ignored files as they were just before.
    after = disk_state(wt)
    captured_after = {k: v for k, v in files_only(after).items() if k not in IGNORED}
    assert captured_after == expected
    assert {k: v for k, v in disk_state(wt, meta=True).items() if k in IGNORED} == ignored_before
    assert (wt / ".env").read_text() == "SECRET=2\n"
    assert disk_state(wt / ".git", meta=True, skip=()) == git_before
    assert git(wt, "rev-parse", "HEAD") == head_before
    assert not (wt / "newdir").exists() and (wt / "becomes_file").is_dir()
    assert os.readlink(wt / "dirlink") == "src" and (wt / "becomes_dir").is_file()
    # The safety checkpoint holds the pre-restore state, as the git CLI reads it.
    safety_state = checkpoint_state(sd_env, result["safety"]["commit"])
    assert safety_state == {k: v for k, v in files_only(before).items() if k not in IGNORED}

    undo = run_printed(sd_env, result["undo_command"])
    assert undo.returncode == 0, undo.stderr
    assert disk_state(wt, dirs=True) == before
    assert disk_state(wt / ".git", meta=True, skip=()) == git_before


def test_symlinked_parent_is_replaced_never_followed(sd_env: Env, daemon: Daemon,
                                                     tmp_path: Path) -> None:
    outside = tmp_path / "outside" / "dir"
    outside.mkdir(parents=True)
    (outside / "x").write_text("outside x\n")
    (outside / "other").write_text("outside other\n")
    wt = tmp_path / "wt"
    (wt / "d").mkdir(parents=True)
    (wt / "d" / "x").write_text("inside x\n")
    os.symlink("../../..", wt / "l")
    cp0 = capture(daemon, wt)
    end_attempt(daemon)
    (wt / "d" / "x").unlink()
    (wt / "d").rmdir()
    os.symlink(str(outside), wt / "d")
    outside_before = disk_state(tmp_path / "outside", meta=True, dirs=True)

    proc = cli(sd_env, "restore", "r", "--node", "n", check=True)
    assert "undo with" in proc.stdout
    assert disk_state(tmp_path / "outside", meta=True, dirs=True) == outside_before
    assert (wt / "d").is_dir() and not (wt / "d").is_symlink()
    assert (wt / "d" / "x").read_text() == "inside x\n"
    assert os.readlink(wt / "l") == "../../.." and (wt / "l").is_symlink()
    assert files_only(disk_state(wt)) == checkpoint_state(sd_env, cp0["commit"])


def test_escaping_checkpoint_paths_are_refused_before_writing(sd_env: Env, daemon: Daemon,
                                                              tmp_path: Path) -> None:
    wt = tmp_path / "work" / "wt"
    wt.mkdir(parents=True)
    (wt / "a.txt").write_text("a\n")
    cp0 = capture(daemon, wt)
    end_attempt(daemon)
    daemon.stop()
    gd = str(sd_env.home / "store.git")

    def obj(kind: str, data: bytes) -> str:
        return subprocess.run(["git", "--git-dir", gd, "hash-object", "-t", kind, "-w",
                               "--literally", "--stdin"], input=data, capture_output=True,
                              check=True).stdout.decode().strip()

    blob = bytes.fromhex(obj("blob", b"escaped\n"))
    inner = bytes.fromhex(obj("tree", b"100644 escaped.txt\0" + blob))
    a_blob = bytes.fromhex(store_git(sd_env, "rev-parse", f"{cp0['commit']}:a.txt").strip())
    for seq, evil in ((1, b"40000 ..\0" + inner), (2, b"40000 .git\0" + inner)):
        # Tree entries sort by name: "..", ".git" before "a.txt" (and "z" last).
        tree = obj("tree", evil + b"100644 a.txt\0" + a_blob + b"100644 z.txt\0" + blob)
        parent = store_git(sd_env, "rev-parse", "refs/snapshotd/runs/r/n/0/1").strip()
        message = (f"snapshotd: wrap seq {seq}\n\nSnapshotd-Run: r\nSnapshotd-Node: n\n"
                   f"Snapshotd-Iteration: 0\nSnapshotd-Attempt: 1\nSnapshotd-Seq: {seq}\n"
                   f"Snapshotd-Tier: 1\nSnapshotd-Source: wrap\nSnapshotd-Worktree: {wt}\n")
        commit = store_git(sd_env, "commit-tree", tree, "-p", parent, "-m", message).strip()
        store_git(sd_env, "update-ref", "refs/snapshotd/runs/r/n/0/1", commit)
    before = disk_state(tmp_path / "work", meta=True, dirs=True)
    for seq, words in ((1, "escape"), (2, ".git")):
        # No daemon runs: the CLI opens the home itself (and rebuilds the rows from the refs).
        proc = cli(sd_env, "restore", "r", "--node", "n", "--seq", str(seq))
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert words in proc.stderr and "nothing was written" in proc.stderr
        proc = cli(sd_env, "restore", "r", "--node", "n", "--seq", str(seq), "--to",
                   str(tmp_path / f"fresh{seq}"))
        assert proc.returncode == 1 and words in proc.stderr
    assert disk_state(tmp_path / "work", meta=True, dirs=True) == before
    assert not (tmp_path / "fresh1").exists() and not (tmp_path / "fresh2").exists()


def test_only_the_differing_file_is_touched(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    for i in range(10_000):
        d = wt / f"d{i // 100:03d}"
        if i % 100 == 0:
            d.mkdir(parents=True)
        (d / f"f{i}.txt").write_text(f"file {i}\n")
    cp0 = capture(daemon, wt)
    end_attempt(daemon)
    target = wt / "d042" / "f4242.txt"
    target.write_text("changed\n")
    before = stat_state(wt)

    proc = cli(sd_env, "restore", "r", "--node", "n", "--json", check=True)
    result = json.loads(proc.stdout)
    assert result["plan"] == [{"op": "M", "path": "d042/f4242.txt"}]
    after = stat_state(wt)
    assert set(after) == set(before)
    changed = {k for k in before if before[k] != after[k]}
    # One file rewritten (new inode: temp + rename); its directory's mtime moves with the rename.
    assert {k for k in changed if stat.S_ISREG(after[k][3])} == {"d042/f4242.txt"}
    assert {k for k in changed if stat.S_ISDIR(after[k][3])} <= {"d042"}
    assert target.read_text() == "file 4242\n"
    assert result["seq"] == cp0["seq"]


def test_dry_run_changes_nothing_and_lists_the_plan(sd_env: Env, daemon: Daemon,
                                                    tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("a\n")
    (wt / "gone.txt").write_text("gone\n")
    capture(daemon, wt)
    end_attempt(daemon)
    (wt / "a.txt").write_text("changed\n")
    (wt / "gone.txt").unlink()
    (wt / "new.txt").write_text("new\n")
    before = disk_state(wt, meta=True, dirs=True)
    proc = cli(sd_env, "restore", "r", "--node", "n", "--dry-run", check=True)
    assert proc.stdout.splitlines() == ["M a.txt", "A gone.txt", "D new.txt"]
    assert "nothing was changed" in proc.stderr
    assert disk_state(wt, meta=True, dirs=True) == before
    listing = json.loads(cli(sd_env, "snapshots", "r", "--json", check=True).stdout)
    assert [c["seq"] for c in listing["checkpoints"]] == [0]  # no safety checkpoint either
    data = json.loads(cli(sd_env, "restore", "r", "--node", "n", "--dry-run", "--json",
                          check=True).stdout)
    assert data["applied"] is False and data["safety"] is None and data["counts"] == {
        "A": 1, "M": 1, "D": 1}


def test_to_directory_gives_exactly_the_checkpoint(sd_env: Env, daemon: Daemon,
                                                   tmp_path: Path) -> None:
    wt = build_worktree(tmp_path / "wt")
    cp0 = capture(daemon, wt)  # the attempt stays active: --to needs no --force
    expected = checkpoint_state(sd_env, cp0["commit"])
    fresh = tmp_path / "out" / "fresh"
    proc = cli(sd_env, "restore", "r", "--node", "n", "--to", str(fresh), check=True)
    assert "materialized seq 0" in proc.stdout
    assert files_only(disk_state(fresh, skip=())) == expected
    assert not any(p.name.startswith(".fresh.snapshotd") for p in fresh.parent.iterdir())
    empty = tmp_path / "empty"
    empty.mkdir()
    cli(sd_env, "restore", "r", "--node", "n", "--to", str(empty), check=True)
    assert files_only(disk_state(empty, skip=())) == expected
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "mine.txt").write_text("mine\n")
    proc = cli(sd_env, "restore", "r", "--node", "n", "--to", str(busy))
    assert proc.returncode == 1 and "not empty" in proc.stderr
    assert [p.name for p in busy.iterdir()] == ["mine.txt"]
    dry = cli(sd_env, "restore", "r", "--node", "n", "--to", str(tmp_path / "dry"),
              "--dry-run", check=True)
    assert sorted(dry.stdout.splitlines()) == sorted(f"A {p}" for p in expected)
    assert not (tmp_path / "dry").exists()


def test_missing_seq_and_unknown_names_list_what_exists(sd_env: Env, daemon: Daemon,
                                                        tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    for i in range(3):
        (wt / "f").write_text(str(i))
        capture(daemon, wt)
    end_attempt(daemon)
    proc = cli(sd_env, "restore", "r", "--node", "n", "--seq", "7")
    assert proc.returncode == 1
    assert "no checkpoint seq 7" in proc.stderr and "0-2" in proc.stderr
    proc = cli(sd_env, "restore", "nope", "--node", "n")
    assert proc.returncode == 1 and "known runs: r" in proc.stderr
    proc = cli(sd_env, "restore", "r", "--node", "other")
    assert proc.returncode == 1 and "its nodes: n" in proc.stderr
    proc = cli(sd_env, "restore", "r", "--node", "n", "--attempt", "5")
    assert proc.returncode == 1 and "iteration 0 attempt 1" in proc.stderr
    assert (wt / "f").read_text() == "2"


def test_active_attempt_needs_force(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "f").write_text("0")
    capture(daemon, wt)
    (wt / "f").write_text("1")
    capture(daemon, wt)
    proc = cli(sd_env, "restore", "r", "--node", "n", "--seq", "0")
    assert proc.returncode == 1 and "is active" in proc.stderr and "--force" in proc.stderr
    assert "snapshotd attempt end --run r --node n --iteration 0 --attempt 1" in proc.stderr
    assert (wt / "f").read_text() == "1"
    cli(sd_env, "restore", "r", "--node", "n", "--seq", "0", "--force", check=True)
    assert (wt / "f").read_text() == "0"


def test_ignored_files_in_the_way_are_kept(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / ".gitignore").write_text("*.log\n")
    (wt / "out").write_text("a file in the checkpoint\n")
    (wt / "note.txt").write_text("note\n")
    capture(daemon, wt)
    end_attempt(daemon)
    (wt / "out").unlink()
    (wt / "out").mkdir()
    (wt / "out" / "run.log").write_text("ignored, precious\n")
    (wt / "note.txt").write_text("edited\n")
    proc = cli(sd_env, "restore", "r", "--node", "n", "--json", check=True)
    result = json.loads(proc.stdout)
    assert [k["path"] for k in result["kept"]] == ["out"]
    assert (wt / "out" / "run.log").read_text() == "ignored, precious\n"
    assert (wt / "note.txt").read_text() == "note\n"
    human = cli(sd_env, "restore", "r", "--node", "n", "--seq", "0")
    assert human.returncode == 0 and "kept out" in human.stderr


def test_without_a_daemon_the_cli_restores_under_the_home_lock(sd_env: Env, daemon: Daemon,
                                                               tmp_path: Path,
                                                               make_daemon: MakeDaemon) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "f").write_text("0")
    capture(daemon, wt)
    end_attempt(daemon)
    daemon.stop()
    (wt / "f").write_text("1")
    proc = cli(sd_env, "restore", "r", "--node", "n", "--json", check=True)
    data = json.loads(proc.stdout)
    assert (wt / "f").read_text() == "0" and data["safety"]["seq"] == 1
    assert cli(sd_env, "restore", "r", "--node", "n", "--seq", "1", "--force",
               check=True).returncode == 0
    assert (wt / "f").read_text() == "1"
    # The lock file names no live owner: a daemon starts fine afterwards.
    again = make_daemon(sd_env)
    with again.client() as c:
        assert c.ping()["pid"] == again.proc.pid


def test_progress_op_and_bar(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    for i in range(1200):
        d = wt / f"d{i // 100}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}").write_text(str(i))
    capture(daemon, wt)
    end_attempt(daemon)
    with daemon.client() as c:
        result = c.restore(run_id="r", node_id="n", to=str(tmp_path / "viadaemon"),
                           progress_token="tok-1")
        board = c.request("restore_progress", progress_token="tok-1")
    assert result["plan_total"] == 1200 and len(result["plan"]) == 1200
    assert board == {"done": 1200, "total": 1200, "finished": True}
    daemon.stop()
    # On a terminal (and with no daemon: progress comes straight from the restore), a bar.
    pid, fd = pty.fork()
    if pid == 0:  # pragma: no cover - the child
        os.execve(sys.executable, [sys.executable, "-m", "snapshotd", "restore", "r", "--node",
                                   "n", "--to", str(tmp_path / "viatty")], sd_env.environ())
    output = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1)
        if not ready:
            continue
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        output += chunk
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, output
    assert b"restoring" in output and b"1200/1200" in output
    assert len(list((tmp_path / "viatty").rglob("f*"))) == 1200


def test_python_api_for_engines(sd_env: Env, tmp_path: Path) -> None:
    from snapshotd.core.config import load_config
    from snapshotd.features.restore.restore import restore_checkpoint
    from snapshotd.service.service import Service, ServiceError

    wt = tmp_path / "wt"
    wt.mkdir()
    service = Service(sd_env.home, load_config(environ={}))
    try:
        for text in ("zero", "one"):
            (wt / "f").write_text(text)
            service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})
        (wt / "f").write_text("two")
        with pytest.raises(ServiceError) as err:
            restore_checkpoint(service, run_id="r", node_id="n", seq=0)
        assert err.value.code == "conflict"
        with pytest.raises(ServiceError) as err:
            restore_checkpoint(service, run_id="r", node_id="n", seq=9, force=True)
        assert err.value.code == "not-found" and "0-1" in err.value.message
        with pytest.raises(ServiceError) as err:
            restore_checkpoint(service, run_id="r/..", node_id="n")
        assert err.value.code == "bad-id"
        out = restore_checkpoint(service, run_id="r", node_id="n", seq=0, force=True)
        assert (wt / "f").read_text() == "zero"
        for key in ("run_id", "node_id", "iteration", "attempt", "seq", "commit", "tree",
                    "target", "plan", "applied", "safety", "undo_command"):
            assert key in out
        assert out["plan"] == [{"op": "M", "path": "f"}] and out["target"] == str(wt)
        assert out["safety"] == {"seq": 2, "commit": out["safety"]["commit"], "run_id": "r",
                                 "node_id": "n", "iteration": 0, "attempt": 1,
                                 "deduped": False, "scan": "full"}  # no watcher here
        # The default target skips safety checkpoints: seq 1, the newest the agent made.
        default = restore_checkpoint(service, run_id="r", node_id="n", force=True)
        assert default["seq"] == 1 and (wt / "f").read_text() == "one"
        undo = restore_checkpoint(service, run_id="r", node_id="n", seq=out["safety"]["seq"],
                                  force=True)
        assert (wt / "f").read_text() == "two" and undo["seq"] == 2
        to = restore_checkpoint(service, run_id="r", node_id="n", seq=1, to=tmp_path / "copy")
        assert to["safety"] is None and to["undo_command"] is None
        assert (tmp_path / "copy" / "f").read_text() == "one"
    finally:
        service.close()


# -- the lingering watch: restore after the attempt ended -----------------------------------------


def _attempt_then_end(d: Daemon, wt: Path) -> dict:
    """An attempt as an engine runs it: begun (watched), captured twice, ended. Returns seq 0."""
    with d.client() as c:
        c.attempt_begin("r", "n", str(wt))
        cp0 = c.snapshot(str(wt), run_id="r", node_id="n")
        (wt / "src" / "app.py").write_text("print('agent')\n")
        (wt / "agent-new.txt").write_text("made by the agent\n")
        c.snapshot(str(wt), run_id="r", node_id="n")
        c.attempt_end("r", "n")
    return cp0


def _captured(wt: Path) -> dict[str, tuple]:
    return {k: v for k, v in files_only(disk_state(wt)).items() if k not in IGNORED}


def _watched(d: Daemon, wt: Path) -> dict | None:
    with d.client() as c:
        rows = [w for w in c.status()["watched"] if w["path"] == str(wt)]
    return rows[0] if rows else None


def test_after_the_attempt_ends_a_restore_takes_the_fast_path_and_is_exact(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = build_worktree(tmp_path / "wt")
    # A symlinked directory makes the notifier report changes under the link's path, which
    # turns the fast path off for the whole watch (test_watcher covers that): a file link here.
    (wt / "dirlink").unlink()
    os.symlink("run.sh", wt / "dirlink")
    d = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    cp0 = _attempt_then_end(d, wt)
    row = _watched(d, wt)
    assert row is not None and row["state"] == "lingering", row
    assert row["ended_attempt"] == "r/n/0/1" and row["attempt"] is None
    # Changes made while lingering: they must be in the safety checkpoint.
    (wt / "README.md").write_text("edited after the attempt ended\n")
    (wt / "later" / "deep").mkdir(parents=True)
    (wt / "later" / "deep" / "new.txt").write_text("new after the end\n")
    (wt / "sub" / "keep.txt").unlink()
    ignored_before = {p: (wt / p).read_bytes() for p in IGNORED}
    pre_restore = _captured(wt)
    with d.client() as c:
        r = c.restore(run_id="r", node_id="n", seq=cp0["seq"])  # no --force: ended
    assert r["scan"] == "fast" and r["safety"]["scan"] == "fast", r
    assert _captured(wt) == checkpoint_state(sd_env, cp0["commit"])
    assert {p: (wt / p).read_bytes() for p in IGNORED} == ignored_before
    # The safety checkpoint is the true state before the restore, lingering changes too.
    safety = checkpoint_state(sd_env, r["safety"]["commit"])
    assert safety == pre_restore
    assert safety["README.md"] == ("file", b"edited after the attempt ended\n", False)
    # The undo also runs on the fast path, and brings every lingering change back.
    with d.client() as c:
        undo = c.restore(run_id="r", node_id="n", seq=r["safety"]["seq"], force=True)
        seqs = [cp["seq"] for cp in c.list("r")["checkpoints"]]
    assert undo["scan"] == "fast"
    assert _captured(wt) == pre_restore
    # Nothing but restores' own checkpoints (safety, restored state) was recorded after the
    # end: no tier-2. The undo's safety checkpoint is the restored state (deduplicated).
    assert undo["safety"]["seq"] == r["restored"]["seq"] and undo["safety"]["deduped"]
    assert seqs == [0, 1, r["safety"]["seq"], r["restored"]["seq"], undo["restored"]["seq"]]


def test_linger_off_means_unwatched_and_still_exact(sd_env: Env, tmp_path: Path,
                                                    make_daemon: MakeDaemon) -> None:
    wt = build_worktree(tmp_path / "wt")
    d = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER, SNAPSHOTD_LINGER_S="0"))
    cp0 = _attempt_then_end(d, wt)
    row = _watched(d, wt)
    assert row is None or row["state"] == "idle", row
    (wt / "README.md").write_text("edited after the attempt ended\n")
    pre_restore = _captured(wt)
    with d.client() as c:
        r = c.restore(run_id="r", node_id="n", seq=cp0["seq"])
    assert r["scan"] == "full", r
    assert _captured(wt) == checkpoint_state(sd_env, cp0["commit"])
    assert checkpoint_state(sd_env, r["safety"]["commit"]) == pre_restore


# -- the conflict hint ---------------------------------------------------------------------------


def test_conflict_hint_ends_the_attempt_when_run(sd_env: Env, daemon: Daemon,
                                                 tmp_path: Path) -> None:
    """The `attempt end` line the conflict error prints is a command the CLI accepts, and it
    ends exactly the attempt in the way, after which the restore goes through without --force."""
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "f").write_text("0")
    capture(daemon, wt, node_id="odd node")
    (wt / "f").write_text("1")
    capture(daemon, wt, node_id="odd node")
    proc = cli(sd_env, "restore", "r", "--node", "odd node", "--seq", "0")
    assert proc.returncode == 1 and "is active" in proc.stderr
    hint = proc.stderr.split("End it first (`", 1)[1].split("`", 1)[0]
    assert hint.startswith("snapshotd attempt end ")
    ended = run_printed(sd_env, hint)
    assert ended.returncode == 0, ended.stderr
    assert "r/odd node iteration 0 attempt 1: cancelled" in ended.stdout
    cli(sd_env, "restore", "r", "--node", "odd node", "--seq", "0", check=True)
    assert (wt / "f").read_text() == "0"
