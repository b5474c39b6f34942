"""Cookie round trips of one notifier group (``snapshotd.watch.notifier_group``), on real kernel
watches: a ``sync`` proves every event queued before it was dispatched, whether its cookie is a
new file or (inotify) one sent before whose round trip came back; cookies sent again never
leave a directory entry behind per sync, and one that did not come back is never sent again."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from snapshotd.watch.notifier_group import NotifierGroup


class Seen:
    """What a group dispatched: cookies handed back to it, every other path recorded."""

    def __init__(self) -> None:
        self.paths: set[str] = set()
        self.lock = threading.Lock()

    def dispatch(self, group: NotifierGroup, events: Iterable[tuple[int, str]]) -> None:
        for _change, path in events:
            if path.startswith(group.cookie_prefix):
                group.cookie_seen(path[len(group.cookie_prefix):])
            else:
                with self.lock:
                    self.paths.add(path)

    def has(self, path: Path) -> bool:
        with self.lock:
            return str(path) in self.paths


@contextmanager
def _group(tmp_path: Path, kind: str, seen: Seen) -> Iterator[NotifierGroup]:
    """A running group over ``tmp_path/wt``, retired and joined after the block."""
    root = tmp_path / "wt"
    root.mkdir()
    failures: list[BaseException] = []
    group = NotifierGroup(tmp_path / "home", [str(root)], kind, seen.dispatch,
                          lambda _g, exc: failures.append(exc), lambda *args: None)
    group.start()
    try:
        yield group
    finally:
        group.retire()
        group.join()
    assert failures == []


def test_a_cookie_sent_again_proves_what_was_written_before_it(tmp_path: Path) -> None:
    seen = Seen()
    with _group(tmp_path, "auto", seen) as group:
        for i in range(30):
            written = tmp_path / "wt" / f"f{i}.txt"
            written.write_text(str(i))
            assert group.sync(5.0)
            assert seen.has(written), f"sync {i} returned before the write's event came"
        # One cookie, sent thirty times: no file created and removed per round trip.
        assert [p.name for p in group.cookie_dir.iterdir()] == ["c0"]


def test_concurrent_syncs_each_wait_for_their_own_cookie(tmp_path: Path) -> None:
    seen = Seen()
    missed: list[str] = []

    def work(t: int) -> None:
        for i in range(25):
            written = tmp_path / "wt" / f"t{t}-{i}.txt"
            written.write_text("x")
            if not group.sync(5.0) or not seen.has(written):
                missed.append(written.name)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    with _group(tmp_path, "auto", seen) as group:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert missed == []
        # At most one cookie for each sync that ran at the same time.
        assert 1 <= len(list(group.cookie_dir.iterdir())) <= 8


def test_a_cookie_that_did_not_come_back_is_never_sent_again(tmp_path: Path) -> None:
    seen = Seen()
    with _group(tmp_path, "auto", seen) as group:
        assert group.sync(5.0)
        group._drain.acquire()  # the reader and every sync wait: no cookie can come back
        try:
            assert not group.sync(0.05)
        finally:
            group._drain.release()
        # c0 was sent again and did not come back: it is gone, and the next sync sends a new
        # cookie, which an event of c0 still on its way can never be taken for.
        assert list(group.cookie_dir.iterdir()) == []
        assert group.sync(5.0)
        assert [p.name for p in group.cookie_dir.iterdir()] == ["c1"]


@pytest.mark.parametrize("kind", ["watchfiles"])
def test_a_polled_notifier_sends_a_new_cookie_each_time(tmp_path: Path, kind: str) -> None:
    seen = Seen()
    with _group(tmp_path, kind, seen) as group:
        for _ in range(3):
            assert group.sync(10.0)
        assert list(group.cookie_dir.iterdir()) == []
