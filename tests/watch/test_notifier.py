"""The inotify reader behind the watcher: real kernel watches on real directories.

Each test makes file-system changes, reads the notifier and checks what it reported (and what
it did not): every event once and nothing lost, symlinks never followed, ``.git`` not watched,
new and moved directories watched under their new names, the kernel's queue overflow and a
deleted root reported, the watch limit raised.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from snapshotd.watch.notifier import (
    ADDED,
    DELETED,
    MODIFIED,
    OVERFLOW,
    InotifyNotifier,
    open_notifier,
)


def drain(n: InotifyNotifier, settle: float = 0.05) -> list[tuple[int, str]]:
    """Everything queued now (the kernel delivers synchronously; the pause is a margin)."""
    time.sleep(settle)
    out: list[tuple[int, str]] = []
    while True:
        batch = n.read(0)
        if not batch:
            return out
        out.extend(batch)


def rel(events: list[tuple[int, str]], root: Path) -> set[tuple[int, str]]:
    prefix = str(root) + "/"
    return {(c, p[len(prefix):] if p.startswith(prefix) else p) for c, p in events}


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    r = tmp_path / "root"
    r.mkdir()
    return r


def test_files_report_added_modified_deleted_with_their_paths(root: Path) -> None:
    (root / "kept.txt").write_text("a\n")
    n = InotifyNotifier([str(root)])
    try:
        (root / "new.txt").write_text("x\n")
        (root / "kept.txt").write_text("b\n")
        os.chmod(root / "kept.txt", 0o755)
        (root / "new.txt").unlink()
        os.rename(root / "kept.txt", root / "renamed.txt")
        got = rel(drain(n), root)
        assert got == {(ADDED, "new.txt"), (MODIFIED, "new.txt"), (MODIFIED, "kept.txt"),
                       (DELETED, "new.txt"), (DELETED, "kept.txt"), (ADDED, "renamed.txt")}
        assert drain(n) == []  # once
    finally:
        n.close()


def test_new_nested_directories_are_watched_when_their_event_is_read(root: Path) -> None:
    n = InotifyNotifier([str(root)])
    try:
        (root / "a" / "b").mkdir(parents=True)
        got = rel(drain(n), root)
        assert (ADDED, "a") in got
        # Both levels are watched now: later writes anywhere below are reported.
        (root / "a" / "b" / "deep.txt").write_text("x\n")
        (root / "a" / "top.txt").write_text("x\n")
        got = rel(drain(n), root)
        assert {(ADDED, "a/b/deep.txt"), (ADDED, "a/top.txt")} <= got
        assert n.watch_count == 3
    finally:
        n.close()


def test_a_moved_directory_is_reported_and_watched_under_its_new_name(root: Path) -> None:
    (root / "old" / "sub").mkdir(parents=True)
    n = InotifyNotifier([str(root)])
    try:
        os.rename(root / "old", root / "new")
        got = rel(drain(n), root)
        assert got == {(DELETED, "old"), (ADDED, "new")}
        (root / "new" / "sub" / "f.txt").write_text("x\n")
        got = rel(drain(n), root)
        assert got == {(ADDED, "new/sub/f.txt"), (MODIFIED, "new/sub/f.txt")}
        # Moved out of the tree: its watches go; moved back in: watched again.
        outside = root.parent / "outside"
        os.rename(root / "new", outside)
        assert rel(drain(n), root) == {(DELETED, "new")}
        (outside / "sub" / "g.txt").write_text("x\n")
        assert drain(n) == []
        assert n.watch_count == 1
        os.rename(outside, root / "back")
        assert rel(drain(n), root) == {(ADDED, "back")}
        (root / "back" / "sub" / "h.txt").write_text("x\n")
        assert (ADDED, "back/sub/h.txt") in rel(drain(n), root)
    finally:
        n.close()


def test_symlinks_are_never_followed_and_dot_git_is_not_watched(root: Path,
                                                                tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (root / "src").mkdir()
    (root / ".git" / "objects").mkdir(parents=True)
    os.symlink("src", root / "dirlink")
    os.symlink(str(outside), root / "outlink")
    n = InotifyNotifier([str(root)])
    try:
        assert n.watch_count == 2  # root and src: no link target twice, nothing in .git
        (outside / "o.txt").write_text("x\n")
        (root / ".git" / "objects" / "obj").write_text("x\n")
        (root / "dirlink" / "through.txt").write_text("x\n")
        got = rel(drain(n), root)
        assert got == {(ADDED, "src/through.txt"), (MODIFIED, "src/through.txt")}
        (root / "dirlink").unlink()  # the link goes; the real directory stays watched
        (root / "src" / "after.txt").write_text("x\n")
        got = rel(drain(n), root)
        assert got == {(DELETED, "dirlink"), (ADDED, "src/after.txt"),
                       (MODIFIED, "src/after.txt")}
    finally:
        n.close()


def test_names_that_are_not_utf8_come_back_with_surrogate_escapes(root: Path) -> None:
    n = InotifyNotifier([str(root)])
    try:
        name = os.path.join(os.fsencode(root), b"bad-\xff-name")
        with open(name, "wb"):
            pass
        [(change, path)] = drain(n)
        assert change == ADDED and os.fsencode(path) == name
    finally:
        n.close()


def test_a_deleted_root_is_reported_as_the_root(root: Path) -> None:
    n = InotifyNotifier([str(root)])
    try:
        root.rmdir()
        assert (DELETED, str(root)) in drain(n)
    finally:
        n.close()


def test_a_kernel_queue_overflow_is_reported_for_every_root(root: Path, tmp_path: Path) -> None:
    """watchfiles hides this; the watcher must know, since the events behind it are gone."""
    other = tmp_path / "other"
    other.mkdir()
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    if limit > 200_000:
        pytest.skip(f"max_queued_events is {limit}: too many files to make here")
    n = InotifyNotifier([str(root), str(other)])
    try:
        (root / "a").write_text("a\n")
        (root / "b").write_text("b\n")
        # Alternating files: the kernel merges only an event identical to the last one.
        for i in range(limit + 100):
            os.chmod(root / ("a" if i % 2 else "b"), 0o644 if (i // 2) % 2 else 0o600)
        events = drain(n)
        assert {(OVERFLOW, str(root)), (OVERFLOW, str(other))} <= set(events)
        assert len(events) <= limit + 2
    finally:
        n.close()


def test_the_watch_limit_is_raised_at_start_and_on_the_next_read(
        root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import snapshotd.core.faults as faults

    fault = tmp_path / "faults"
    monkeypatch.setattr(faults, "_FAULT_FILE", str(fault))
    fault.write_text("watch=ENOSPC\n")
    with pytest.raises(OSError) as start:
        InotifyNotifier([str(root)])
    assert start.value.errno == errno.ENOSPC
    fault.unlink()
    n = InotifyNotifier([str(root)])
    try:
        fault.write_text("watch=ENOSPC\n")
        (root / "d").mkdir()
        (root / "d" / "f").write_text("x\n")
        time.sleep(0.05)
        first = rel(n.read(0), root)
        assert (ADDED, "d") in first  # what was read is handed over ...
        with pytest.raises(OSError) as later:
            n.read(0)  # ... and the failure comes next
        assert later.value.errno == errno.ENOSPC
    finally:
        n.close()


def _returns(call: Callable[[], object], guard_s: float = 60.0) -> bool:
    """Whether ``call`` returned within ``guard_s`` (a hang guard, far from any real wait)."""
    waiter = threading.Thread(target=call, daemon=True)
    waiter.start()
    waiter.join(guard_s)
    return not waiter.is_alive()


def test_a_missing_root_raises_and_wait_ends_on_interrupt(root: Path, tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        InotifyNotifier([str(tmp_path / "missing")])
    n = open_notifier([str(root)], "auto")
    assert isinstance(n, InotifyNotifier)
    try:
        # Waits of an hour, each in a thread given a minute: one that returns ended on the
        # interrupt (or on what was queued), not on its timeout; no stopwatch.
        threading.Timer(0.1, n.interrupt).start()
        assert _returns(lambda: n.wait(3600))
        (root / "f").write_text("x\n")
        assert _returns(lambda: n.wait(3600))  # something queued: returns at once
        assert rel(n.read(0), root) == {(ADDED, "f"), (MODIFIED, "f")}
    finally:
        n.close()
    with pytest.raises(OSError):
        n.read(0)
