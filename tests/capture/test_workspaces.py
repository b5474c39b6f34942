"""Whole workspaces: a worktree holding other git repositories (a multi-repo folder, a repository
with a nested repository, one with a submodule, a repository nested two deep) is captured whole,
each nested repository under its own ignore rules, with no ``.git`` and no gitlink in any tree,
restored exactly, and never written to. The git CLI builds the repositories and reads the store.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
from pathlib import Path

import pytest

from snapshotd.capture.ignore_rules import read_rules
from tests.conftest import QUIET_WATCHER, Daemon, Env, git, make_git_worktree
from tests.support.helpers import wait_for

pytestmark = pytest.mark.one_ledger("what a whole workspace's capture, restore and diff hold")

RUN = {"run_id": "ws", "node_id": "n"}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def build_workspace(top: Path, origin: Path, *, top_is_repo: bool) -> None:
    """Three repositories in ``top``: ``alpha`` (with ``vendor/inner`` nested in it and
    ``deep`` nested in that), ``beta`` (with the submodule ``libs/sub``), ``gamma`` (plain);
    plus ``skipped-repo``, which the top's ``.gitignore`` leaves out."""
    top.mkdir()
    if top_is_repo:
        make_git_worktree(top)
    write(top / ".gitignore", "*.tmp\nskipped-repo/\n")
    write(top / "top.txt", "top\n")
    write(top / "scratch.tmp", "ignored at the top\n")
    make_git_worktree(top / "skipped-repo")
    write(top / "skipped-repo" / "x.txt", "never captured\n")

    alpha = make_git_worktree(top / "alpha")
    write(alpha / ".gitignore", "*.log\nbuild/\n")
    write(alpha / "src" / "main.py", "print('alpha')\n")
    write(alpha / "src" / "gone.py", "deleted later\n")
    write(alpha / "keep.tmp", "the top's *.tmp is not alpha's rule\n")
    write(alpha / "app.log", "ignored by alpha\n")
    write(alpha / "build" / "out.bin", "ignored build output\n")
    git(alpha, "add", "-A")
    git(alpha, "commit", "-q", "-m", "alpha")
    inner = make_git_worktree(alpha / "vendor" / "inner")
    write(inner / ".gitignore", "*.cache\n")
    write(inner / "lib.txt", "inner lib\n")
    write(inner / "app.log", "alpha's *.log is not inner's rule\n")
    write(inner / "x.cache", "ignored by inner\n")
    write(inner / ".git" / "info" / "exclude", "local-notes.txt\n")
    write(inner / "local-notes.txt", "ignored by inner's info/exclude\n")
    deep = make_git_worktree(inner / "deep")
    write(deep / "deep.txt", "two deep\n")
    write(deep / ".gitignore", "secret.out\n")
    write(deep / "secret.out", "ignored by deep\n")

    make_git_worktree(origin)
    write(origin / "lib.c", "int lib;\n")
    write(origin / ".gitignore", "*.o\n")
    git(origin, "add", "-A")
    git(origin, "commit", "-q", "-m", "origin")
    beta = make_git_worktree(top / "beta")
    write(beta / "README", "beta\n")
    git(beta, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(origin),
        "libs/sub")
    git(beta, "add", "-A")
    git(beta, "commit", "-q", "-m", "beta")
    sub = beta / "libs" / "sub"
    assert (sub / ".git").is_file()
    write(beta / ".git" / "modules" / "libs" / "sub" / "info" / "exclude", "local-only.txt\n")
    write(sub / "local-only.txt", "ignored by the submodule's own info/exclude\n")
    write(sub / "lib.o", "ignored object\n")

    gamma = make_git_worktree(top / "gamma")
    write(gamma / ".gitignore", "dist/\n")
    write(gamma / "index.js", "gamma\n")
    write(gamma / "dist" / "bundle.js", "ignored bundle\n")
    write(gamma / ".git" / "info" / "exclude", "notes.md\n")
    write(gamma / "notes.md", "ignored by gamma's info/exclude\n")


# Files no capture may hold (ignored by the rules of the repository they are in).
IGNORED = {"scratch.tmp", "skipped-repo/x.txt", "alpha/app.log", "alpha/build/out.bin",
           "alpha/vendor/inner/x.cache", "alpha/vendor/inner/local-notes.txt",
           "alpha/vendor/inner/deep/secret.out", "beta/libs/sub/local-only.txt",
           "beta/libs/sub/lib.o", "gamma/dist/bundle.js", "gamma/notes.md"}


def modify_workspace(top: Path) -> None:
    """A new, a changed and a deleted file in each repository, and ignored files written."""
    write(top / "top.txt", "top changed\n")
    write(top / "new-top.txt", "new at the top\n")
    write(top / "alpha" / "src" / "main.py", "print('alpha 2')\n")
    (top / "alpha" / "src" / "gone.py").unlink()
    write(top / "alpha" / "src" / "added.py", "new in alpha\n")
    write(top / "alpha" / "app.log", "ignored, changed\n")
    write(top / "alpha" / "vendor" / "inner" / "lib.txt", "inner lib 2\n")
    write(top / "alpha" / "vendor" / "inner" / "new.txt", "new in inner\n")
    (top / "alpha" / "vendor" / "inner" / "app.log").unlink()
    write(top / "alpha" / "vendor" / "inner" / "y.cache", "ignored, new\n")
    write(top / "alpha" / "vendor" / "inner" / "deep" / "deep.txt", "two deep 2\n")
    write(top / "alpha" / "vendor" / "inner" / "deep" / "more" / "d.txt", "new two deep\n")
    write(top / "beta" / "libs" / "sub" / "lib.c", "int lib2;\n")
    write(top / "beta" / "libs" / "sub" / "extra.c", "new in the submodule\n")
    (top / "beta" / "README").unlink()
    write(top / "beta" / "libs" / "sub" / "more.o", "ignored, new\n")
    write(top / "gamma" / "index.js", "gamma 2\n")
    write(top / "gamma" / "dist" / "bundle.js", "ignored, changed\n")
    write(top / "gamma" / "notes.md", "ignored, changed\n")
    write(top / "gamma" / "lib" / "util.js", "new in gamma\n")
    (top / "gamma" / ".gitignore").unlink()
    write(top / "gamma" / ".gitignore", "dist/\n*.bak\n")
    write(top / "gamma" / "old.bak", "ignored by the changed .gitignore\n")


IGNORED_AFTER = IGNORED | {"alpha/vendor/inner/y.cache", "beta/libs/sub/more.o",
                           "gamma/old.bak"}


def files_on_disk(top: Path) -> dict[str, bytes]:
    """Every file under ``top`` outside any ``.git`` (dir or file)."""
    out: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames:
            if name == ".git":
                continue
            full = Path(dirpath) / name
            out[str(full.relative_to(top))] = full.read_bytes()
    return out


def git_dirs_digest(top: Path) -> dict[str, str]:
    """A hash of every file under every ``.git`` (dir or file) below ``top``, by path."""
    out: dict[str, str] = {}
    for dirpath, _dirnames, filenames in os.walk(top):
        here = Path(dirpath)
        if ".git" in here.relative_to(top).parts:
            for name in filenames:
                full = here / name
                out[str(full.relative_to(top))] = hashlib.sha256(full.read_bytes()).hexdigest()
            continue
        if ".git" in filenames:
            full = here / ".git"
            out[str(full.relative_to(top))] = hashlib.sha256(full.read_bytes()).hexdigest()
    return out


def checkpoint(env: Env, commit: str) -> dict[str, tuple[str, str]]:
    """path -> (mode, blob id) of a checkpoint, as the git CLI lists it."""
    out = subprocess.run(["git", "--git-dir", str(env.home / "store.git"), "ls-tree", "-r", "-z",
                          commit], capture_output=True, check=True).stdout.decode()
    entries = {}
    for record in filter(None, out.split("\0")):
        meta, path = record.split("\t", 1)
        mode, _kind, oid = meta.split()
        entries[path] = (mode, oid)
    return entries


def blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def assert_holds(env: Env, commit: str, files: dict[str, bytes]) -> None:
    """The checkpoint holds exactly ``files`` (path -> content): no ``.git``, no gitlink."""
    held = checkpoint(env, commit)
    assert not [p for p in held if ".git" in p.split("/")], held
    assert not [p for p, (mode, _) in held.items() if mode == "160000"], held
    assert set(held) == set(files), (sorted(set(held) - set(files)),
                                     sorted(set(files) - set(held)))
    for path, data in files.items():
        assert held[path][1] == blob_id(data), path


@pytest.mark.parametrize("top_is_repo", [False, True], ids=["plain-folder", "repo-folder"])
def test_a_workspace_of_repositories_is_captured_restored_and_never_written(
        sd_env: Env, tmp_path: Path, top_is_repo: bool) -> None:
    top = tmp_path / "ws"
    build_workspace(top, tmp_path / "origin", top_is_repo=top_is_repo)
    gits = git_dirs_digest(top)
    assert "beta/libs/sub/.git" in gits and "alpha/vendor/inner/.git/HEAD" in gits
    first = files_on_disk(top)
    wanted_first = {p: d for p, d in first.items() if p not in IGNORED}
    assert "alpha/keep.tmp" in wanted_first and "alpha/vendor/inner/app.log" in wanted_first
    d = Daemon(sd_env, extra_env=dict(QUIET_WATCHER)).start()
    try:
        with d.client() as c:
            c.attempt_begin("ws", "n", str(top))
            cp0 = c.snapshot(str(top), **RUN, tool_use_id="t0")
            assert_holds(sd_env, cp0["commit"], wanted_first)
            assert not [s for s in cp0["skipped"] if s["reason"] == "nested-repository"], cp0
            modify_workspace(top)
            second = files_on_disk(top)
            cp1 = c.snapshot(str(top), **RUN, tool_use_id="t1")
            assert_holds(sd_env, cp1["commit"],
                         {p: d for p, d in second.items() if p not in IGNORED_AFTER})
            diff = c.diff(**RUN, seq=cp0["seq"], to_seq=cp1["seq"])
            assert {(f["status"], f["path"]) for f in diff["files"]} >= {
                ("M", "alpha/vendor/inner/lib.txt"), ("A", "alpha/vendor/inner/new.txt"),
                ("D", "alpha/vendor/inner/app.log"), ("M", "beta/libs/sub/lib.c"),
                ("A", "alpha/vendor/inner/deep/more/d.txt"), ("D", "beta/README")}
            assert not [f for f in diff["files"] if ".git" in f["path"].split("/")
                        or f["path"] in IGNORED_AFTER]
            assert c.diff(**RUN, seq=cp1["seq"], worktree=True)["files"] == []
            restored = c.restore(**RUN, seq=cp0["seq"], force=True)
            assert restored["applied"], restored
            cp2 = c.snapshot(str(top), **RUN, tool_use_id="t2")
    finally:
        d.stop()
    after = files_on_disk(top)
    assert {p: d for p, d in after.items() if p not in IGNORED_AFTER} == wanted_first
    # Ignored files were neither restored nor deleted: as the modification left them.
    assert {p: d for p, d in after.items() if p in IGNORED_AFTER} == \
        {p: d for p, d in second.items() if p in IGNORED_AFTER}
    # The restored gamma/.gitignore no longer ignores old.bak: the next capture holds it.
    assert_holds(sd_env, cp2["commit"], {**wanted_first, "gamma/old.bak": after["gamma/old.bak"]})
    assert git_dirs_digest(top) == gits


def test_a_write_inside_a_nested_repository_takes_the_fast_path(sd_env: Env,
                                                                tmp_path: Path) -> None:
    top = tmp_path / "ws"
    build_workspace(top, tmp_path / "origin", top_is_repo=False)
    # The user's global excludes and the daemon's exclude list apply in nested repositories.
    write(sd_env.root / "config" / "git" / "ignore", "*.swp\n")
    for rel in ("gamma/g.swp", "alpha/vendor/inner/deep/d.swp", "beta/libs/sub/s.daemon-skip"):
        write(top / rel, "excluded\n")
    gits = git_dirs_digest(top)
    d = Daemon(sd_env, extra_env=dict(QUIET_WATCHER, SNAPSHOTD_EXCLUDES="*.daemon-skip")).start()
    try:
        with d.client() as c:
            c.attempt_begin("ws", "n", str(top))
            base = c.snapshot(str(top), **RUN, tool_use_id="base")
            assert not [p for p in checkpoint(sd_env, base["commit"])
                        if p.endswith((".swp", ".daemon-skip"))]
            write(top / "top.txt", "warm\n")
            assert c.snapshot(str(top), **RUN, tool_use_id="warm")["scan"] == "fast"
            write(top / "alpha" / "vendor" / "inner" / "deep" / "fast.txt", "fast\n")
            write(top / "beta" / "libs" / "sub" / "lib.c", "int fast;\n")
            write(top / "beta" / "libs" / "sub" / "fast.o", "ignored by the submodule\n")
            write(top / "gamma" / "fast.swp", "ignored by the global excludes\n")
            write(top / "gamma" / "new" / "dir" / "f.js", "a new directory in gamma\n")
            # A repository made while the watcher runs is captured too.
            late = make_git_worktree(top / "late")
            write(late / "late.txt", "late\n")
            fast = c.snapshot(str(top), **RUN, tool_use_id="fast")
            assert fast["scan"] == "fast", fast
    finally:
        d.stop()
    held = checkpoint(sd_env, fast["commit"])
    assert held["alpha/vendor/inner/deep/fast.txt"][1] == blob_id(b"fast\n")
    assert held["beta/libs/sub/lib.c"][1] == blob_id(b"int fast;\n")
    assert "beta/libs/sub/fast.o" not in held and "gamma/fast.swp" not in held
    assert "gamma/new/dir/f.js" in held and "late/late.txt" in held
    # A fresh daemon's full scan agrees with the fast path.
    d.start()
    try:
        with d.client() as c:
            scanned = c.snapshot(str(top), **RUN, tool_use_id="scan")
    finally:
        d.stop()
    assert scanned["scan"] == "full"
    assert scanned["tree"] == fast["tree"], scanned["skipped"]
    late_gits = {p: h for p, h in git_dirs_digest(top).items() if not p.startswith("late/")}
    assert late_gits == gits


def test_an_exclude_file_that_cannot_be_read_safely_is_left_out_and_logged(
        sd_env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A nested repository's ``info/exclude`` that is a FIFO is never opened so that it blocks
    (the capture goes on without its rules); one owned by a stranger is not read either."""
    top = tmp_path / "ws"
    top.mkdir()
    repo = make_git_worktree(top / "r")
    write(repo / "a.txt", "a\n")
    write(repo / "notes.md", "ignored only by the exclude file\n")
    exclude = repo / ".git" / "info" / "exclude"
    exclude.unlink()
    os.mkfifo(exclude)
    d = Daemon(sd_env, extra_env=dict(QUIET_WATCHER)).start()
    try:
        with d.client(timeout=20) as c:
            c.attempt_begin("ws", "n", str(top))
            cp = c.snapshot(str(top), **RUN, tool_use_id="fifo")
    finally:
        d.stop()
    assert set(checkpoint(sd_env, cp["commit"])) == {"r/a.txt", "r/notes.md"}
    caplog.set_level(logging.WARNING, logger="snapshotd.store")
    assert read_rules(exclude, repo) is None
    assert "not a regular file" in caplog.text
    if os.getuid() == 0:
        caplog.clear()
        exclude.unlink()
        write(exclude, "notes.md\n")
        assert read_rules(exclude, repo) == "notes.md\n"
        os.chown(exclude, 54321, 54321)
        assert read_rules(exclude, repo) is None
        assert "owned by uid" in caplog.text


def test_a_nested_repository_removed_or_turned_into_a_directory_is_rescanned(
        sd_env: Env, tmp_path: Path) -> None:
    """A nested repository deleted goes from the next checkpoint; one whose ``.git`` is deleted
    becomes an ordinary directory under the worktree's rules, and a repository inside it is
    still captured whole under its own."""
    top = tmp_path / "ws"
    build_workspace(top, tmp_path / "origin", top_is_repo=False)
    d = Daemon(sd_env, extra_env=dict(QUIET_WATCHER)).start()
    try:
        with d.client() as c:
            c.attempt_begin("ws", "n", str(top))
            c.snapshot(str(top), **RUN, tool_use_id="base")
            subprocess.run(["rm", "-rf", str(top / "gamma"), str(top / "alpha" / ".git")],
                           check=True)
            cp = c.snapshot(str(top), **RUN, tool_use_id="gone")
    finally:
        d.stop()
    held = checkpoint(sd_env, cp["commit"])
    assert not [p for p in held if p.startswith("gamma/")], held
    # alpha's own .gitignore still applies (as any directory's); the top's *.tmp now does too.
    assert "alpha/keep.tmp" not in held and "alpha/app.log" not in held
    assert "alpha/src/main.py" in held and "alpha/vendor/inner/lib.txt" in held
    assert "alpha/vendor/inner/app.log" in held and "alpha/vendor/inner/x.cache" not in held
    assert "alpha/vendor/inner/deep/deep.txt" in held


def test_the_watcher_filters_a_nested_repositorys_events_by_its_own_rules(
        sd_env: Env, tmp_path: Path) -> None:
    """A file the worktree's ``*.tmp`` would ignore, written inside ``alpha`` (whose rules do
    not), arms a settle capture that holds it."""
    top = tmp_path / "ws"
    build_workspace(top, tmp_path / "origin", top_is_repo=False)
    d = Daemon(sd_env, extra_env={"SNAPSHOTD_SETTLE_MS": "100",
                                  "SNAPSHOTD_MAX_WAIT_MS": "300"}).start()
    try:
        with d.client() as c:
            c.attempt_begin("ws", "n", str(top))
            c.snapshot(str(top), **RUN, tool_use_id="base")
            write(top / "alpha" / "fresh.tmp", "alpha's, captured\n")

            def holding() -> dict | None:
                for cp in c.list("ws")["checkpoints"]:
                    if "alpha/fresh.tmp" in checkpoint(sd_env, cp["commit"]):
                        return cp
                return None

            cp = wait_for(holding, timeout=20, every=0.1,
                          what="a settle capture holding alpha/fresh.tmp")
    finally:
        d.stop()
    assert checkpoint(sd_env, cp["commit"])["alpha/fresh.tmp"][1] == \
        blob_id(b"alpha's, captured\n")
