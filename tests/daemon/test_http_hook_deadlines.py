"""The HTTP hook's threads (``snapshotd.daemon.http_hook.Deadlines`` and ``Workers``): each request's
late reply runs at its deadline unless the capture answered first, several slow captures at once
are each answered within the hook budget by a real daemon, and connections one after another are
served by the same worker thread."""

from __future__ import annotations

import dataclasses
import inspect
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from snapshotd.daemon.http_endpoint import Hook, Timers
from snapshotd.daemon.http_hook import Deadlines, HttpHook
from tests.conftest import Env, claude_payload, make_git_worktree
from tests.daemon.test_http_hook import HTTP_ENV, _auth, _checkpoints, _endpoint, _post
from tests.support.helpers import wait_for


def _same_methods(protocol: type, implementation: type) -> None:
    methods = [name for name, value in vars(protocol).items()
               if inspect.isfunction(value) and not name.startswith("_")]
    assert methods, protocol
    for name in methods:
        promised = inspect.signature(getattr(protocol, name))
        given = inspect.signature(getattr(implementation, name))
        assert [(p.name, p.kind, p.default, p.annotation) for p in given.parameters.values()] \
            == [(p.name, p.kind, p.default, p.annotation)
                for p in promised.parameters.values()], name
        assert given.return_annotation == promised.return_annotation, name


def test_the_endpoint_is_the_hook_its_request_handler_is_given(service) -> None:
    """``http_endpoint`` declares what a request needs of its endpoint (it may not import
    ``http_hook``, which imports it): ``HttpHook`` and its ``Deadlines`` give exactly that."""
    _same_methods(Hook, HttpHook)
    _same_methods(Timers, Deadlines)
    config = dataclasses.replace(service.config, http_hook_port=0)
    hook = HttpHook(service, None, config, "t" * 32)  # type: ignore[arg-type] - never serves
    try:
        for name in Hook.__annotations__:
            assert hasattr(hook, name), name
        assert isinstance(hook.deadlines, Deadlines) and hook.hosts
    finally:
        hook.close()


def test_deadlines_run_in_order_and_cancelled_ones_never() -> None:
    deadlines = Deadlines()
    deadlines.start()
    ran: list[tuple[str, float]] = []
    done = threading.Event()
    started = time.monotonic()

    def note(name: str) -> None:
        ran.append((name, time.monotonic() - started))
        if name == "last":
            done.set()

    deadlines.add(0.6, lambda: note("last"))
    cancelled = deadlines.add(0.2, lambda: note("cancelled"))
    # Nearer than every deadline already waiting: the thread must wake for it.
    deadlines.add(0.1, lambda: note("first"))
    deadlines.add(0.3, lambda: 1 / 0)  # a failing callback does not stop the others
    deadlines.cancel(cancelled)
    assert done.wait(10), f"the last deadline never ran: {ran}"
    assert [name for name, _ in ran] == ["first", "last"]
    assert ran[0][1] >= 0.1 and ran[1][1] >= 0.6
    assert deadlines.pending() == 0
    deadlines.stop()


def test_slow_captures_at_once_are_each_answered_within_the_budget(
        sd_env: Env, make_daemon, tmp_path: Path) -> None:
    daemon = make_daemon(sd_env, {**HTTP_ENV, "SNAPSHOTD_HOOK_TIMEOUT_MS": "400",
                                  "SNAPSHOTD_DELAY_AT": "before-row:2000"})
    addr = _endpoint(daemon)
    auth = _auth(sd_env, addr)
    trees = [make_git_worktree(tmp_path / f"wt{i}") for i in range(4)]

    def post(i: int) -> tuple[int, float]:
        (trees[i] / "slow.txt").write_text(f"slow {i}\n")
        body = json.dumps(claude_payload(trees[i], f"toolu_slow{i}", session_id=f"s{i}"))
        status, _, elapsed = _post(addr, body.encode(), auth)
        return status, elapsed

    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(post, range(4)))
    # Each answered at its own budget while the 2 s captures ran: the four ``late`` replies
    # (below) are the timer's, sent before each capture ended.
    assert [status for status, _ in answers] == [200] * 4
    for i in range(4):
        wait_for(lambda i=i: _checkpoints(sd_env, f"toolu_slow{i}"), what=f"checkpoint {i}")
    assert sd_env.read_gaps() == []
    with daemon.client() as c:
        assert c.status()["http_hook"]["late"] == 4


def test_connections_reuse_idle_threads(sd_env: Env, make_daemon, tmp_path: Path) -> None:
    daemon = make_daemon(sd_env, HTTP_ENV)
    addr = _endpoint(daemon)
    auth = _auth(sd_env, addr)
    wt = make_git_worktree(tmp_path / "wt")
    for i in range(6):
        (wt / "a.txt").write_text(f"{i}\n")
        body = json.dumps(claude_payload(wt, f"toolu_seq{i}")).encode()
        assert _post(addr, body, auth)[0] == 200
        # The worker goes back to waiting once its connection is closed.
        wait_for(lambda: _http_status(daemon)["threads_idle"] >= 1, what="an idle worker")
    assert len(_checkpoints_of(sd_env)) == 6
    status = _http_status(daemon)
    assert status["accepted"] == 6
    assert status["threads_started"] == 1, status


def _http_status(daemon) -> dict:
    with daemon.client() as c:
        return c.status()["http_hook"]


def _checkpoints_of(env: Env) -> list[dict]:
    return env.ledger_query("SELECT seq FROM checkpoints WHERE tool_use_id LIKE ?",
                            ("toolu_seq%",))
