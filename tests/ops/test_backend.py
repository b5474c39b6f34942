"""``snapshotd.ops.backend.run_op``: the daemon when one answers, else the home under its lock.

Real daemon, real home lock (``flock`` on ``<home>/daemon.lock``), real ledger; the op's local
twin records whether it ran, so a test sees which path was taken.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

import pytest

from snapshotd.core.errors import NOT_FOUND, ServiceError
from snapshotd.ops import backend
from tests.conftest import (
    QUIET_WATCHER,
    Env,
    MakeDaemon,
    claude_payload,
    make_git_worktree,
    run_hook,
)

RUN = "claude-sess-1"


@pytest.fixture
def env_vars(sd_env: Env, monkeypatch: pytest.MonkeyPatch) -> Env:
    """This process sees the test's home, socket and config, as the CLI would."""
    for key in [k for k in os.environ if k.startswith("SNAPSHOTD_")]:
        monkeypatch.delenv(key)
    for key, value in sd_env.vars.items():
        monkeypatch.setenv(key, value)
    return sd_env


@pytest.fixture
def captured(env_vars: Env, tmp_path: Path, make_daemon: MakeDaemon) -> Env:
    """A home with one checkpoint of RUN, its daemon stopped."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    d = make_daemon(env_vars, QUIET_WATCHER)
    assert run_hook(env_vars, claude_payload(wt, "toolu_a")).returncode == 0
    assert d.stop() == 0
    return env_vars


def restore_fields(run_id: str) -> dict:
    return {"run_id": run_id, "node_id": "session", "seq": 0, "iteration": None,
            "attempt": None, "to": None, "dry_run": True, "force": False}


def restore_locally(ran: list[str]):  # noqa: ANN201 - the op's local twin, recording its call
    from snapshotd.features.restore.restore import restore_checkpoint

    def local(service):  # noqa: ANN001, ANN202
        ran.append("local")
        return restore_checkpoint(service, run_id=ran[0], node_id="session", seq=0,
                                  dry_run=True)

    return local


def test_without_a_ledger_nothing_runs_and_the_home_is_not_created(env_vars: Env) -> None:
    ran: list[str] = [RUN]
    with pytest.raises(backend.NoLedger) as info:
        backend.run_op("restore", restore_fields(RUN), restore_locally(ran))
    assert info.value.code == NOT_FOUND and "nothing has been captured" in info.value.message
    assert ran == [RUN] and not env_vars.home.exists()


def test_the_daemon_runs_the_op_and_refuses_as_the_local_twin_does(
        captured: Env, make_daemon: MakeDaemon) -> None:
    d = make_daemon(captured, QUIET_WATCHER)
    ran: list[str] = [RUN]
    plan = backend.run_op("restore", restore_fields(RUN), restore_locally(ran))
    assert ran == [RUN]  # the daemon answered: the local twin never ran
    assert plan["dry_run"] is True and plan["seq"] == 0
    with pytest.raises(ServiceError) as remote:
        backend.run_op("restore", restore_fields("nope"), restore_locally(["nope"]))
    assert d.stop() == 0  # the same op again, with no daemon: the local twin runs
    ran = ["nope"]
    with pytest.raises(ServiceError) as local:
        backend.run_op("restore", restore_fields("nope"), restore_locally(ran))
    assert ran == ["nope", "local"]
    assert remote.value.code == local.value.code == NOT_FOUND
    assert "unknown run 'nope'" in remote.value.message
    assert "unknown run 'nope'" in local.value.message


def test_a_held_home_lock_is_waited_for_then_refused(captured: Env) -> None:
    fd = os.open(captured.home / "daemon.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        started = time.monotonic()
        ran: list[str] = [RUN]
        with pytest.raises(backend.DaemonSilent) as info:
            backend.run_op("restore", restore_fields(RUN), restore_locally(ran))
        assert time.monotonic() - started >= backend.LOCK_RETRY_S
        assert ran == [RUN] and "does not answer" in info.value.message
        # Released while run_op waits (a daemon that gave up starting): the op runs locally.
        threading.Timer(0.5, fcntl.flock, (fd, fcntl.LOCK_UN)).start()
        plan = backend.run_op("restore", restore_fields(RUN), restore_locally(ran))
        assert ran == [RUN, "local"] and plan["seq"] == 0
    finally:
        os.close(fd)
