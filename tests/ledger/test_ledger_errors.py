"""The ledger's errors are its own: a database failure leaves a ledger call only as ``LedgerError``
(``LedgerUnavailable`` when the database cannot be opened or reached), on both backends; and what
the ledger absorbs instead of raising (a size it cannot read, a lost connection it reopens) is
logged at warning and counted for ``status``.

Failures are real: a table dropped behind the ledger's back, a file that is not a database, a
PostgreSQL connection terminated by the server, a database dropped while the ledger uses it.
"""

from __future__ import annotations

import logging
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshotd.core.keys import AttemptKey
from snapshotd.ledger.ledger import Ledger, LedgerError, LedgerUnavailable
from tests.conftest import Daemon, Env, make_git_worktree
from tests.support.conftest_pg import PgCluster

KEY = AttemptKey("run", "node", 0, 1)


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'ledger.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def ledger(url: str) -> Iterator[Ledger]:
    led = Ledger(url=url)
    yield led
    led.close()


def _driver_error(exc: BaseException) -> bool:
    cause = exc.__cause__
    return cause is not None and type(cause).__module__.split(".")[0] in ("sqlite3", "psycopg")


def _raw(url: str):  # noqa: ANN202 - a DB-API connection of either kind
    if url.startswith("sqlite"):
        return sqlite3.connect(url.split("://", 1)[1], isolation_level=None)
    import psycopg

    return psycopg.connect(url, autocommit=True)


def test_a_failing_read_and_a_failing_write_raise_ledger_errors(url: str, ledger: Ledger) -> None:
    attempt = ledger.create_attempt(KEY, "/wt")
    raw = _raw(url)
    raw.execute("DROP TABLE tool_calls")
    raw.execute("DROP TABLE checkpoints")
    raw.close()
    with pytest.raises(LedgerError) as read:
        ledger.counts()
    assert _driver_error(read.value) and type(read.value).__module__.startswith("snapshotd.")
    row = {"seq": 0, "commit": "c" * 40, "tree": "t" * 40, "source": "hook", "tier": 1,
           "worktree": "/wt"}
    with pytest.raises(LedgerError) as write:
        ledger.record_checkpoint(attempt, row)
    assert _driver_error(write.value)
    # The failed transaction was rolled back: the ledger still serves what exists.
    assert ledger.get_attempt(KEY) == attempt


def test_errors_of_the_callers_own_code_pass_through_a_transaction(ledger: Ledger) -> None:
    with pytest.raises(KeyError):
        with ledger.transaction():
            raise KeyError("not the ledger's")


def test_a_file_that_is_not_a_database_is_unavailable(tmp_path: Path) -> None:
    path = tmp_path / "snapshotd.db"
    path.write_bytes(b"this is not a SQLite database, whatever its name says\n" * 100)
    with pytest.raises(LedgerUnavailable) as err:
        Ledger(path)
    assert _driver_error(err.value) and str(path) in str(err.value)


def test_a_closed_sqlite_ledger_raises_a_ledger_error(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "snapshotd.db")
    led.close()
    with pytest.raises(LedgerError) as err:
        led.get_attempt(KEY)
    assert _driver_error(err.value)


def test_a_lost_postgres_connection_fails_one_call_then_is_reopened_and_counted(
        pg_url: str, caplog: pytest.LogCaptureFixture) -> None:
    led = Ledger(url=pg_url)
    try:
        led.create_attempt(KEY, "/wt")
        assert led.counters()["reconnects"] == 0
        raw = _raw(pg_url)
        raw.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                    " WHERE application_name = 'snapshotd' AND datname = current_database()")
        raw.close()
        with pytest.raises(LedgerUnavailable) as err:
            led.get_attempt(KEY)
        assert _driver_error(err.value)
        with caplog.at_level(logging.WARNING, logger="snapshotd.ledger"):
            assert led.get_attempt(KEY) is not None  # reopened
        assert led.counters()["reconnects"] == 1
        assert any("was lost; reconnecting" in r.getMessage() for r in caplog.records)
    finally:
        led.close()


def test_a_size_the_ledger_cannot_read_is_logged_and_counted(
        pg_cluster: PgCluster, caplog: pytest.LogCaptureFixture) -> None:
    name = pg_cluster.create_database()
    led = Ledger(url=pg_cluster.url(name))
    try:
        assert isinstance(led.size_bytes(), int)
        pg_cluster.drop_database(name)  # WITH (FORCE): the ledger's connection is cut too
        with caplog.at_level(logging.WARNING, logger="snapshotd.ledger"):
            assert led.size_bytes() is None
        assert led.counters()["size_errors"] == 1
        assert any("could not read the size of the ledger" in r.getMessage()
                   for r in caplog.records)
    finally:
        led.close()


def test_status_shows_the_ledgers_counters(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    with daemon.client() as c:
        c.snapshot(str(wt), run_id="r", node_id="n")
        ledger = c.status()["ledger"]
    assert ledger["dialect"] == ("postgresql" if sd_env.ledger_url else "sqlite")
    assert ledger["size_errors"] == 0
    if sd_env.ledger_url:
        assert ledger["reconnects"] == 0

