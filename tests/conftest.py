"""Shared fixtures: a private home and socket per test, the daemon as a real subprocess,
real git worktrees, and the real hook payload fixtures.

Every test that takes ``sd_env`` (and so every daemon test) runs once per ledger backend named
by ``--ledgers`` (default ``sqlite,postgres``; env ``SNAPSHOTD_TEST_LEDGERS``): ``[sqlite]`` is
the embedded default, ``[postgres]`` points the daemon and the CLI at a fresh database of a
throwaway PostgreSQL cluster (``conftest_pg``) through ``SNAPSHOTD_LEDGER_URL``. Where
PostgreSQL or psycopg is missing the ``[postgres]`` variants skip, saying why. A test whose
checks do not depend on the ledger's backend says so itself: ``@pytest.mark.one_ledger("why")``,
or ``pytestmark = pytest.mark.one_ledger("why")`` for its whole module; it runs on the first
backend of ``--ledgers`` only, unless ``--all-ledgers`` (env ``SNAPSHOTD_TEST_ALL_LEDGERS=1``)
asks for every backend everywhere.

Daemons: take ``daemon`` (one, started, tier 2 kept quiet) or ``make_daemon(env, extra_env,
args=..., start=...)`` for several, restarts and special environments. No test needs to stop a
daemon: when a test ends (``_reap_daemons``) every ``Daemon`` it made is stopped (SIGTERM, then
SIGKILL after a bound, reaped), and so is any other ``snapshotd serve`` whose home lies under
one of its ``Env`` roots or its ``tmp_path`` (one the hook autostarted, say). A daemon that
still escapes fails the session (``_no_daemon_outlives_the_session``, on every xdist worker).
Client-side tests without a daemon take ``short_dir`` (a socket directory) and ``hook_env`` (an
environment naming it); their fake daemon is in ``support/fake_daemon.py``. Helpers shared by
test files (``wait_for``, process lookup, raw frames) are in ``support/helpers.py``.

Git: every process of the session (the controller, each xdist worker) points the git it runs at
a configuration of its own with an identity (``_isolate_git``), so no test depends on the
machine's ``~/.gitconfig`` or ``/etc/gitconfig``; daemons and the CLI (``Env.environ``) keep the
user's view (their own ``XDG_CONFIG_HOME``), which is what they must cope with."""

from __future__ import annotations

import compileall
import inspect
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest

from tests.support.conftest_pg import pg_cluster, pg_url  # noqa: F401 - fixtures used by name
from tests.support.helpers import (
    daemon_of_home,
    daemons_under,
    git,
    stop_daemons_under,
    stop_processes,
)
from tests.support.slow_first import order as order_slow_first

LEDGER_BACKENDS = ("sqlite", "postgres")
REPO = Path(__file__).resolve().parents[1]

def fixtures_dir() -> Path:
    """The agents' hook payloads (tests/fixtures, part of the repository: no test skips for want
    of them)."""
    return Path(__file__).resolve().parent / "fixtures"


def load_payloads(relative: str) -> list[dict]:
    path = fixtures_dir() / relative
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def pytest_configure(config: pytest.Config) -> None:
    """Compile the package's modules once, before any worker starts. The suite starts the
    daemon, the CLI and the hook as processes hundreds of times; where
    ``PYTHONDONTWRITEBYTECODE`` is set (as on stock CI images) each of them would otherwise
    compile every module again (about half a CLI start's CPU)."""
    config.addinivalue_line(
        "markers", "one_ledger(reason): the test's checks do not depend on the ledger's backend "
        "(reason says why); it runs on the first backend of --ledgers only, unless "
        "--all-ledgers")
    _isolate_git(config)
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller compiled them
    for package in ("snapshotd", "client"):
        compileall.compile_dir(REPO / package, quiet=1)


# Who commits in the tests' own git calls: a machine with no global identity must not make
# ``git commit-tree`` (or ``git commit``) ask.
GIT_IDENTITY = {"GIT_AUTHOR_NAME": "snapshotd tests", "GIT_AUTHOR_EMAIL": "tests@snapshotd.invalid",
                "GIT_COMMITTER_NAME": "snapshotd tests",
                "GIT_COMMITTER_EMAIL": "tests@snapshotd.invalid"}


def _isolate_git(config: pytest.Config) -> None:
    """Point every git this process (and what it starts with its environment) runs at a global
    configuration written here, with no system one and ``GIT_IDENTITY``; any other ``GIT_*``
    variable of the caller (``GIT_DIR`` from a git hook, say) is dropped. Undone when the session
    ends. A test that wants a hostile user configuration gives its daemon a ``HOME`` of its own
    (test_user_config.py): ``Env.environ`` drops these variables like every ``GIT_*`` one."""
    saved = {k: v for k, v in os.environ.items() if k.startswith("GIT_")}
    directory = Path(tempfile.mkdtemp(prefix="sd-git-"))
    gitconfig = directory / "gitconfig"
    gitconfig.write_text(f"[user]\n\tname = {GIT_IDENTITY['GIT_COMMITTER_NAME']}\n"
                         f"\temail = {GIT_IDENTITY['GIT_COMMITTER_EMAIL']}\n")
    for name in saved:
        del os.environ[name]
    os.environ.update(GIT_IDENTITY, GIT_CONFIG_GLOBAL=str(gitconfig), GIT_CONFIG_NOSYSTEM="1")

    def restore() -> None:
        for name in [k for k in os.environ if k.startswith("GIT_")]:
            del os.environ[name]
        os.environ.update(saved)
        shutil.rmtree(directory, ignore_errors=True)

    config.add_cleanup(restore)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--ledgers", default=os.environ.get("SNAPSHOTD_TEST_LEDGERS",
                                                         ",".join(LEDGER_BACKENDS)),
                     help="comma-separated ledger backends the daemon tests run against "
                          "(sqlite, postgres)")
    parser.addoption("--all-ledgers", action="store_true",
                     default=os.environ.get("SNAPSHOTD_TEST_ALL_LEDGERS", "") == "1",
                     help="run the one_ledger tests on every backend of --ledgers too")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The known-slow tests first (``support/slow_first.py``): on three workers the suite's
    wall time is otherwise set by whichever 30 s test happened to start last. Deterministic, so
    every xdist worker collects the same order."""
    order_slow_first(items)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ledger_backend" not in metafunc.fixturenames:
        return
    chosen = [b.strip() for b in metafunc.config.getoption("--ledgers").split(",") if b.strip()]
    unknown = sorted(set(chosen) - set(LEDGER_BACKENDS))
    if unknown or not chosen:
        raise pytest.UsageError(f"--ledgers: unknown backend(s) {unknown}; "
                                f"choose from {', '.join(LEDGER_BACKENDS)}")
    if "pg_url" in inspect.signature(metafunc.function).parameters:
        # A PostgreSQL test of its own (it names pg_url): its Env runs on that database only.
        chosen = [b for b in chosen if b == "postgres"]
    elif one_ledger_reason(metafunc.definition) and not metafunc.config.getoption("--all-ledgers"):
        chosen = chosen[:1]
    metafunc.parametrize("ledger_backend", chosen)


def one_ledger_reason(item: pytest.Item) -> str:
    """Why the test runs on one ledger backend only (its own ``one_ledger`` mark, else its
    class's or module's), or "" when it runs on each. A mark without a reason is a usage error:
    the reason is what a reader weighs before turning the second backend back on."""
    marker = item.get_closest_marker("one_ledger")
    if marker is None:
        return ""
    reason = marker.args[0] if len(marker.args) == 1 and not marker.kwargs else None
    if not isinstance(reason, str) or not reason.strip():
        raise pytest.UsageError(f"{item.nodeid}: one_ledger takes one reason, a non-empty string")
    return reason


class Env:
    """A private snapshotd world: home, socket, gap spool, config dir, and the ledger (the
    SQLite file under home, or a PostgreSQL database when ``ledger_url`` is given)."""

    def __init__(self, root: Path, ledger_url: str = "") -> None:
        self.root = root
        self.ledger_url = ledger_url
        self.home = root / "home"
        self.sockdir = Path(tempfile.mkdtemp(prefix="sd", dir="/tmp"))
        _SOCKET_DIRS.append(self.sockdir)
        self.socket = self.sockdir / "s.sock"
        self.gaps = self.home / "gaps.ndjson"
        self.vars = {
            "SNAPSHOTD_HOME": str(self.home),
            "SNAPSHOTD_SOCKET": str(self.socket),
            "SNAPSHOTD_AUTOSTART": "0",
            "XDG_CONFIG_HOME": str(root / "config"),
        }
        if ledger_url:
            self.vars["SNAPSHOTD_LEDGER_URL"] = ledger_url
        _MADE_ENVS.append(self)

    def environ(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SNAPSHOTD_", "CLAUDE_", "GEMINI_", "GIT_"))}
        env.update(self.vars)
        env.update(extra)
        return env

    def ledger_query(self, sql: str, params: tuple = ()) -> list[dict]:
        """Rows of a read-only query on the ledger, read with the backend's own driver (not our
        ledger code). Write the SQL with ``?`` placeholders."""
        if self.ledger_url:
            import psycopg
            from psycopg.rows import dict_row

            with psycopg.connect(self.ledger_url, row_factory=dict_row) as conn:
                return list(conn.execute(sql.replace("?", "%s"), params).fetchall())
        db = sqlite3.connect(f"file:{self.home / 'snapshotd.db'}?mode=ro", uri=True)
        db.row_factory = sqlite3.Row
        try:
            return [dict(r) for r in db.execute(sql, params).fetchall()]
        finally:
            db.close()

    def ledger_intact(self) -> bool:
        """SQLite: ``PRAGMA integrity_check``. PostgreSQL: the server answers and no checkpoint
        identity appears twice (its own crash recovery keeps pages consistent)."""
        if not self.ledger_url:
            db = sqlite3.connect(self.home / "snapshotd.db")
            try:
                return db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            finally:
                db.close()
        dupes = self.ledger_query(
            "SELECT run_id, node_id, iteration, attempt, seq, count(*) AS n FROM checkpoints "
            "GROUP BY run_id, node_id, iteration, attempt, seq HAVING count(*) > 1")
        return dupes == []

    def read_gaps(self) -> list[dict]:
        if not self.gaps.exists():
            return []
        return [json.loads(line) for line in self.gaps.read_text().splitlines() if line]


# Tier-2 captures land whenever writes settle; tests that count tier-1 checkpoints exactly make
# the settle window longer than the test (the watcher's own tests set their windows).
QUIET_WATCHER = {"SNAPSHOTD_SETTLE_MS": "60000", "SNAPSHOTD_MAX_WAIT_MS": "120000"}


class Daemon:
    """``snapshotd serve`` as a real subprocess. Every one made during a test is stopped when
    the test ends (``_reap_daemons``), so a test need not stop its own unless it checks the
    stop itself."""

    def __init__(self, env: Env, extra_env: dict[str, str] | None = None,
                 args: Sequence[str] = ()) -> None:
        self.env = env
        self.extra_env = extra_env or {}
        self.args = list(args)  # after ``serve``
        self.proc: subprocess.Popen | None = None
        self.log = env.root / "daemon.log"
        _MADE_DAEMONS.append(self)

    def start(self, timeout: float = 20.0) -> Daemon:
        logf = open(self.log, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "snapshotd", "serve", *self.args],
            env=self.env.environ(**self.extra_env), stdout=logf, stderr=logf,
            stdin=subprocess.DEVNULL)
        logf.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited {self.proc.returncode}: {self.log.read_text()}")
            if self.ping():
                return self
            time.sleep(0.05)
        raise RuntimeError("daemon did not answer ping: " + self.log.read_text())

    def ping(self) -> bool:
        from snapshotd_client import Client, SnapshotdError

        try:
            with Client(self.env.socket, timeout=2) as c:
                c.ping()
            return True
        except (SnapshotdError, OSError):
            return False

    def client(self, timeout: float = 30.0):
        from snapshotd_client import Client

        return Client(self.env.socket, timeout=timeout)

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM, SIGKILL if it is still running after ``timeout``; always reaped. The exit
        status (None if it never started)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            return self.proc.wait()

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


# ``make_daemon(env, extra_env=None, *, args=(), start=True)``, the factory fixture's type.
MakeDaemon = Callable[..., Daemon]

# What the running test made; ``_reap_daemons`` stops them all when it ends.
_MADE_DAEMONS: list[Daemon] = []
_MADE_ENVS: list[Env] = []
# Every Env's socket directory under /tmp, outside pytest's basetemp: an Env a module-scoped
# fixture made outlives its first test, so they are removed when the session ends.
_SOCKET_DIRS: list[Path] = []


@pytest.fixture(autouse=True)
def _reap_daemons(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test (and after its other fixtures): stop every ``Daemon`` it made, then any
    other ``snapshotd serve`` whose home is under one of its ``Env`` roots or its ``tmp_path``
    (a daemon the hook autostarted, or one a subprocess of the test spawned)."""
    _MADE_DAEMONS.clear()
    _MADE_ENVS.clear()
    yield
    for d in reversed(_MADE_DAEMONS):
        d.stop()
    roots = [env.root for env in _MADE_ENVS]
    tmp = request.node.funcargs.get("tmp_path") if hasattr(request.node, "funcargs") else None
    if tmp is not None:
        roots.append(tmp)
    for env in _MADE_ENVS:
        owner = daemon_of_home(env.home)
        if owner is not None:
            stop_processes([owner])
    for root in roots:
        stop_daemons_under(root)
    _MADE_DAEMONS.clear()
    _MADE_ENVS.clear()


@pytest.fixture(scope="session", autouse=True)
def _remove_socket_dirs() -> Iterator[None]:
    yield
    for path in _SOCKET_DIRS:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="session", autouse=True)
def _no_daemon_outlives_the_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Fail the run if a ``snapshotd serve`` with its home under this process's temporary
    directories (each xdist worker has its own) is still alive once every test has ended;
    stop it either way."""
    yield
    leaked = daemons_under(tmp_path_factory.getbasetemp())
    if not leaked:
        return
    described = [f"pid {p.pid}: {' '.join(p.cmdline())}" for p in leaked]
    stop_processes(leaked)
    pytest.fail("snapshotd daemon(s) outlived the test session: " + "; ".join(described),
                pytrace=False)


@pytest.fixture
def sd_env(tmp_path: Path, ledger_backend: str, request: pytest.FixtureRequest) -> Iterator[Env]:
    url = request.getfixturevalue("pg_url") if ledger_backend == "postgres" else ""
    env = Env(tmp_path, ledger_url=url)
    yield env
    shutil.rmtree(env.sockdir, ignore_errors=True)


@pytest.fixture
def service(sd_env: Env) -> Iterator[object]:
    """The daemon's ``Service`` in process, on ``sd_env``'s home and ledger backend (no socket,
    no watcher): for tests of what a capture or a verification does, with real parts."""
    from snapshotd.core.config import load_config
    from snapshotd.service.service import Service

    svc = Service(sd_env.home, load_config(environ=sd_env.environ()))
    try:
        yield svc
    finally:
        svc.close()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A private directory under /tmp for a socket: AF_UNIX paths are limited to 107 bytes,
    and pytest's ``tmp_path`` can be longer."""
    path = Path(tempfile.mkdtemp(prefix="sd", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def hook_env(short_dir: Path) -> dict[str, str]:
    """An environment for the client side alone (no ``Env``, no daemon): socket, gap spool and
    home in ``short_dir``, autostart off, and none of the caller's snapshotd or agent
    variables."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SNAPSHOTD_", "CLAUDE_", "GEMINI_"))}
    env.update(SNAPSHOTD_SOCKET=str(short_dir / "d.sock"), SNAPSHOTD_AUTOSTART="0",
               SNAPSHOTD_GAPS=str(short_dir / "gaps.ndjson"),
               SNAPSHOTD_HOME=str(short_dir / "home"))
    return env


@pytest.fixture
def make_daemon() -> MakeDaemon:
    """``make_daemon(env, extra_env=None, *, args=(), start=True)``: a ``Daemon`` running
    ``snapshotd serve ARGS``, started (it answers ping) unless ``start=False``. Every one is
    stopped (SIGTERM, then SIGKILL) when the test ends; call it again on the same env to restart
    after ``kill9`` or ``stop``."""

    def make(env: Env, extra_env: dict[str, str] | None = None, *, args: Sequence[str] = (),
             start: bool = True) -> Daemon:
        d = Daemon(env, dict(extra_env) if extra_env else None, args)
        return d.start() if start else d

    return make


@pytest.fixture
def daemon(sd_env: Env, make_daemon: MakeDaemon) -> Daemon:
    return make_daemon(sd_env, QUIET_WATCHER)


def run_hook(env: Env, payload: dict | str, timeout: float = 30.0,
             **extra_env: str) -> subprocess.CompletedProcess:
    """Run the real ``snapshot-hook`` entry point with a payload on stdin."""
    data = payload if isinstance(payload, str) else json.dumps(payload)
    return subprocess.run(
        [sys.executable, "-c", "from snapshotd_client.hook import main; main()"],
        input=data.encode(), env=env.environ(**extra_env), capture_output=True,
        timeout=timeout)


def make_git_worktree(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q", "-b", "main")
    return path


def claude_payload(worktree: Path, tool_use_id: str, *, file_path: str = "hello.txt",
                   session_id: str = "sess-1", event: str = "PostToolUse") -> dict:
    """A real Claude Code PostToolUse payload (from the fixtures) pointed at ``worktree``."""
    base = dict(load_payloads("claude-code/post-tool-use.ndjson")[0])
    base.update(session_id=session_id, cwd=str(worktree), tool_use_id=tool_use_id,
                hook_event_name=event)
    base["tool_input"] = dict(base["tool_input"], file_path=str(worktree / file_path))
    return base
