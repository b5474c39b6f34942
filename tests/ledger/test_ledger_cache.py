"""The ledger's read cache (``snapshotd.ledger.cache``): answers from memory are never older than
the last commit, made by this ledger or by another connection, and a stale answer can never
attribute a capture to an attempt that is no longer active. Real SQLite files, a real daemon; a
shared PostgreSQL ledger is read from the database every time."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from snapshotd.core.keys import AttemptKey
from snapshotd.ledger.cache import ReadCache
from snapshotd.ledger.ledger import ACTIVE, Ledger, SeqConflict
from snapshotd_client.client import SnapshotdError
from tests.conftest import Daemon, Env, make_git_worktree
from tests.support.conftest_pg import pg_cluster, pg_url  # noqa: F401 - fixtures used by name


def _row(seq: int, worktree: str, **extra: object) -> dict:
    row = {"seq": seq, "commit": f"{seq:040x}", "tree": f"{seq + 100:040x}", "parent": None,
           "source": "hook", "tier": 1, "label": None, "tool_use_id": f"toolu_{seq}",
           "worktree": worktree, "added": 1, "modified": 2, "deleted": 3,
           "created_at": time.time()}
    row.update(extra)
    return row


def test_reads_come_from_memory_until_another_connection_commits(tmp_path: Path) -> None:
    path = tmp_path / "snapshotd.db"
    ledger = Ledger(path)
    key = AttemptKey("run", "node", 0, 1)
    ledger.ensure_worktree("wt-id", "/w")
    attempt = ledger.create_attempt(key, "/w")
    assert [a.key for a in ledger.active_attempts()] == [key]
    hits = ledger.counters()["cache_hits"]
    assert [a.key for a in ledger.active_attempts()] == [key]
    assert ledger.get_attempt(key) == ledger.get_attempt(key)
    assert ledger.counters()["cache_hits"] > hits  # the cache is in play

    # Another process (the CLI, a repair) ends the attempt on its own connection.
    other = sqlite3.connect(path)
    other.execute("UPDATE attempts SET state='cancelled' WHERE pk=?", (attempt.pk,))
    other.commit()
    other.close()
    assert ledger.active_attempts() == []
    found = ledger.get_attempt(key)
    assert found is not None and found.state == "cancelled"
    assert ledger.counters()["cache_external_changes"] >= 1
    ledger.close()


def test_own_writes_empty_the_cache_before_anyone_reads(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "snapshotd.db")
    first, second = AttemptKey("run", "n", 0, 1), AttemptKey("run", "n", 0, 2)
    ledger.create_attempt(first, "/w")
    assert ledger.last_attempt_number("run", "n", 0) == 1
    assert ledger.get_attempt(second) is None
    ledger.create_attempt(second, "/w")
    assert ledger.last_attempt_number("run", "n", 0) == 2
    assert ledger.get_attempt(second) is not None
    ledger.set_attempt_state(first, "superseded", ended=True)
    assert [a.key for a in ledger.active_attempts("/w")] == [second]
    assert ledger.set_attempt_idle(second, True)
    cached = ledger.get_attempt(second)
    assert cached is not None and cached.idle_since is not None and not cached.working
    ledger.close()


def test_the_recorded_row_is_the_newest_checkpoint_exactly_as_the_database_reads_it(
        tmp_path: Path) -> None:
    path = tmp_path / "snapshotd.db"
    ledger = Ledger(path)
    attempt = ledger.create_attempt(AttemptKey("run", "n", 0, 1), "/w")
    assert ledger.last_checkpoint(attempt.pk) is None  # cached: no row yet
    ledger.record_checkpoint(attempt, _row(0, "/w", skipped='[{"path": "big.bin"}]',
                                          secrets='[{"path": ".env", "rule": "aws"}]'))
    ledger.record_checkpoint(attempt, _row(1, "/w", label="after", parent=f"{0:040x}"))
    cached = ledger.last_checkpoint(attempt.pk)
    fresh = Ledger(path)  # a second connection reads the database itself
    assert cached == fresh.last_checkpoint(attempt.pk)
    assert cached is not None and cached["seq"] == 1 and cached["label"] == "after"
    # What a caller does to its answer does not change the next one.
    cached["seq"] = 99
    again = ledger.last_checkpoint(attempt.pk)
    assert again is not None and again["seq"] == 1
    fresh.close()
    ledger.close()


def test_a_refused_row_leaves_the_newest_checkpoint_as_it_was(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "snapshotd.db")
    attempt = ledger.create_attempt(AttemptKey("run", "n", 0, 1), "/w")
    ledger.record_checkpoint(attempt, _row(3, "/w"))
    with pytest.raises(SeqConflict):
        ledger.record_checkpoint(attempt, _row(2, "/w", tool_use_id="toolu_other"))
    last = ledger.last_checkpoint(attempt.pk)
    assert last is not None and last["seq"] == 3 and last["tool_use_id"] == "toolu_3"
    # Pruning goes through a general transaction: the cached row goes with it.
    ledger.apply_prune(attempt, [3], {}, "test", None)
    assert ledger.last_checkpoint(attempt.pk) is None
    ledger.close()


def test_tool_calls_are_known_from_memory_and_from_other_connections(tmp_path: Path) -> None:
    path = tmp_path / "snapshotd.db"
    ledger = Ledger(path)
    attempt = ledger.create_attempt(AttemptKey("run", "n", 0, 1), "/w")
    assert ledger.tool_call(attempt.pk, "toolu_0") is None
    ledger.record_checkpoint(attempt, _row(0, "/w"))
    found = ledger.tool_call(attempt.pk, "toolu_0")
    assert found is not None and found["seq"] == 0 and found["commit"] == f"{0:040x}"
    ledger.record_tool_call(attempt, "toolu_dedup", 0)  # an unchanged tree's tool call
    again = ledger.tool_call(attempt.pk, "toolu_dedup")
    assert again is not None and again["seq"] == 0
    hits = ledger.counters()["cache_hits"]
    assert ledger.tool_call(attempt.pk, "toolu_new") is None
    assert ledger.counters()["cache_hits"] > hits  # a new tool call costs no query

    other = sqlite3.connect(path)
    other.execute("INSERT INTO tool_calls (attempt_pk, tool_use_id, seq, deduped, created_at)"
                  " VALUES (?,?,?,0,?)",
                  (attempt.pk, "toolu_elsewhere", 0, time.time()))
    other.commit()
    other.close()
    elsewhere = ledger.tool_call(attempt.pk, "toolu_elsewhere")
    assert elsewhere is not None and elsewhere["seq"] == 0
    ledger.close()


@pytest.mark.one_ledger(
    "the read cache exists only on SQLite (test_ledger_cache's PostgreSQL test checks that a "
    "shared ledger is never cached)")
def test_a_stale_cache_never_attributes_a_capture(sd_env: Env, daemon: Daemon,
                                                  tmp_path: Path) -> None:
    if sd_env.ledger_url:
        pytest.skip("a PostgreSQL ledger is never cached (daemons may share it)")
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("one\n")
    with daemon.client() as c:
        c.attempt_begin("run-a", "node", str(wt))
        first = c.snapshot(str(wt))
        assert first["run_id"] == "run-a"
        (wt / "a.txt").write_text("two\n")
        assert c.snapshot(str(wt))["run_id"] == "run-a"
        assert c.status()["ledger"]["cache_hits"] > 0

        # The daemon's own fencing: a new attempt supersedes run-a; captures follow it.
        c.attempt_begin("run-b", "node", str(wt))
        (wt / "a.txt").write_text("three\n")
        assert c.snapshot(str(wt))["run_id"] == "run-b"

        # Another connection ends run-b behind the daemon's back: nothing is active there
        # any more, so a capture naming no attempt is refused, not given to run-b.
        db = sqlite3.connect(sd_env.home / "snapshotd.db", timeout=30)
        db.execute("UPDATE attempts SET state='cancelled' WHERE run_id='run-b'")
        db.commit()
        db.close()
        (wt / "a.txt").write_text("four\n")
        with pytest.raises(SnapshotdError) as refused:
            c.snapshot(str(wt))
        assert refused.value.code == "bad-request"
        assert c.status()["active_attempts"] == []
    rows = sd_env.ledger_query("SELECT a.run_id AS run_id, a.state AS state, count(c.seq) AS n"
                               " FROM attempts a LEFT JOIN checkpoints c ON c.attempt_pk = a.pk"
                               " GROUP BY a.pk ORDER BY a.pk")
    assert [(r["run_id"], r["state"], r["n"]) for r in rows] == [
        ("run-a", "superseded", 2), ("run-b", "cancelled", 1)]
    assert ACTIVE not in {r["state"] for r in rows}


def test_a_shared_postgres_ledger_answers_every_read_from_the_database(pg_url: str) -> None:  # noqa: F811
    # Two daemons on two hosts share the ledger: what one ends, the other sees at once.
    here, there = Ledger(url=pg_url), Ledger(url=pg_url)
    try:
        key = AttemptKey(f"run-{time.monotonic_ns()}", "node", 0, 1)
        attempt = here.create_attempt(key, "/shared")
        assert key in {a.key for a in here.active_attempts()}
        assert here.last_attempt_number(key.run_id, "node", 0) == 1
        there.set_attempt_state(key, "cancelled", ended=True)
        there.create_attempt(AttemptKey(key.run_id, "node", 0, 2), "/shared")
        there.record_checkpoint(attempt, _row(0, "/shared"))
        assert key not in {a.key for a in here.active_attempts()}
        found = here.get_attempt(key)
        assert found is not None and found.state == "cancelled"
        assert here.last_attempt_number(key.run_id, "node", 0) == 2
        last = here.last_checkpoint(attempt.pk)
        assert last is not None and last["seq"] == 0
        assert here.counters()["cache_hits"] == 0
        here.delete_run(key.run_id)
    finally:
        here.close()
        there.close()


def _cache_counting_checks(version: int) -> tuple[ReadCache, list[int], list[int]]:
    """A cache whose ``data_version`` is ``versions[0]`` (set it to play another connection's
    commit); every check it runs is appended to ``asked``."""
    versions = [version]
    asked: list[int] = []

    def data_version() -> int:
        asked.append(versions[0])
        return versions[0]

    return ReadCache(True, data_version), versions, asked


def test_one_version_check_serves_the_reads_that_began_before_it() -> None:
    cache, versions, asked = _cache_counting_checks(7)
    queued = time.monotonic_ns()  # a read that began, then waited for the ledger's lock
    time.sleep(0.001)
    assert cache.usable(time.monotonic_ns())
    cache.put("attempts", "k", "row")
    assert cache.usable(queued) and len(asked) == 1  # the check ran after it began: shared
    assert cache.counters()["cache_shared_checks"] == 1
    versions[0] = 8  # another connection commits
    assert cache.usable(time.monotonic_ns())  # a read begun now checks again, and sees it
    assert len(asked) == 2 and cache.tables["attempts"] == {}
    assert cache.counters()["cache_external_changes"] == 1


def _in_thread(target: Callable[[], object]) -> tuple[threading.Thread, list]:
    """``target`` run on a thread of its own; its answer (or exception) lands in the list."""
    out: list = []

    def run() -> None:
        try:
            out.append(target())
        except BaseException as exc:  # noqa: BLE001 - handed to the test to assert on
            out.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _writer_held_open(ledger: Ledger, sql: str,
                      args: tuple) -> tuple[threading.Thread, threading.Event]:
    """A thread inside ``ledger.transaction()``, its statement run, until ``release`` is set
    (returned with the thread, once it is inside)."""
    inside, release = threading.Event(), threading.Event()

    def write() -> None:
        with ledger.transaction() as db:
            db.execute(sql, args)
            inside.set()
            release.wait(30)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    assert inside.wait(10)
    return writer, release


def test_cached_reads_during_a_write_answer_as_before_its_commit_without_waiting(
        tmp_path: Path) -> None:
    """A write holds the ledger's one connection (and lock) from BEGIN to COMMIT; reads the
    cache can answer do not wait for it, and answer the state before the commit, which is the
    database's state until then. Reads after the commit see it."""
    ledger = Ledger(tmp_path / "snapshotd.db")
    key = AttemptKey("run", "node", 0, 1)
    attempt = ledger.create_attempt(key, "/w")
    ledger.record_checkpoint(attempt, _row(0, "/w"))
    assert ledger.get_attempt(key) is not None and ledger.last_checkpoint(attempt.pk)
    assert [a.key for a in ledger.active_attempts()] == [key]
    assert ledger.tool_call(attempt.pk, "toolu_new") is None

    writer, release = _writer_held_open(
        ledger, "UPDATE attempts SET state='cancelled' WHERE pk=?", (attempt.pk,))
    reader, answers = _in_thread(lambda: (
        ledger.get_attempt(key), ledger.last_checkpoint(attempt.pk),
        ledger.active_attempts("/w"), ledger.tool_call(attempt.pk, "toolu_new")))
    reader.join(5)
    answered_inside = not reader.is_alive()
    release.set()
    writer.join(10)
    reader.join(10)
    assert answered_inside, "a cached read waited for another thread's write to commit"
    found, last, active, tool = answers[0]
    assert found is not None and found.state == ACTIVE
    assert last is not None and last["seq"] == 0
    assert [a.key for a in active] == [key] and tool is None
    assert ledger.counters()["cache_window_hits"] >= 4
    # Once it committed, nothing reads the state before it.
    after = ledger.get_attempt(key)
    assert after is not None and after.state == "cancelled"
    assert ledger.active_attempts() == []
    ledger.close()


def test_a_read_the_cache_cannot_answer_during_a_write_waits_for_its_commit(
        tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "snapshotd.db")
    ledger.create_attempt(AttemptKey("run", "node", 0, 1), "/w")
    writer, release = _writer_held_open(
        ledger, "INSERT INTO attempts (run_id, node_id, iteration, attempt, worktree, state,"
        " epoch, zero_setup, started_at) VALUES ('run', 'other', 0, 3, '/w', 'active', 0, 0, 0)",
        ())
    reader, answers = _in_thread(lambda: ledger.last_attempt_number("run", "other", 0))
    reader.join(0.3)
    waited = reader.is_alive()
    release.set()
    writer.join(10)
    reader.join(10)
    assert waited, "a read the cache could not answer used the connection inside a write"
    assert answers == [3]
    ledger.close()


def test_another_connections_commit_before_a_write_is_never_answered_from_memory_during_it(
        tmp_path: Path) -> None:
    """The window in which reads skip the lock opens only after the write's ``BEGIN IMMEDIATE``
    checked ``data_version``: a commit by the CLI just before the write empties the cache."""
    path = tmp_path / "snapshotd.db"
    ledger = Ledger(path)
    key = AttemptKey("run", "node", 0, 1)
    attempt = ledger.create_attempt(key, "/w")
    other_key = AttemptKey("run", "node", 0, 2)
    ledger.create_attempt(other_key, "/w")
    assert ledger.get_attempt(key) is not None  # cached: active
    other = sqlite3.connect(path)
    other.execute("UPDATE attempts SET state='cancelled' WHERE pk=?", (attempt.pk,))
    other.commit()
    other.close()

    writer, release = _writer_held_open(
        ledger, "UPDATE attempts SET idle_since=1 WHERE run_id='run' AND attempt=2", ())
    reader, answers = _in_thread(lambda: ledger.get_attempt(key))
    reader.join(0.3)
    release.set()
    writer.join(10)
    reader.join(10)
    found = answers[0]
    assert found is not None and found.state == "cancelled"
    ledger.close()


def test_the_window_serves_only_while_open_and_only_other_threads() -> None:
    cache = ReadCache(True, lambda: 1)
    assert cache.usable(time.monotonic_ns())
    cache.put("attempts", "k", "row")

    def unlocked(key: str) -> tuple[bool, object]:
        return cache.unlocked("attempts", key, time.monotonic_ns())

    assert unlocked("k") == (False, None)  # no write open, no check since the call
    with cache.window(time.monotonic_ns()):
        assert unlocked("k") == (False, None)  # the writer's own thread
        thread, out = _in_thread(lambda: unlocked("k"))
        thread.join(10)
        assert out == [(True, "row")]
        thread, out = _in_thread(lambda: unlocked("missing"))
        thread.join(10)
        assert out == [(False, None)]
    thread, out = _in_thread(lambda: unlocked("k"))
    thread.join(10)
    assert out == [(False, None)]
    assert cache.counters()["cache_window_hits"] == 1


def test_a_requests_reads_share_one_check_made_after_it_began() -> None:
    cache, versions, asked = _cache_counting_checks(1)
    began = time.monotonic_ns()  # a request begins
    time.sleep(0.001)
    assert cache.usable(time.monotonic_ns())  # another request's read checks
    cache.put("attempts", "k", "row")
    with cache.reads_since(began):
        # Every read of the request, however late, is served by that check, without the lock.
        assert cache.unlocked("attempts", "k", cache.called_ns()) == (True, "row")
        assert cache.unlocked("attempts", "k", cache.called_ns()) == (True, "row")
    assert len(asked) == 1 and cache.counters()["cache_unlocked_hits"] == 2
    # A request that began after the check is not answered by it: another connection may
    # have committed since.
    versions[0] = 2
    with cache.reads_since(time.monotonic_ns()):
        assert cache.unlocked("attempts", "k", cache.called_ns()) == (False, None)
        assert cache.usable(cache.called_ns()) and cache.tables["attempts"] == {}
    assert len(asked) == 2
    # Outside a request, a read is as of its own call.
    assert cache.called_ns() > began


def test_a_capture_never_sees_an_attempt_state_committed_before_its_request_began(
        tmp_path: Path) -> None:
    """Another connection ends the attempt; a request that begins after that commit is never
    answered from memory as if it were still active, however many reads came before."""
    path = tmp_path / "snapshotd.db"
    ledger = Ledger(path)
    key = AttemptKey("run", "node", 0, 1)
    ledger.create_attempt(key, "/w")
    with ledger.reads_since(time.monotonic_ns()):
        found = ledger.get_attempt(key)
        assert found is not None and found.state == ACTIVE
    other = sqlite3.connect(path)
    other.execute("UPDATE attempts SET state='cancelled'")
    other.commit()
    other.close()
    with ledger.reads_since(time.monotonic_ns()):
        found = ledger.get_attempt(key)
        assert found is not None and found.state == "cancelled"
        assert ledger.active_attempts() == []
    ledger.close()


def test_a_check_that_failed_serves_no_read() -> None:
    """A ``data_version`` check that raised verified nothing: a read that began before it must
    check again, never be answered from memory on its strength."""
    versions: list[int | Exception] = [1]

    def data_version() -> int:
        if isinstance(versions[0], Exception):
            raise versions[0]
        return versions[0]

    cache = ReadCache(True, data_version)
    assert cache.usable(time.monotonic_ns())
    cache.put("attempts", "k", "row")
    queued = time.monotonic_ns()
    time.sleep(0.001)
    versions[0] = OSError("disk I/O error")
    with pytest.raises(OSError):
        cache.usable(time.monotonic_ns())
    assert cache.unlocked("attempts", "k", queued) == (False, None)
    versions[0] = 2  # another connection committed before the read began
    assert cache.usable(queued) and cache.tables["attempts"] == {}
