"""A representative subset of the end-to-end suite, re-run with the ledger on PostgreSQL.

The test bodies are the existing ones, imported unchanged; this module only overrides ``sd_env``
so that every process a test starts (daemon, hooks, CLI) gets ``SNAPSHOTD_LEDGER_URL`` naming a
fresh database of the session cluster (``conftest_pg``). Re-running the whole suite on both
backends would double its ~6.5 minutes, so the subset covers each ledger path the daemon uses:
capture, dedup, concurrent hooks, tool-call repeats, kill -9 and restart (seq allocation), the
listing commands, attempts and fencing (epochs), resume, retention (prune and run deletion),
restore with and without a daemon. ``docs/scale-out.md`` lists them.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
import test_engine
from conftest_pg import pg_cluster, pg_url  # noqa: F401 - fixtures used by name
from test_capture import (  # noqa: F401 - collected here, against PostgreSQL
    test_dedup_chain_deletion_and_rename,
    test_first_capture_is_exactly_the_non_ignored_tree,
    test_kill_9_then_restart_never_reuses_a_seq,
    test_same_tool_use_id_twice_is_one_checkpoint,
    test_sixteen_concurrent_hooks_two_worktrees,
    test_snapshots_json_shape_and_unknown_run,
)
from test_engine import (  # noqa: F401
    agent,
    test_fencing_a_superseded_attempt,
    test_resume_continues_from_the_previous_attempts_last_checkpoint,
)
from test_gc import (  # noqa: F401
    test_keep_last_keeps_newest_and_protected_and_shrinks_the_store,
    test_whole_run_deletion_drops_its_gaps,
)
from test_listing import (  # noqa: F401
    test_runs_lists_every_run_with_counts,
    test_snapshots_default_all_and_filters,
)
from test_restore import (  # noqa: F401
    test_round_trip_ignored_git_and_undo,
    test_without_a_daemon_the_cli_restores_under_the_home_lock,
)

from conftest import Env
from snapshotd.ledger import Ledger


@pytest.fixture
def sd_env(tmp_path: Path, pg_url: str) -> Iterator[Env]:  # noqa: F811
    env = Env(tmp_path)
    env.vars["SNAPSHOTD_LEDGER_URL"] = pg_url
    yield env
    # The imported bodies never look at the ledger's file; make sure none was written.
    assert not (env.home / "snapshotd.db").exists(), "a PostgreSQL-configured test wrote SQLite"
    shutil.rmtree(env.sockdir, ignore_errors=True)


@pytest.fixture(autouse=True)
def _attempt_rows_from_postgresql(monkeypatch: pytest.MonkeyPatch, pg_url: str) -> None:  # noqa: F811
    """test_engine's oracle reads the SQLite file; here the same rows come from PostgreSQL."""

    def attempt_rows(env: Env, run_id: str) -> list[dict]:
        ledger = Ledger(url=pg_url)
        try:
            rows = sorted(ledger.attempts(run_id), key=lambda a: a.key.attempt)
            return [{**a.as_dict(), "pk": a.pk, "zero_setup": int(a.zero_setup)} for a in rows]
        finally:
            ledger.close()

    monkeypatch.setattr(test_engine, "attempt_rows", attempt_rows)
