"""``status`` (every documented field, sane after real captures; exit 3 with no daemon),
logging (quiet per capture, journald priorities under systemd), and configuration precedence
(flag > env > file > default) with errors that name the key."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from snapshotd import __version__
from snapshotd_client.gaps import append_gap, make_gap
from tests.conftest import Daemon, Env, MakeDaemon, make_git_worktree
from tests.support.helpers import wait_for


def cli(env: Env, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(**extra),
                          capture_output=True, text=True, timeout=60)


def tree_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


# -- status ----------------------------------------------------------------------------------


def test_status_json_has_every_field_with_sane_values_after_captures(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    seqs = []
    with daemon.client() as c:
        for i in range(5):
            (wt / f"f{i}.txt").write_text(f"content {i}\n" * 100)
            cp = c.snapshot(str(wt), run_id="stat", node_id="impl", tool_use_id=f"t{i}")
            seqs.append(cp["seq"])
        dedup = c.snapshot(str(wt), run_id="stat", node_id="impl", tool_use_id="t-same")
        assert dedup["deduped"]
        try:
            c.snapshot(str(tmp_path / "missing"), run_id="gone", node_id="impl")
        except Exception as exc:  # noqa: BLE001 - the daemon records a gap and says so
            assert "worktree-missing" in str(exc) or getattr(exc, "code", "") == "worktree-missing"
        else:
            raise AssertionError("a capture of a missing directory succeeded")
        last_capture = time.time()
    # A gap written by a hook while the daemon was unreachable: only the spool knows it.
    append_gap(make_gap(run_id="stat", node_id="impl", iteration=0, attempt=1,
                        worktree=str(wt), tier=1, source="hook", tool_use_id="t-lost",
                        reason="daemon-unavailable", detail="test"), sd_env.gaps)

    result = cli(sd_env, "status", "--json")
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)

    assert info["running"] is True
    assert info["pid"] == daemon.proc.pid
    assert info["version"] == __version__
    assert 0 < info["uptime_s"] < 600
    assert Path(info["home"]) == sd_env.home.resolve()
    assert info["socket"] == str(sd_env.socket)

    store = sd_env.home / "store.git"
    assert 0 < info["store_bytes"] and abs(info["store_bytes"] - tree_size(store)) \
        <= 0.5 * tree_size(store)
    if sd_env.ledger_url:  # the PostgreSQL database's own size
        assert info["ledger_bytes"] > 0 and not (sd_env.home / "snapshotd.db").exists()
    else:
        assert info["ledger_bytes"] >= (sd_env.home / "snapshotd.db").stat().st_size > 0
    spool = info["gap_spool"]
    assert spool["path"] == str(sd_env.gaps) and spool["bytes"] == sd_env.gaps.stat().st_size
    assert spool["by_reason"] == {"daemon-unavailable": 1, "worktree-missing": 1}

    counters = info["counters"]
    assert counters["captures_tier1"] == 5
    assert counters["dedups"] >= 1
    assert "captures_tier2" in counters
    assert info["gaps_by_reason"] == {"worktree-missing": 1}
    t1 = info["latency_ms"]["tier1"]
    assert t1["count"] >= 6 and 0 < t1["p50"] <= t1["p99"]
    assert set(info["latency_ms"]) >= {"tier1", "tier2"}

    rows = [r for r in info["worktrees"] if r["path"] == str(wt.resolve())]
    assert len(rows) == 1, info["worktrees"]
    row = rows[0]
    assert row["attempt"] == "stat/impl/0/1" and row["state"] == "active"
    assert row["last_seq"] == max(seqs) == 4
    assert 0 <= row["last_checkpoint_age_s"] <= time.time() - last_capture + 60
    assert "degraded_reason" in row

    proc = info["process"]
    real_rss = psutil.Process(daemon.proc.pid).memory_info().rss
    assert real_rss / 3 < proc["rss_bytes"] < real_rss * 3
    assert proc["cpu_user_s"] + proc["cpu_system_s"] > 0
    assert proc["cpu_percent"] >= 0 and proc["cpu_percent_avg"] >= 0
    assert proc["threads"] >= 1

    assert info["config"]["durability"] == "process"
    assert info["config"]["sources"]["durability"] == "default"
    assert info["log_level"] == "info"

    text = cli(sd_env, "status")
    assert text.returncode == 0, text.stderr
    for expected in (f"pid {daemon.proc.pid}", str(wt.resolve()), "stat/impl/0/1",
                     "tier 1: 5", "worktree-missing=1", "daemon-unavailable=1", "RSS", "p99"):
        assert expected in text.stdout, (expected, text.stdout)


@pytest.mark.one_ledger("the CLI without a daemon")
def test_status_with_no_daemon_says_so_and_exits_3(sd_env: Env) -> None:
    result = cli(sd_env, "status")
    assert result.returncode == 3
    assert "no daemon is running" in result.stderr and str(sd_env.socket) in result.stderr
    as_json = cli(sd_env, "status", "--json")
    assert as_json.returncode == 3
    assert json.loads(as_json.stdout) == {"running": False, "socket": str(sd_env.socket)}

    # A stale socket file left by a killed daemon is "not running" too, not a crash.
    stale = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    stale.bind(str(sd_env.socket))
    stale.close()
    assert cli(sd_env, "status").returncode == 3


@pytest.mark.one_ledger("the CLI without a daemon")
def test_status_after_the_daemon_was_killed_exits_3(sd_env: Env, make_daemon: MakeDaemon) -> None:
    daemon = make_daemon(sd_env)
    assert cli(sd_env, "status").returncode == 0
    daemon.kill9()
    result = cli(sd_env, "status")
    assert result.returncode == 3, result.stdout + result.stderr


# -- logging ---------------------------------------------------------------------------------


@pytest.mark.one_ledger("the daemon's log")
def test_default_log_level_prints_no_line_per_capture(sd_env: Env, daemon: Daemon,
                                                      tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    with daemon.client() as c:
        # The first capture creates the attempt: an event, which may be logged once.
        c.snapshot(str(wt), run_id="quiet", node_id="n", tool_use_id="q-first")
        # Let time pass: a line another daemon thread logs after the reply lands by then.
        time.sleep(0.3)
        before = daemon.log.read_text()
        for i in range(20):
            (wt / "f.txt").write_text(f"v{i}\n")
            c.snapshot(str(wt), run_id="quiet", node_id="n", tool_use_id=f"q{i}")
    time.sleep(0.3)  # as above: give a late line the time to show up
    assert daemon.log.read_text() == before


@pytest.mark.one_ledger("the daemon's log")
def test_journald_priority_prefixes_under_systemd(sd_env: Env, tmp_path: Path,
                                                   make_daemon: MakeDaemon) -> None:
    daemon = make_daemon(sd_env, {"INVOCATION_ID": "0123456789abcdef",
                                  "JOURNAL_STREAM": "8:1234"})
    with daemon.client() as c:
        try:
            c.snapshot(str(tmp_path / "missing"), run_id="j", node_id="n")
        except Exception:  # noqa: BLE001 - the gap is what we want logged
            pass
    assert daemon.stop() == 0
    lines = [line for line in daemon.log.read_text().splitlines() if line]
    assert lines and all(line[:3] in ("<3>", "<4>", "<6>", "<7>", "<2>") for line in lines), lines
    assert any(line.startswith("<6>") and "serving on" in line for line in lines), lines
    assert any(line.startswith("<4>") and "worktree-missing" in line for line in lines), lines


@pytest.mark.one_ledger("the daemon's log")
def test_log_level_flag_silences_info(sd_env: Env, make_daemon: MakeDaemon) -> None:
    daemon = make_daemon(sd_env, args=["--log-level", "warning"])
    assert daemon.stop() == 0
    assert "serving on" not in daemon.log.read_text()


# -- configuration ---------------------------------------------------------------------------


def write_config(env: Env, text: str) -> Path:
    path = env.root / "config" / "snapshotd" / "config.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


@pytest.mark.one_ledger("configuration precedence")
def test_config_precedence_flag_over_env_over_file_over_default(sd_env: Env,
                                                                make_daemon: MakeDaemon) -> None:
    path = write_config(sd_env, 'settle_ms = 300\nmax_wait_ms = 4000\ndurability = "full"\n'
                                'log_level = "warning"\nexcludes = ["*.bak", "tmp/"]\n')
    env = {"SNAPSHOTD_MAX_WAIT_MS": "5000", "SNAPSHOTD_DURABILITY": "process"}
    result = cli(sd_env, "config", "--json", **env)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["file"] == str(path) and data["file_exists"] is True
    s = data["settings"]
    assert s["settle_ms"] == {"value": 300, "source": f"file {path}",
                              "env": "SNAPSHOTD_SETTLE_MS"}
    assert s["max_wait_ms"]["value"] == 5000
    assert s["max_wait_ms"]["source"] == "env SNAPSHOTD_MAX_WAIT_MS"
    assert s["durability"]["value"] == "process"
    assert s["excludes"]["value"] == ["*.bak", "tmp/"]
    assert s["hook_timeout_ms"] == {"value": 5000, "source": "default",
                                    "env": "SNAPSHOTD_HOOK_TIMEOUT_MS"}

    text = cli(sd_env, "config", **env)
    assert text.returncode == 0
    line = next(x for x in text.stdout.splitlines() if x.startswith("max_wait_ms"))
    assert "5000" in line and "env SNAPSHOTD_MAX_WAIT_MS" in line

    # The flag beats the env beats the file, as the running daemon reports it.
    daemon = make_daemon(sd_env, env, args=["--durability", "full", "--log-level", "debug"])
    info = json.loads(cli(sd_env, "status", "--json").stdout)
    daemon.stop()
    config = info["config"]
    assert config["durability"] == "full" and config["sources"]["durability"] == "flag"
    assert config["max_wait_ms"] == 5000
    assert config["sources"]["max_wait_ms"] == "env SNAPSHOTD_MAX_WAIT_MS"
    assert config["settle_ms"] == 300 and config["sources"]["settle_ms"] == f"file {path}"
    assert config["hook_timeout_ms"] == 5000 and config["sources"]["hook_timeout_ms"] == "default"
    assert info["log_level"] == "debug"


@pytest.mark.one_ledger("configuration errors")
def test_bad_value_unknown_key_and_bad_env_are_errors_naming_the_key(sd_env: Env) -> None:
    write_config(sd_env, 'settle_ms = "fast"\n')
    result = cli(sd_env, "config")
    assert result.returncode == 2
    assert "settle_ms" in result.stderr and "'fast'" in result.stderr
    served = cli(sd_env, "serve")
    assert served.returncode == 2 and "settle_ms" in served.stderr

    write_config(sd_env, "settle_ms = 100\nsetle_ms = 100\n")
    result = cli(sd_env, "config", "--json")
    assert result.returncode == 2 and "setle_ms" in result.stderr and result.stdout == ""

    write_config(sd_env, "settle_ms = [1,\n")
    result = cli(sd_env, "config")
    assert result.returncode == 2 and "TOML" in result.stderr

    write_config(sd_env, "")
    result = cli(sd_env, "config", SNAPSHOTD_DURABILITY="sometimes")
    assert result.returncode == 2
    assert "durability" in result.stderr and "SNAPSHOTD_DURABILITY" in result.stderr
    result = cli(sd_env, "config", SNAPSHOTD_NOTIFIER="fanotify")
    assert result.returncode == 2
    assert "notifier" in result.stderr and "inotify" in result.stderr
    # Seconds that are no number of seconds: the settle scheduler would wait on them (an
    # infinite wait, or a NaN tick, ends its thread).
    for env, seconds in (("SNAPSHOTD_SCAN_INTERVAL_S", "inf"), ("SNAPSHOTD_LINGER_S", "nan"),
                         ("SNAPSHOTD_VERIFY_INTERVAL_S", "-inf")):
        result = cli(sd_env, "config", **{env: seconds})
        assert result.returncode == 2 and env in result.stderr, (env, seconds, result.stderr)
    for share in ("0", "1.5", "nan", "most"):
        result = cli(sd_env, "config", SNAPSHOTD_QUIET_VERIFY_SHARE=share)
        assert result.returncode == 2 and "quiet_verify_share" in result.stderr, share
    write_config(sd_env, "quiet_verify_share = true\n")
    assert cli(sd_env, "config").returncode == 2
    write_config(sd_env, "quiet_verify_share = 0.01\n")
    shown = json.loads(cli(sd_env, "config", "--json").stdout)
    assert shown["settings"]["quiet_verify_share"]["value"] == 0.01, shown


@pytest.mark.one_ledger("the daemon's signal handling")
def test_sigterm_stops_a_serving_daemon_cleanly(sd_env: Env, make_daemon: MakeDaemon) -> None:
    daemon = make_daemon(sd_env)
    daemon.proc.send_signal(signal.SIGTERM)
    assert daemon.proc.wait(timeout=30) == 0
    assert "stopped" in daemon.log.read_text()
    assert not os.path.exists(sd_env.socket)


@pytest.mark.one_ledger("the watcher's status")
def test_status_shows_a_watched_worktree_that_went_missing_as_degraded(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a\n")
    with daemon.client() as c:
        c.attempt_begin("deg", "impl", str(wt))
        c.snapshot(str(wt), run_id="deg", node_id="impl")
        if "watched" not in c.status():
            pytest.skip("this build has no watcher (snapshotd.watch.watcher), so nothing degrades")
    shutil.rmtree(wt)

    def degraded_row() -> dict | None:
        info = json.loads(cli(sd_env, "status", "--json").stdout)
        row = next((r for r in info["worktrees"] if r["path"] == str(wt.resolve())), {})
        return row if row.get("degraded_reason") else None

    row = wait_for(degraded_row, timeout=30, every=0.2, what="the worktree to show degraded")
    assert row["attempt"] == "deg/impl/0/1" and row["last_seq"] == 0
    assert row["watch"]["state"] != "watching"
    text = cli(sd_env, "status").stdout
    assert f"DEGRADED: {row['degraded_reason']}" in text
