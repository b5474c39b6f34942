"""Optional parts extend ops through ``Server.wrap``: wrappers compose in the order of the
server's ``LAYERS``, never in the order the parts attached, and a handler registered after its
wrappers keeps them.

In-process, with real parts: a Service on a real store and ledger, a Server on a real socket,
the real engine and metrics attached in every order.
"""

from __future__ import annotations

import inspect
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from snapshotd.core import LAYERS
from snapshotd.core.config import load_config
from snapshotd.core.registry import Registry
from snapshotd.daemon import metrics
from snapshotd.daemon.daemon import OPTIONAL_PARTS, attach_optional_parts
from snapshotd.daemon.listener import bind_socket
from snapshotd.daemon.server import Server
from snapshotd.features import engine
from snapshotd.service.service import Service
from tests.conftest import Daemon, Env

pytestmark = pytest.mark.one_ledger("how the server composes its wrappers")


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[[str], Server]]:
    made: list[tuple[Service, Server, Path]] = []

    def make(name: str) -> Server:
        sockdir = Path(tempfile.mkdtemp(prefix="sdh", dir="/tmp"))
        service = Service(tmp_path / name / "home", load_config(environ={}))
        server = Server(service, bind_socket(sockdir / "s.sock"))
        made.append((service, server, sockdir))
        return server

    yield make
    for service, server, sockdir in made:
        for hook in server.shutdown_hooks:
            hook()
        server.listener.close()
        service.close()
        shutil.rmtree(sockdir, ignore_errors=True)


def _tracer(trace: list[str], name: str) -> Callable[[dict, Callable[[dict], dict]], dict]:
    def wrapper(fields: dict, inner: Callable[[dict], dict]) -> dict:
        trace.append(f"{name}>")
        out = inner(fields)
        trace.append(f"<{name}")
        return out
    return wrapper


@pytest.mark.parametrize("wrap_order", [list(LAYERS), list(reversed(LAYERS))])
def test_wrappers_run_in_layer_order_whatever_order_they_were_added(
        make_server: Callable[[str], Server], wrap_order: list[str]) -> None:
    server = make_server("w")
    trace: list[str] = []
    for layer in wrap_order:  # before the handler exists: registration order is free too
        server.wrap("echo", _tracer(trace, layer), layer=layer)
    assert server.handler("echo") is None  # wrappers alone do not make an op
    server.register("echo", lambda fields: trace.append("handler") or dict(fields))
    assert server.handler("echo")({"x": 1}) == {"x": 1}  # type: ignore[misc]
    inner_first = list(LAYERS)
    assert trace == [f"{n}>" for n in reversed(inner_first)] + ["handler"] + \
        [f"<{n}" for n in inner_first]
    trace.clear()
    server.register("echo", lambda fields: trace.append("new handler") or {})
    server.handler("echo")({})  # type: ignore[misc]
    assert "new handler" in trace and len(trace) == 1 + 2 * len(LAYERS)


def test_a_layer_is_named_and_holds_one_wrapper_per_op(
        make_server: Callable[[str], Server]) -> None:
    server = make_server("l")
    with pytest.raises(ValueError, match="unknown layer"):
        server.wrap("status", lambda f, n: n(f), layer="nowhere")
    server.wrap("status", lambda f, n: n(f), layer=LAYERS[0])
    with pytest.raises(ValueError, match="already has a wrapper"):
        server.wrap("status", lambda f, n: n(f), layer=LAYERS[0])


def _shape(fn: Callable) -> list[tuple[str, object, object, object]]:
    return [(p.name, p.kind, p.default, p.annotation)
            for p in inspect.signature(fn).parameters.values()]


def test_the_server_is_the_registry_its_parts_are_given(
        make_server: Callable[[str], Server]) -> None:
    """Every member of ``Registry`` exists on a live ``Server``, methods with the very
    parameters (names, kinds, defaults, annotations) and return type the parts are promised."""
    server = make_server("registry")
    assert isinstance(server, Registry)
    methods = [name for name, value in vars(Registry).items()
               if inspect.isfunction(value) and not name.startswith("_")]
    assert sorted(methods) == ["handler", "register", "wrap"]
    for name in methods:
        promised, given = getattr(Registry, name), getattr(Server, name)
        assert _shape(given) == _shape(promised), name
        assert (inspect.signature(given).return_annotation
                == inspect.signature(promised).return_annotation), name
    attributes = Registry.__annotations__
    assert set(attributes) == {"flush_hook", "status_extras", "shutdown_hooks", "on_ready",
                               "on_stopping"}
    for name, annotation in attributes.items():
        value = getattr(server, name)
        if annotation.startswith("list["):
            assert isinstance(value, list) and all(callable(v) for v in value), name
        else:
            assert value is None or callable(value), name


def _watched_extra(server: Server, wt: Path) -> None:
    # What the watcher's status extra reports; metrics joins it into the worktree rows.
    server.status_extras.append(lambda: {"watched": [{"path": str(wt), "state": "watching"}]})


@pytest.mark.parametrize("order", ["engine-metrics-watcher", "watcher-metrics-engine",
                                   "metrics-watcher-engine"])
def test_engine_and_metrics_give_the_same_ops_in_any_attach_order(
        make_server: Callable[[str], Server], tmp_path: Path, order: str) -> None:
    server = make_server(order)
    service = server.service
    wt = tmp_path / order / "wt"
    wt.mkdir(parents=True)
    parts = {"engine": lambda: engine.attach(service, server, service.config),
             "metrics": lambda: metrics.attach(service, server, service.config),
             "watcher": lambda: _watched_extra(server, wt)}
    flushed: list[Path] = []
    for name in order.split("-"):
        parts[name]()
    server.flush_hook = flushed.append  # set after the engine attached: read at call time

    begun = server.handler("attempt_begin")({"run_id": "r", "node_id": "n", "cwd": str(wt),
                                             "resume": False})  # type: ignore[misc]
    assert begun["state"] == "active" and begun["resumed_from"] is None  # engine's layer
    (wt / "f.txt").write_text("one\n")
    server.handler("snapshot")({"cwd": str(wt), "run_id": "r", "node_id": "n"})  # type: ignore[misc]

    status = server.handler("status")({})  # type: ignore[misc]
    assert "engine" in status and "store_bytes" in status and "gap_spool" in status
    [row] = status["worktrees"]
    assert row["path"] == str(wt.resolve()) or row["path"] == str(wt)
    assert row["last_seq"] == 0 and row["attempt"] == "r/n/0/1"
    [watched] = [r for r in status["worktrees"] if r.get("watch")] or [None]
    assert watched is not None and watched["watch"]["state"] == "watching"

    ended = server.handler("attempt_end")({"run_id": "r", "node_id": "n"})  # type: ignore[misc]
    assert ended["state"] == "finished" and flushed == [Path(ended["worktree"])]


def test_a_part_that_is_not_installed_is_logged_and_shown_in_status(
        make_server: Callable[[str], Server], caplog: pytest.LogCaptureFixture) -> None:
    server = make_server("parts")
    with caplog.at_level(logging.WARNING, logger="snapshotd"):
        summary = attach_optional_parts(server.service, server, server.service.config,
                                        parts=("snapshotd.no_such_part", "snapshotd.daemon.metrics"))
    assert summary == {"attached": ["snapshotd.daemon.metrics"], "missing": ["snapshotd.no_such_part"]}
    assert any("snapshotd.no_such_part is not installed" in r.getMessage()
               for r in caplog.records)
    status = server.handler("status")({})  # type: ignore[misc]
    assert status["parts"] == summary and "store_bytes" in status


def test_the_daemon_attaches_every_part_it_ships(sd_env: Env, daemon: Daemon) -> None:
    with daemon.client() as c:
        parts = c.status()["parts"]
    assert parts == {"attached": list(OPTIONAL_PARTS), "missing": []}
