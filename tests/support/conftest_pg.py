"""A throwaway PostgreSQL cluster for the ledger tests: one per session, one database per test.

Owns ``PgCluster`` (``initdb`` + ``pg_ctl start`` in a temp dir, a Unix socket directory and a
free TCP port on 127.0.0.1, stopped at session end) and the fixtures ``pg_cluster`` (session) and
``pg_url`` (a fresh empty database per test, dropped afterwards). PostgreSQL refuses to run as
root, so as root the server runs as the unprivileged ``postgres`` user (``runuser``).

Promises: when no PostgreSQL binaries or no psycopg are found, the fixtures skip with the reason;
they never fall back to SQLite silently. Test modules import the fixtures by name
(``from conftest_pg import pg_cluster, pg_url``); ``bench/ledger.py`` uses ``PgCluster`` too.
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

_BIN_DIRS = ["/usr/local/bin", *sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True)]


def find_pg_bin() -> Path | None:
    """The directory holding ``initdb`` and ``pg_ctl``, or None."""
    found = shutil.which("initdb")
    candidates = ([str(Path(found).parent)] if found else []) + _BIN_DIRS
    for d in candidates:
        if os.access(os.path.join(d, "initdb"), os.X_OK) and \
                os.access(os.path.join(d, "pg_ctl"), os.X_OK):
            return Path(d)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PgCluster:
    """A private PostgreSQL server. ``durable=False`` turns fsync off (tests); the bench keeps
    PostgreSQL's defaults so its numbers mean what production would see."""

    def __init__(self, bindir: Path, *, durable: bool = False) -> None:
        self.bindir = bindir
        self.root = Path(tempfile.mkdtemp(prefix="sdpg", dir="/tmp"))
        self.data = self.root / "data"
        self.sockdir = self.root / "sock"
        self.sockdir.mkdir()
        self.log = self.root / "server.log"
        self.port = _free_port()
        self.durable = durable
        self._user: str | None = None
        if os.geteuid() == 0:
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError:
                raise RuntimeError("running as root and there is no postgres user to run "
                                   "PostgreSQL as") from None
            self._user = "postgres"
            for path in (self.root, self.sockdir):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        self._counter = itertools.count()

    def _run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        cmd = list(args)
        if self._user:
            cmd = ["runuser", "-u", self._user, "--", *cmd]
        return subprocess.run(cmd, capture_output=True, timeout=timeout, cwd=self.root)

    def start(self) -> PgCluster:
        out = self._run(str(self.bindir / "initdb"), "-D", str(self.data), "-U", "postgres",
                        "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
        if out.returncode != 0:
            raise RuntimeError(f"initdb failed: {out.stderr.decode(errors='replace')}")
        opts = [f"-p {self.port}", "-c listen_addresses=127.0.0.1",
                f"-c unix_socket_directories={self.sockdir}", "-c max_connections=100"]
        if not self.durable:
            opts += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        out = self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-l", str(self.log),
                        "-o", " ".join(opts), "-w", "-t", "60", "start")
        if out.returncode != 0:
            log = self.log.read_text(errors="replace") if self.log.exists() else ""
            raise RuntimeError(f"pg_ctl start failed: {out.stderr.decode(errors='replace')}{log}")
        return self

    def stop(self) -> None:
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.data), "-m", "immediate", "-w",
                  "stop", timeout=60)
        shutil.rmtree(self.root, ignore_errors=True)

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def socket_url(self, dbname: str = "postgres") -> str:
        return f"postgresql:///{dbname}?host={self.sockdir}&port={self.port}&user=postgres"

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(sql)

    def create_database(self) -> str:
        name = f"sd_{os.getpid()}_{next(self._counter)}"
        # FILE_COPY of the tiny template0 is the fast path (WAL_LOG copies block by block);
        # PostgreSQL before 15 has no STRATEGY and always copies files.
        import psycopg

        try:
            self._admin(f"CREATE DATABASE {name} TEMPLATE template0 STRATEGY FILE_COPY")
        except psycopg.errors.SyntaxError:
            self._admin(f"CREATE DATABASE {name} TEMPLATE template0")
        return name

    def drop_database(self, name: str) -> None:
        self._admin(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[PgCluster]:
    try:
        import psycopg  # noqa: F401
    except ModuleNotFoundError:
        pytest.skip("psycopg is not installed (pip install 'snapshotd[postgres]')")
    bindir = find_pg_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL binaries (initdb, pg_ctl) on PATH, in /usr/local/bin or in "
                    "/usr/lib/postgresql/*/bin")
    cluster = PgCluster(bindir).start()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def pg_url(pg_cluster: PgCluster) -> Iterator[str]:
    """A fresh, empty database for one test."""
    name = pg_cluster.create_database()
    yield pg_cluster.url(name)
    pg_cluster.drop_database(name)
