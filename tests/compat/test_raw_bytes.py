"""Files are stored as their bytes, whatever ``.gitattributes`` or the user's git config say: a
checkpoint holds, and a restore writes back, exactly what the worktree held. Before, ``*
text=auto`` turned CRLF into LF on the way in (a restore wrote LF, and a change of line endings
alone was no checkpoint at all), and a seed from the user's index took a converted blob (a
clean filter's output, Git LFS's pointer) for the file. The oracle is the git CLI reading the
store (``git cat-file``) beside the file's bytes."""

from __future__ import annotations

import logging
import os
import stat
import subprocess
import threading
from pathlib import Path

import pytest

from snapshotd.capture import raw_bytes
from snapshotd.capture.stat_caches import StatCaches
from snapshotd.features.restore.restore import restore_checkpoint
from snapshotd.service.service import Service
from snapshotd.store.attributes import STORE_ATTRIBUTES
from snapshotd.store.store import Store
from tests.conftest import Env, git, make_git_worktree

ATTRIBUTES = "* text=auto\n*.bat text eol=crlf\n*.id ident\n*.dat filter=shrink\n"
FILES = {
    "win.txt": b"written on windows\r\nsecond line\r\n",
    "mixed.txt": b"a\r\nb\nc\r\n",
    "run.bat": b"@echo off\nexit 0\n",
    "x.id": b"version $Id$\n",
    "data.dat": b"axbxcx\n",
    "plain.txt": b"nothing to convert\n",
}


def converting_repo(root: Path) -> Path:
    """A worktree whose attributes convert nearly every file, with a clean filter that drops
    every ``x`` (the way Git LFS's filter swaps a file for a pointer)."""
    wt = make_git_worktree(root)
    git(wt, "config", "filter.shrink.clean", "tr -d x")
    git(wt, "config", "filter.shrink.smudge", "cat")
    (wt / ".gitattributes").write_text(ATTRIBUTES)
    for name, data in FILES.items():
        (wt / name).write_bytes(data)
    return wt


def stored(store: Path, tree: str, path: str) -> bytes:
    return subprocess.run(["git", "--git-dir", str(store), "cat-file", "blob", f"{tree}:{path}"],
                          capture_output=True, check=True).stdout


def assert_raw(store: Path, tree: str, wt: Path) -> None:
    for name in FILES:
        assert stored(store, tree, name) == (wt / name).read_bytes(), name


def test_every_capture_path_stores_the_bytes_and_a_restore_writes_them_back(
        service: Service, sd_env: Env, tmp_path: Path) -> None:
    wt = converting_repo(tmp_path / "wt")
    store = sd_env.home / "store.git"
    first = service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})
    assert_raw(store, first["tree"], wt)
    # Line endings alone changed: a checkpoint of its own, holding the new bytes.
    (wt / "win.txt").write_bytes(b"written on windows\nsecond line\n")
    second = service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})
    assert not second["deduped"] and second["seq"] == 1
    assert_raw(store, second["tree"], wt)
    # The fast path's per-path update, too.
    (wt / "mixed.txt").write_bytes(b"x\r\ny\r\n")
    (wt / "data.dat").write_bytes(b"xxx\r\n")
    fast = service.caches.worktree(wt).capture_changed({"mixed.txt", "data.dat"})
    assert fast is not None and not fast.full_scan
    assert_raw(store, fast.tree, wt)
    out = restore_checkpoint(service, run_id="r", node_id="n", seq=0, to=tmp_path / "out")
    assert out["applied"]
    for name, data in FILES.items():
        assert (tmp_path / "out" / name).read_bytes() == data, name


def test_a_seed_never_takes_a_converted_blob_for_the_file(
        sd_env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """The user's index names the blobs git made of the files (LF for CRLF, the filter's
    output): those files are read again by the first capture; the others stay seeded."""
    wt = converting_repo(tmp_path / "wt")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    assert git(wt, "cat-file", "blob", "HEAD:data.dat") == "abc\n"  # the filter ran
    store = Store(sd_env.home, recover=True)
    caches = StatCaches(store)
    with caplog.at_level(logging.INFO, logger="snapshotd.seeding"):
        first = caches.worktree(wt).capture()
    assert_raw(store.path, first.tree, wt)
    [seeded] = [r.getMessage() for r in caplog.records if "read again" in r.getMessage()]
    # win.txt, mixed.txt (CRLF to LF), data.dat (filtered); x.id's $Id$ is collapsed on the
    # way in, already so; run.bat and plain.txt are their blobs.
    assert ": 3 file(s)" in seeded, seeded


def test_a_seed_from_a_repository_with_core_autocrlf_reads_its_crlf_files(
        sd_env: Env, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    git(wt, "config", "core.autocrlf", "true")  # no attributes at all: the config converts
    (wt / "dos.txt").write_bytes(b"one\r\ntwo\r\n")
    (wt / "unix.txt").write_bytes(b"one\ntwo\n")
    git(wt, "add", "-A")
    assert git(wt, "cat-file", "blob", ":dos.txt") == "one\ntwo\n"
    store = Store(sd_env.home, recover=True)
    caches = StatCaches(store)
    first = caches.worktree(wt).capture()
    assert stored(store.path, first.tree, "dos.txt") == b"one\r\ntwo\r\n"
    assert stored(store.path, first.tree, "unix.txt") == b"one\ntwo\n"


@pytest.mark.parametrize(("seam", "logged"), [
    ("_BATCH_CHECK", "cannot ask git for the seed's blob sizes"),
    ("_LS_FILES", "cannot ask git which files a filter or encoding converts")])
def test_when_git_cannot_tell_every_seeded_file_is_read(
        sd_env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        monkeypatch: pytest.MonkeyPatch, seam: str, logged: str) -> None:
    """Either check failing (the blobs' sizes; which files a filter or encoding converts: the
    attributes name a filter) reads every seeded file again."""
    monkeypatch.setattr(raw_bytes, seam, [str(tmp_path / "no-such-git")])
    wt = converting_repo(tmp_path / "wt")
    git(wt, "add", "-A")
    store = Store(sd_env.home, recover=True)
    caches = StatCaches(store)
    with caplog.at_level(logging.INFO):
        first = caches.worktree(wt).capture()
    assert_raw(store.path, first.tree, wt)
    messages = [r.getMessage() for r in caplog.records]
    assert any(logged in m for m in messages), messages
    [seeded] = [m for m in messages if "read again" in m and "seed of" in m]
    assert f": {len(FILES) + 1} file(s)" in seeded, seeded  # .gitattributes too


def test_a_repository_that_cannot_convert_is_seeded_whole(
        sd_env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / ".gitattributes").write_text("*.md linguist-documentation\n")
    (wt / "a.txt").write_bytes(b"crlf\r\n")  # no attribute converts it: its blob is itself
    git(wt, "add", "-A")
    store = Store(sd_env.home, recover=True)
    caches = StatCaches(store)
    with caplog.at_level(logging.INFO, logger="snapshotd.seeding"):
        first = caches.worktree(wt).capture()
    assert stored(store.path, first.tree, "a.txt") == b"crlf\r\n"
    assert not [r for r in caplog.records if "read again" in r.getMessage()]


def test_a_store_made_before_the_rule_gets_it_and_reads_its_worktrees_again(
        sd_env: Env, tmp_path: Path) -> None:
    wt = converting_repo(tmp_path / "wt")
    store = Store(sd_env.home, recover=True)
    caches = StatCaches(store)
    (store.path / "info" / "attributes").unlink()  # as a store made before
    index = caches.worktree(wt)
    old = index.capture()
    assert stored(store.path, old.tree, "win.txt") == b"written on windows\nsecond line\n"
    assert index.persist()
    again = Store(sd_env.home, recover=True)
    again_caches = StatCaches(again)
    assert "info/attributes" in again.recovery.repaired_files
    assert_raw(again.path, again_caches.worktree(wt).capture().tree, wt)
    assert Store(sd_env.home, recover=True).recovery.repaired_files == []


def test_a_damaged_attributes_file_is_replaced_at_start_up(sd_env: Env, tmp_path: Path) -> None:
    """Whatever stands at ``info/attributes`` (here a directory) is replaced by the rule."""
    wt = converting_repo(tmp_path / "wt")
    Store(sd_env.home, recover=True)
    attributes = sd_env.home / "store.git" / "info" / "attributes"
    attributes.unlink()
    attributes.mkdir()
    (attributes / "junk").write_text("x\n")
    store = Store(sd_env.home, recover=True)
    caches = StatCaches(store)
    assert "info/attributes" in store.recovery.repaired_files
    assert attributes.read_bytes() == STORE_ATTRIBUTES
    assert_raw(store.path, caches.worktree(wt).capture().tree, wt)


def test_a_fifo_named_gitattributes_never_blocks_a_seeded_capture(
        sd_env: Env, tmp_path: Path) -> None:
    """The seed's look at the attributes files opens none that could block (a FIFO at the
    root, in a hostile tree): the capture goes on and lists the FIFO as special."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_bytes(b"one\r\n")
    git(wt, "add", "-A")
    os.mkfifo(wt / ".gitattributes")
    store = Store(sd_env.home, recover=True)
    caches = StatCaches(store)
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(caches.worktree(wt).capture()),
                              daemon=True)
    worker.start()
    worker.join(timeout=30)
    assert outcome, "the capture blocked on the FIFO"
    [capture] = outcome
    assert stored(store.path, capture.tree, "a.txt") == b"one\r\n"
    assert {"path": ".gitattributes", "reason": "special", "kind": "fifo"} in capture.skipped


def test_a_seed_never_takes_a_blob_a_size_keeping_conversion_made(
        sd_env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A clean filter that maps bytes one to one (rot13 here) and a working-tree encoding whose
    UTF-8 form happens to have the file's size leave blobs of the file's size but not its
    bytes: the size check cannot see them, the attributes can. A filter named in a nested,
    tracked ``.gitattributes`` counts as well as one at the root."""
    wt = make_git_worktree(tmp_path / "wt")
    git(wt, "config", "filter.rot.clean", "tr a-z n-za-m")
    git(wt, "config", "filter.rot.smudge", "tr a-z n-za-m")
    (wt / ".gitattributes").write_text("*.u16 working-tree-encoding=UTF-16LE\n")
    (wt / "sub").mkdir()
    (wt / "sub" / ".gitattributes").write_text("*.rot filter=rot\n")
    files = {"sub/hello.rot": b"hello\n", "wide.u16": "a\u3042".encode("utf-16-le"),
             "plain.txt": b"plain\n", "sub/other.txt": b"other\n"}
    for name, data in files.items():
        (wt / name).write_bytes(data)
    git(wt, "add", "-A")
    assert git(wt, "cat-file", "blob", ":sub/hello.rot") == "uryyb\n"  # the filter ran
    assert git(wt, "cat-file", "-s", ":wide.u16") == "4\n"  # UTF-8, the file's size
    store = Store(sd_env.home, recover=True)
    caches = StatCaches(store)
    with caplog.at_level(logging.INFO, logger="snapshotd.seeding"):
        first = caches.worktree(wt).capture()
    for name, data in files.items():
        assert stored(store.path, first.tree, name) == data, name
    [seeded] = [r.getMessage() for r in caplog.records if "read again" in r.getMessage()]
    assert ": 2 file(s)" in seeded, seeded  # hello.rot, wide.u16; the others stay seeded
    assert not list(sd_env.home.rglob("index.attrs"))  # git's scratch index, gone


def capture_in_time(caches: StatCaches, wt: Path, seconds: float = 60):
    """The worktree's capture, failing the test when it has not come back in ``seconds``."""
    outcome: list[object] = []
    worker = threading.Thread(target=lambda: outcome.append(caches.worktree(wt).capture()),
                              daemon=True)
    worker.start()
    worker.join(timeout=seconds)
    assert outcome, "the capture did not come back: git read a device"
    return outcome[0]


def test_a_device_at_the_repositorys_info_attributes_is_never_read_by_git(
        sd_env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """git follows a link at ``info/attributes`` (not one in the tree) and reads a device there
    until memory runs out (the seed's ``git pack-objects`` did): the seed gives up, and the
    first capture reads the tree itself."""
    wt = converting_repo(tmp_path / "wt")
    git(wt, "add", "-A")
    info = wt / ".git" / "info" / "attributes"
    info.parent.mkdir(exist_ok=True)
    info.symlink_to("/dev/urandom")
    store = Store(sd_env.home, recover=True)
    caches = StatCaches(store)
    with caplog.at_level(logging.INFO):
        first = capture_in_time(caches, wt)
    assert_raw(store.path, first.tree, wt)
    messages = [r.getMessage() for r in caplog.records]
    assert any("not seeding" in m and f"{info} is not a regular file" in m
               for m in messages), messages


@pytest.mark.skipif(os.geteuid() != 0, reason="making a device node takes root")
def test_a_device_node_for_a_tracked_gitattributes_is_never_read_by_git(
        sd_env: Env, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A tracked ``sub/.gitattributes`` replaced by a device node (which git would read until
    memory ran out when asked about ``sub``'s files): git is not asked which files a filter
    converts, and every seeded file is read again."""
    wt = converting_repo(tmp_path / "wt")  # its attributes name a filter
    (wt / "sub").mkdir()
    (wt / "sub" / "c.txt").write_text("c\n")
    (wt / "sub" / ".gitattributes").write_text("*.txt -text\n")
    git(wt, "add", "-A")
    (wt / "sub" / ".gitattributes").unlink()
    os.mknod(wt / "sub" / ".gitattributes", 0o600 | stat.S_IFCHR, os.makedev(1, 9))
    store = Store(sd_env.home, recover=True)
    caches = StatCaches(store)
    with caplog.at_level(logging.INFO):
        first = capture_in_time(caches, wt)
    assert_raw(store.path, first.tree, wt)
    messages = [r.getMessage() for r in caplog.records]
    assert any("is a device, not a regular file" in m for m in messages), messages
    [seeded] = [m for m in messages if "read again" in m and "seed of" in m]
    assert f": {len(FILES) + 3} file(s)" in seeded, seeded  # both .gitattributes, c.txt
