"""The Ledger contract on both backends (SQLite and PostgreSQL), its races, and a real daemon on a
PostgreSQL ledger.

Every contract test runs twice (``backend`` = sqlite | postgresql) against a real database: a
SQLite file, or a fresh PostgreSQL database from the session cluster in ``conftest_pg``.
Concurrency tests use one ``Ledger`` (one connection) per thread, standing in for daemons on
different hosts sharing the ledger.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from snapshotd.core.keys import AttemptKey
from snapshotd.ledger.ledger import (
    ACTIVE,
    SCHEMA_VERSION,
    Attempt,
    DuplicateToolCall,
    Ledger,
    LedgerError,
    LedgerUnavailable,
    migration_sql,
    open_ledger,
)
from tests.conftest import (
    QUIET_WATCHER,
    Env,
    MakeDaemon,
    claude_payload,
    make_git_worktree,
    run_hook,
)
from tests.support.helpers import open_markers, wait_for, wait_windows_recovered


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A ledger URL on an empty database of the backend under test."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'ledger.db'}"
    return request.getfixturevalue("pg_url")


@pytest.fixture
def ledger(url: str) -> Iterator[Ledger]:
    led = Ledger(url=url)
    yield led
    led.close()


def key(run: str = "run", node: str = "node", attempt: int = 1, iteration: int = 0) -> AttemptKey:
    return AttemptKey(run, node, iteration, attempt)


def row(seq: int, *, tool: str | None = None, tier: int = 1, created_at: float | None = None,
        commit: str | None = None) -> dict:
    return {"seq": seq, "commit": commit or f"{seq:040x}", "tree": f"{seq + 1000:040x}",
            "parent": None if seq == 0 else f"{seq - 1:040x}", "source": "hook", "tier": tier,
            "label": f"label {seq}", "tool_use_id": tool, "worktree": "/wt", "added": seq,
            "modified": 1, "deleted": 0, "skipped": json.dumps([{"path": "big"}]) if seq == 1
            else None, "created_at": created_at if created_at is not None else time.time()}


# -- schema ----------------------------------------------------------------------------------------


def test_migrations_from_an_empty_database(url: str) -> None:
    first = Ledger(url=url)
    try:
        assert first.schema_version() == SCHEMA_VERSION
        # The v2 columns exist: a pruned row round-trips.
        a = first.create_attempt(key(), "/wt")
        first.record_checkpoint(a, row(0))
        first.apply_prune(a, [0], {}, "keep-last", None)
        assert first.attempt_checkpoints(a.pk)[0]["pruned_reason"] == "keep-last"
    finally:
        first.close()
    again = Ledger(url=url)  # reopening migrates nothing and keeps the rows
    try:
        assert again.schema_version() == SCHEMA_VERSION
        assert [c["seq"] for c in again.attempt_checkpoints(a.pk)] == [0]
    finally:
        again.close()


def test_a_version_1_ledger_is_migrated_forward(url: str) -> None:
    dialect = "sqlite" if url.startswith("sqlite") else "postgresql"
    raw = _raw(url)
    raw.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
    for statement in migration_sql(1, dialect):
        raw.execute(statement)
    raw.execute("INSERT INTO schema_version VALUES (1)")
    raw.execute("INSERT INTO attempts (run_id, node_id, iteration, attempt, worktree, state,"
                " started_at) VALUES ('old', 'n', 0, 1, '/wt', 'finished', 1.5)")
    raw.close()
    led = Ledger(url=url)
    try:
        assert led.schema_version() == SCHEMA_VERSION
        old = led.get_attempt(key("old", "n"))
        assert old is not None and old.state == "finished" and old.started_at == 1.5
        led.record_checkpoint(old, row(0))
        led.apply_prune(old, [0], {}, "r", None)
        assert led.attempt_checkpoints(old.pk)[0]["pruned_at"] is not None
    finally:
        led.close()


def test_a_newer_schema_is_refused(url: str) -> None:
    Ledger(url=url).close()
    raw = _raw(url)
    raw.execute(f"UPDATE schema_version SET version = {SCHEMA_VERSION + 1}")
    raw.close()
    with pytest.raises(LedgerError, match="newer than this snapshotd"):
        Ledger(url=url)


def test_ledger_path_is_still_sqlite(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "snapshotd.db")
    try:
        assert led.dialect == "sqlite" and (tmp_path / "snapshotd.db").exists()
        assert led.schema_version() == SCHEMA_VERSION
    finally:
        led.close()


def test_open_ledger_follows_the_configuration(tmp_path: Path, pg_url: str) -> None:  # noqa: F811
    from snapshotd.core.config import load_config

    home = tmp_path / "home"
    default = open_ledger(home, load_config(environ={}, path=tmp_path / "none.toml"))
    try:
        assert default.dialect == "sqlite" and default.path == home / "snapshotd.db"
    finally:
        default.close()
    (tmp_path / "config.toml").write_text(f'ledger_url = "{pg_url}"\n')
    config = load_config(environ={}, path=tmp_path / "config.toml")
    other_home = tmp_path / "other-home"
    shared = open_ledger(other_home, config)
    try:
        assert shared.dialect == "postgresql" and not (other_home / "snapshotd.db").exists()
    finally:
        shared.close()
    env_config = load_config(environ={"SNAPSHOTD_LEDGER_URL": pg_url}, path=tmp_path / "x.toml")
    assert env_config.ledger_url == pg_url and env_config.sources["ledger_url"].startswith("env")


def test_unreachable_postgresql_is_a_clear_error(tmp_path: Path) -> None:
    pytest.importorskip("psycopg")
    with pytest.raises(LedgerUnavailable, match=r"cannot connect .*:\*\*\*@127\.0\.0\.1:1/"):
        Ledger(url="postgresql://u:secret@127.0.0.1:1/none?connect_timeout=2")


def test_bad_ledger_url_is_a_config_error(tmp_path: Path) -> None:
    from snapshotd.core.config import ConfigError, load_config

    with pytest.raises(ConfigError, match="ledger_url"):
        load_config(environ={"SNAPSHOTD_LEDGER_URL": "mysql://x"}, path=tmp_path / "none")


# -- attempts --------------------------------------------------------------------------------------


def test_attempts_epochs_and_states(ledger: Ledger) -> None:
    ledger.ensure_worktree("wt1", "/wt")
    ledger.ensure_worktree("wt1", "/wt")  # idempotent
    assert [ledger.bump_epoch("/wt") for _ in range(3)] == [1, 2, 3]
    assert ledger.bump_epoch("/unknown") == 0
    a1 = ledger.create_attempt(key(), "/wt", epoch=3, owner_pid=4242, settle_ms=10,
                               max_wait_ms=20, zero_setup=True)
    assert isinstance(a1, Attempt) and a1.state == ACTIVE and a1.epoch == 3
    assert a1.owner_pid == 4242 and a1.zero_setup is True and a1.settle_ms == 10
    assert a1.ended_at is None and isinstance(a1.started_at, float)
    same = ledger.create_attempt(key(), "/elsewhere", epoch=9)  # the first row stands
    assert same.pk == a1.pk and same.worktree == "/wt" and same.epoch == 3
    a2 = ledger.create_attempt(key(attempt=2), "/wt")
    other = ledger.create_attempt(key("other-run"), "/wt2")
    assert ledger.last_attempt_number("run", "node", 0) == 2
    assert ledger.last_attempt_number("run", "node", 7) == 0
    assert [a.pk for a in ledger.active_attempts("/wt")] == [a1.pk, a2.pk]
    ledger.set_attempt_state(a1.key, "superseded", ended=True, final_commit="c" * 40)
    ledger.set_attempt_state(a2.key, "interrupted")
    ended = ledger.get_attempt(a1.key)
    assert ended is not None and ended.state == "superseded" and ended.final_commit == "c" * 40
    assert ended.ended_at is not None and ended.ended_at >= ended.started_at
    still = ledger.get_attempt(a2.key)
    assert still is not None and still.ended_at is None and still.final_commit is None
    ledger.set_attempt_state(a1.key, "superseded")  # a None final commit keeps the old one
    assert ledger.get_attempt(a1.key).final_commit == "c" * 40  # type: ignore[union-attr]
    assert [a.pk for a in ledger.active_attempts()] == [other.pk]
    assert [a.key.attempt for a in ledger.attempts("run")] == [1, 2]
    assert len(ledger.attempts()) == 3
    assert ledger.run_ids() == ["run", "other-run"]
    assert ledger.get_attempt(key("nope")) is None
    assert a1.as_dict()["epoch"] == 3


# -- checkpoints -----------------------------------------------------------------------------------


def test_seq_rules_and_row_round_trip(ledger: Ledger) -> None:
    a = ledger.create_attempt(key(), "/wt")
    b = ledger.create_attempt(key(node="n2"), "/wt")
    stamp = 1_700_000_000.123456  # double precision survives (a 32-bit REAL would not)
    ledger.record_checkpoint(a, row(0, created_at=stamp))
    ledger.record_checkpoint(a, row(1, tier=2))
    ledger.record_checkpoint(b, row(0))  # seqs are per attempt
    for stale in (0, 1):
        with pytest.raises(LedgerError, match="not after"):
            ledger.record_checkpoint(a, row(stale))
    ledger.record_checkpoint(a, row(5))  # a jump (seqs taken by a lost row) is allowed
    assert ledger.seqs(a.pk) == {0, 1, 5} and ledger.seqs(b.pk) == {0}
    first = ledger.attempt_checkpoints(a.pk)[0]
    assert first == {
        "run_id": "run", "node_id": "node", "iteration": 0, "attempt": 1, "seq": 0,
        "commit": f"{0:040x}", "tree": f"{1000:040x}", "parent": None, "source": "hook",
        "tier": 1, "label": "label 0", "tool_use_id": None, "worktree": "/wt", "added": 0,
        "modified": 1, "deleted": 0, "skipped": [], "created_at": stamp, "pruned_at": None,
        "pruned_reason": None, "secrets": [], "failed": False, "exit_code": None, "error": None,
        "owner": None, "owner_how": None}
    assert ledger.attempt_checkpoints(a.pk)[1]["skipped"] == [{"path": "big"}]
    last = ledger.last_checkpoint(a.pk)
    assert last is not None and last["seq"] == 5
    assert ledger.last_checkpoint(9999) is None
    assert [c["seq"] for c in ledger.checkpoints("run")] == [0, 1, 5, 0]
    assert [c["seq"] for c in ledger.checkpoints("run", "n2")] == [0]
    assert [c["seq"] for c in ledger.checkpoints("run", "node", 1)] == [0, 1, 5]
    assert ledger.checkpoints("run", "node", 2) == []
    assert ledger.counts() == {"checkpoints": 4, "tier1": 3, "tier2": 1}
    stats = ledger.checkpoint_stats()
    assert stats["run"][0] == 4 and stats["run"][1] is not None


def test_tool_call_idempotency(ledger: Ledger) -> None:
    a = ledger.create_attempt(key(), "/wt")
    ledger.record_checkpoint(a, row(0, tool="toolu_1"))
    assert ledger.tool_call(a.pk, "toolu_1") == {"seq": 0, "commit": f"{0:040x}",
                                                 "tree": f"{1000:040x}", "failed": False,
                                                 "exit_code": None, "error": None}
    ledger.record_tool_call(a, "toolu_1", 7)  # a repeat never remaps the original
    assert ledger.tool_call(a.pk, "toolu_1")["seq"] == 0  # type: ignore[index]
    ledger.record_tool_call(a, "toolu_2", 0)  # a deduplicated call maps to the seq it hit
    assert ledger.tool_call(a.pk, "toolu_2")["seq"] == 0  # type: ignore[index]
    with pytest.raises(DuplicateToolCall) as caught:
        ledger.record_checkpoint(a, row(1, tool="toolu_1"))
    assert caught.value.seq == 0 and caught.value.tool_use_id == "toolu_1"
    assert ledger.seqs(a.pk) == {0}  # the refused row left nothing behind
    assert ledger.tool_call(a.pk, "toolu_missing") is None
    assert ledger.tool_use_ids("run") == {"toolu_1", "toolu_2"}
    assert ledger.covered_tool_calls() == {("run", "toolu_1"), ("run", "toolu_2")}


def test_failed_tool_call_outcome_round_trip(ledger: Ledger) -> None:
    # Schema 6: a failed call's outcome on its checkpoint and on a deduplicated call's row.
    a = ledger.create_attempt(key(), "/wt")
    failed = '{"error": "Exit code 3", "exit_code": 3, "failed": true}'
    ledger.record_checkpoint(a, dict(row(0, tool="toolu_1"), outcome=failed))
    ledger.record_tool_call(a, "toolu_2", 0, '{"failed": true}')
    mark = {"failed": True, "exit_code": 3, "error": "Exit code 3"}
    assert {k: ledger.checkpoints("run")[0][k] for k in mark} == mark
    assert {k: ledger.last_checkpoint(a.pk)[k] for k in mark} == mark  # type: ignore[index]
    assert {k: ledger.tool_call(a.pk, "toolu_1")[k] for k in mark} == mark  # type: ignore[index]
    assert ledger.tool_call(a.pk, "toolu_2")["failed"] is True  # type: ignore[index]
    assert ledger.tool_call(a.pk, "toolu_2")["exit_code"] is None  # type: ignore[index]


def test_prune_delete_and_activity(ledger: Ledger) -> None:
    a = ledger.create_attempt(key(), "/wt")
    for seq in range(4):
        ledger.record_checkpoint(a, row(seq, tool=f"t{seq}", created_at=100.0 + seq))
    ledger.apply_prune(a, [0, 1], {2: ("e" * 40, None), 3: ("f" * 40, "e" * 40)},
                       "keep-last 2", "f" * 40)
    ledger.apply_prune(a, [0], {}, "second reason", None)  # first prune time and reason stay
    cps = ledger.attempt_checkpoints(a.pk)
    assert [c["pruned_reason"] for c in cps] == ["keep-last 2", "keep-last 2", None, None]
    assert cps[0]["pruned_at"] is not None and cps[2]["pruned_at"] is None
    assert (cps[2]["commit"], cps[2]["parent"]) == ("e" * 40, None)
    assert (cps[3]["commit"], cps[3]["parent"]) == ("f" * 40, "e" * 40)
    assert ledger.get_attempt(a.key).final_commit == "f" * 40  # type: ignore[union-attr]
    assert ledger.last_checkpoint(a.pk)["seq"] == 3  # type: ignore[index]
    ledger.apply_prune(a, [2, 3], {}, "all", None)
    assert ledger.last_checkpoint(a.pk) is None  # pruned rows are never "last"
    done = ledger.create_attempt(key("done"), "/wt2")
    ledger.set_attempt_state(done.key, "finished", ended=True)
    idle = ledger.create_attempt(key("idle"), "/wt3")
    activity = {r["run_id"]: r for r in ledger.run_activity()}
    assert activity["run"]["active"] is True and activity["run"]["last_activity"] == 103.0
    assert activity["done"]["active"] is False
    assert activity["idle"]["last_activity"] == idle.started_at
    assert [r["run_id"] for r in ledger.run_activity()][0] == "run"  # oldest activity first
    assert ledger.delete_run("run") == 4
    assert ledger.delete_run("run") == 0
    assert ledger.attempts("run") == [] and ledger.checkpoints("run") == []
    assert ledger.tool_use_ids("run") == set() and ledger.tool_call(a.pk, "t0") is None
    assert ledger.run_ids() == ["done", "idle"]


# -- races: one connection per thread, as daemons on different hosts -----------------------------


def _each(url: str, n: int) -> list[Ledger]:
    return [Ledger(url=url) for _ in range(n)]


def test_different_attempts_never_collide(url: str) -> None:
    setup = Ledger(url=url)
    attempts = [setup.create_attempt(key(node=f"n{i}"), "/wt") for i in range(4)]
    ledgers = _each(url, 4)
    errors: list[BaseException] = []
    start = threading.Barrier(4)

    def work(i: int) -> None:
        try:
            start.wait()
            for seq in range(25):
                ledgers[i].record_checkpoint(attempts[i], row(seq, tool=f"t{i}-{seq}"))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert errors == []
        for a in attempts:
            assert [c["seq"] for c in setup.attempt_checkpoints(a.pk)] == list(range(25))
        assert setup.counts()["checkpoints"] == 100
    finally:
        for led in [setup, *ledgers]:
            led.close()


def _race(ledgers: list[Ledger], attempt: Attempt, rows: list[dict]) -> list[object]:
    """Each ledger records its row at the same moment; what each got (None or the error)."""
    results: list[object] = [None] * len(ledgers)
    start = threading.Barrier(len(ledgers))

    def go(i: int) -> None:
        start.wait()
        try:
            ledgers[i].record_checkpoint(attempt, rows[i])
        except LedgerError as exc:
            results[i] = exc

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(ledgers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results


def test_racing_the_same_seq_exactly_one_wins(url: str) -> None:
    setup = Ledger(url=url)
    attempt = setup.create_attempt(key(), "/wt")
    ledgers = _each(url, 3)
    try:
        for seq in range(15):
            results = _race(ledgers, attempt,
                            [row(seq, commit=f"{i}{seq:039x}") for i in range(3)])
            winners = [i for i, r in enumerate(results) if r is None]
            assert len(winners) == 1, results
            assert all(isinstance(r, LedgerError) for r in results if r is not None)
            cps = setup.attempt_checkpoints(attempt.pk)
            assert len(cps) == seq + 1 and cps[-1]["commit"] == f"{winners[0]}{seq:039x}"
    finally:
        for led in [setup, *ledgers]:
            led.close()


def test_racing_the_same_tool_call_at_different_seqs_is_one_checkpoint(url: str) -> None:
    # Without the attempt row lock both would pass the seq and tool-call checks (their seqs
    # differ, so no key collides) and one tool call would own two checkpoints.
    setup = Ledger(url=url)
    attempt = setup.create_attempt(key(), "/wt")
    ledgers = _each(url, 2)
    try:
        seq = 0
        for round_ in range(15):
            results = _race(ledgers, attempt, [row(seq, tool=f"toolu_{round_}"),
                                               row(seq + 1, tool=f"toolu_{round_}")])
            recorded = [c for c in setup.attempt_checkpoints(attempt.pk)
                        if c["tool_use_id"] == f"toolu_{round_}"]
            assert len(recorded) == 1, (results, recorded)
            assert sum(r is None for r in results) == 1
            assert all(isinstance(r, (DuplicateToolCall, LedgerError))
                       for r in results if r is not None)
            seq += 2
        assert len(setup.tool_use_ids("run")) == 15
    finally:
        for led in [setup, *ledgers]:
            led.close()


def test_concurrent_epoch_bumps_are_all_distinct(url: str) -> None:
    setup = Ledger(url=url)
    setup.ensure_worktree("wt", "/wt")
    ledgers = _each(url, 4)
    got: list[int] = []
    lock = threading.Lock()
    start = threading.Barrier(4)

    def bump(led: Ledger) -> None:
        start.wait()
        for _ in range(10):
            epoch = led.bump_epoch("/wt")
            with lock:
                got.append(epoch)

    threads = [threading.Thread(target=bump, args=(led,)) for led in ledgers]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    try:
        assert sorted(got) == list(range(1, 41))
    finally:
        for led in [setup, *ledgers]:
            led.close()


# -- a real daemon on a PostgreSQL ledger ----------------------------------------------------------


def _cli(env: Env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, timeout=60)


def test_daemon_on_postgresql_hooks_listing_and_kill_9(sd_env: Env, pg_url: str,  # noqa: F811
                                                      tmp_path: Path,
                                                      make_daemon: MakeDaemon) -> None:
    sd_env.vars["SNAPSHOTD_LEDGER_URL"] = pg_url
    wt = make_git_worktree(tmp_path / "wt")
    first = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    for i in range(3):
        (wt / "hello.txt").write_text(f"version {i}\n")
        done = run_hook(sd_env, claude_payload(wt, f"toolu_{i}"))
        assert done.returncode == 0, done.stderr
    out = _cli(sd_env, "snapshots", "claude-sess-1", "--json")
    assert out.returncode == 0, out.stderr
    cps = json.loads(out.stdout)["checkpoints"]
    assert [(c["seq"], c["tool_use_id"]) for c in cps] == [(0, "toolu_0"), (1, "toolu_1"),
                                                          (2, "toolu_2")]
    assert not (sd_env.home / "snapshotd.db").exists()  # nothing went to SQLite
    with closing(Ledger(url=pg_url)) as shared:
        assert [c["commit"] for c in shared.checkpoints("claude-sess-1")] == \
            [c["commit"] for c in cps]
    # The writes opened a settle window (60 s here) that no tool call closes: the kill leaves its
    # marker, and the restart owes a gap and a capture for it (unchanged tree: deduplicated).
    assert wait_for(lambda: open_markers(sd_env.home), timeout=10), "no window opened"
    first.kill9()
    make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))  # restarted on the same ledger
    wait_windows_recovered(sd_env.home)
    assert [g["run_id"] for g in sd_env.read_gaps()
            if g["reason"] == "settle-window-missed"] == ["claude-sess-1"]
    (wt / "hello.txt").write_text("after restart\n")
    assert run_hook(sd_env, claude_payload(wt, "toolu_3")).returncode == 0
    (wt / "hello.txt").write_text("once more\n")
    assert run_hook(sd_env, claude_payload(wt, "toolu_0")).returncode == 0  # a repeat
    cps = json.loads(_cli(sd_env, "snapshots", "claude-sess-1", "--json").stdout)
    assert [c["seq"] for c in cps["checkpoints"]] == [0, 1, 2, 3], cps
    runs = json.loads(_cli(sd_env, "runs", "--json").stdout)["runs"]
    assert [r["run_id"] for r in runs] == ["claude-sess-1"]
    status = _cli(sd_env, "status", "--json")
    assert status.returncode == 0 and "snapshotd.db" not in status.stdout.decode()


def test_serve_refuses_an_unreachable_ledger(sd_env: Env) -> None:
    pytest.importorskip("psycopg")
    out = subprocess.run([sys.executable, "-m", "snapshotd", "serve", "--ledger",
                          "postgresql://u:pw@127.0.0.1:1/x?connect_timeout=2"],
                         env=sd_env.environ(), capture_output=True, timeout=60)
    err = out.stderr.decode()
    assert out.returncode == 1 and "cannot connect" in err and "pw" not in err, err


def _raw(url: str):  # noqa: ANN202 - a DB-API connection of either kind
    """A plain autocommit connection, to shape a database behind the Ledger's back."""
    if url.startswith("sqlite"):
        import sqlite3

        return sqlite3.connect(url.split("://", 1)[1], isolation_level=None)
    import psycopg

    return psycopg.connect(url, autocommit=True)


def test_tool_call_aliases_find_the_call(ledger: Ledger) -> None:
    # Issue 43: a call's other ids (Qwen Code's model call id) each find it, new or deduplicated.
    a = ledger.create_attempt(key(), "/wt")
    ledger.record_checkpoint(a, dict(row(0, tool="toolu_1"), tool_aliases=["call_1"]))
    ledger.record_tool_call(a, "toolu_2", 0, None, ["call_2", "toolu_2"])
    assert ledger.tool_call(a.pk, "call_1")["seq"] == 0  # type: ignore[index]
    assert ledger.tool_call(a.pk, "call_2")["seq"] == 0  # type: ignore[index]
    assert ledger.tool_use_ids("run") == {"toolu_1", "call_1", "toolu_2", "call_2"}
    assert [c["tool_use_id"] for c in ledger.checkpoints("run")] == ["toolu_1"]
