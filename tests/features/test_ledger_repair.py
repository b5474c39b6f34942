"""A damaged SQLite ledger: one clear diagnosis from every command (no traceback), and
``snapshotd repair`` rebuilds it from the store, keeping the damaged file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Daemon, Env, MakeDaemon, make_git_worktree


def _cli(env: Env, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=timeout)


def _identity(listing: dict) -> list[tuple]:
    return [(c["node_id"], c["attempt"], c["seq"], c["commit"], c["label"], c["tool_use_id"])
            for c in listing["checkpoints"]]


def _populate(make_daemon: MakeDaemon, env: Env, tmp_path: Path) -> Path:
    wt = make_git_worktree(tmp_path / "wt")
    done = make_git_worktree(tmp_path / "done")
    daemon = make_daemon(env, QUIET_WATCHER)
    with daemon.client() as c:
        c.attempt_begin("done", "n", str(done))
        for i in range(3):
            (done / "d.txt").write_text(f"{i}\n")
            c.snapshot(str(done), run_id="done", node_id="n", label=f"done {i}",
                       tool_use_id=f"toolu_d{i}")
        c.attempt_end("done", "n", status="finished")
        c.attempt_begin("live", "n", str(wt))
        for i in range(25):
            (wt / f"f{i % 4}.txt").write_text(f"{i}\n")
            c.snapshot(str(wt), run_id="live", node_id="n", label=f"edit {i}",
                       tool_use_id=f"toolu_{i}" if i % 2 else None)
    daemon.stop()
    return wt


def _damage(db: Path, how: str) -> None:
    if how == "truncated":
        with open(db, "r+b") as f:
            f.truncate(db.stat().st_size // 2)
    elif how == "overwritten":
        with open(db, "r+b") as f:
            f.write(b"this is not a database at all " * 8)
    else:
        db.write_bytes(b"")


@pytest.mark.one_ledger("a damaged SQLite file")
@pytest.mark.parametrize("how", ["truncated", "overwritten", "emptied"])
def test_damaged_ledger_is_diagnosed_and_rebuilt(sd_env: Env, tmp_path: Path, how: str,
                                                 make_daemon: MakeDaemon) -> None:
    if sd_env.ledger_url:
        pytest.skip("a damaged ledger file is a SQLite matter")
    wt = _populate(make_daemon, sd_env, tmp_path)
    before = {run: json.loads(_cli(sd_env, "snapshots", run, "--json").stdout)
              for run in ("done", "live")}
    db = sd_env.home / "snapshotd.db"
    _damage(db, how)
    damaged_bytes = db.read_bytes()

    for args in (["runs"], ["runs", "--json"], ["snapshots", "live"],
                 ["snapshots", "live", "--json"], ["serve"]):
        proc = _cli(sd_env, *args, timeout=30)
        assert proc.returncode != 0, (args, proc.stdout)
        assert "Traceback" not in proc.stderr, (args, proc.stderr)
        assert "is damaged" in proc.stderr and str(db) in proc.stderr, (args, proc.stderr)
        assert "snapshotd repair" in proc.stderr, (args, proc.stderr)

    dry = _cli(sd_env, "repair", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr
    report = json.loads(dry.stdout)
    assert report["damage"] and report["kept"] == []
    assert report["rebuilt"]["checkpoints"] == 28
    assert db.read_bytes() == damaged_bytes

    proc = _cli(sd_env, "repair", "--json")
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["rebuilt"]["attempts"] == 2 and report["rebuilt"]["problems"] == []
    kept = [Path(p) for p in report["kept"]]
    assert kept and kept[0].name.startswith("snapshotd.db.damaged-")
    assert kept[0].read_bytes() == damaged_bytes
    for run in ("done", "live"):
        after = json.loads(_cli(sd_env, "snapshots", run, "--json").stdout)
        assert _identity(after) == _identity(before[run])
    again = _cli(sd_env, "repair")
    assert again.returncode == 0 and "nothing to repair" in again.stdout

    daemon = make_daemon(sd_env, QUIET_WATCHER)
    (wt / "new.txt").write_text("after the repair\n")
    with daemon.client() as c:
        reply = c.snapshot(str(wt), run_id="live", node_id="n", tool_use_id="toolu_x")
    assert reply["seq"] == 25 and reply["deduped"] is False


def test_repair_is_refused_while_a_daemon_runs(sd_env: Env, daemon: Daemon) -> None:
    proc = _cli(sd_env, "repair")
    assert proc.returncode == 1
    assert "only while no daemon runs" in proc.stderr and "Traceback" not in proc.stderr


def test_repair_rebuilds_into_an_empty_postgres_database_only(
        sd_env: Env, tmp_path: Path, pg_url: str, pg_cluster,  # noqa: ANN001
        make_daemon: MakeDaemon) -> None:
    _populate(make_daemon, sd_env, tmp_path)
    before = json.loads(_cli(sd_env, "snapshots", "live", "--json").stdout)
    refused = _cli(sd_env, "repair")
    assert refused.returncode == 1 and "rebuilds only into an empty database" in refused.stderr
    name = pg_cluster.create_database()
    try:
        sd_env.vars["SNAPSHOTD_LEDGER_URL"] = pg_cluster.url(name)
        proc = _cli(sd_env, "repair", "--json")
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["rebuilt"]["checkpoints"] == 28
        after = json.loads(_cli(sd_env, "snapshots", "live", "--json").stdout)
        assert _identity(after) == _identity(before)
    finally:
        sd_env.vars["SNAPSHOTD_LEDGER_URL"] = pg_url
        pg_cluster.drop_database(name)
