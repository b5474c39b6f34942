"""``snapshotd runs`` and ``snapshotd snapshots``: what a person reads to find a checkpoint."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from snapshotd_client.gaps import append_gap, make_gap
from tests.conftest import Daemon, Env


def cli(env: Env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120)


def gap(env: Env, wt: Path, *, node: str, attempt: int, tool: str | None, reason: str) -> None:
    append_gap(make_gap(run_id="r1", node_id=node, iteration=0, attempt=attempt,
                        worktree=str(wt), tier=1, source="hook", tool_use_id=tool,
                        reason=reason, detail=f"{reason} happened"), env.gaps)
    time.sleep(0.02)  # let time pass: records made in turn get distinct, ordered timestamps


def populate(env: Env, daemon: Daemon, tmp_path: Path) -> dict[str, Path]:
    wa, wb, wc = (tmp_path / n for n in ("wa", "wb", "wc"))
    for w in (wa, wb, wc):
        (w / "src").mkdir(parents=True)
    with daemon.client() as c:
        (wa / "src" / "a.py").write_text("1")
        c.snapshot(str(wa), run_id="r1", node_id="alpha", attempt=1, tool_use_id="t0",
                   label=f"Write {wa / 'src' / 'a.py'}", source="hook")
        time.sleep(0.02)
        gap(env, wa, node="alpha", attempt=1, tool="t1", reason="timeout")
        (wa / "src" / "a.py").write_text("2")
        (wa / "src" / "b.py").write_text("new")
        c.snapshot(str(wa), run_id="r1", node_id="alpha", attempt=1, tool_use_id="t1",
                   label=f"Edit {wa / 'src' / 'a.py'}", source="hook")
        time.sleep(0.02)
        gap(env, wa, node="alpha", attempt=1, tool="t9", reason="daemon-unavailable")
        c.attempt_end("r1", "alpha", attempt=1)
        (wa / "src" / "b.py").unlink()
        c.snapshot(str(wa), run_id="r1", node_id="alpha", attempt=2, label="second try")
        c.attempt_end("r1", "alpha", attempt=2)
        (wb / "x").write_text("x")
        c.snapshot(str(wb), run_id="r1", node_id="beta")
        (wc / "y").write_text("y")
        c.snapshot(str(wc), run_id="r2", node_id="only")
        c.attempt_end("r2", "only")
    return {"wa": wa, "wb": wb, "wc": wc}


def without_coverage(text: str) -> list[str]:
    """The listing's lines but its coverage lines (tests/service/test_coverage.py)."""
    return [line for line in text.splitlines() if " coverage: " not in line]


def columns_aligned(lines: list[str]) -> None:
    """Every row's cells start where the header's do (a readable aligned table)."""
    header = lines[0]
    # Cells are joined by two spaces: a one-space title ("TOOL CALLS") is one column.
    starts = [i for i in range(len(header))
              if header[i] != " " and (i == 0 or header[max(0, i - 2):i] == "  ")]
    for line in lines[1:]:
        for s in starts[1:]:
            if s >= len(line) and s == starts[-1]:
                continue  # an empty last cell (no label) is trimmed
            assert line[s - 2:s] == "  " and line[s] != " ", (line, s)


def test_runs_lists_every_run_with_counts(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    trees = populate(sd_env, daemon, tmp_path)
    data = json.loads(cli(sd_env, "runs", "--json").stdout)
    by_id = {r["run_id"]: r for r in data["runs"]}
    assert set(by_id) == {"r1", "r2"}
    r1 = by_id["r1"]
    assert r1["nodes"] == 2 and r1["attempts"] == 3 and r1["checkpoints"] == 4
    assert r1["states"] == {"finished": 2, "active": 1}
    assert r1["gaps"] == 2 and r1["unresolved_gaps"] == 1
    assert r1["worktrees"] == sorted([str(trees["wa"]), str(trees["wb"])])
    assert by_id["r2"]["states"] == {"finished": 1} and by_id["r2"]["checkpoints"] == 1
    assert [r["run_id"] for r in data["runs"]] == ["r1", "r2"]  # oldest activity first
    proc = cli(sd_env, "runs")
    lines = proc.stdout.splitlines()
    assert lines[0].split()[:4] == ["RUN", "NODES", "ATTEMPTS", "STATES"]
    # The table lists the newest activity first (issue 44); --json keeps the oldest first.
    assert [line.split()[0] for line in lines[1:3]] == ["r2", "r1"]
    assert "(1 open)" in lines[2]
    columns_aligned(lines)


def test_snapshots_table_with_gaps_in_line(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    populate(sd_env, daemon, tmp_path)
    proc = cli(sd_env, "snapshots", "r1", "--node", "alpha", "--attempt", "1")
    assert proc.returncode == 0, proc.stderr
    lines = without_coverage(proc.stdout)
    assert lines[0].startswith("run r1: 2 checkpoint(s), 2 gap(s), 1 unresolved")
    table = lines[1:]
    columns_aligned(table)
    kinds = [row.split()[0] for row in table[1:]]
    assert kinds == ["0", "gap", "1", "gap"]  # gaps at their place in time
    seq0, gap_t1, seq1, gap_t9 = table[1:]
    assert "1/hook" in seq0 and "+1 ~0 -0" in seq0 and "Write src/a.py" in seq0 and "[t0]" in seq0
    assert "+1 ~1 -0" in seq1 and "Edit src/a.py" in seq1
    assert "GAP timeout [t1]" in gap_t1 and "resolved: seq 1 captured this tool call" in gap_t1
    assert "GAP daemon-unavailable [t9]" in gap_t9 and "UNRESOLVED" in gap_t9


def test_snapshots_default_all_and_filters(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    populate(sd_env, daemon, tmp_path)
    default = without_coverage(cli(sd_env, "snapshots", "r1").stdout)
    rows = [line for line in default[2:] if not line.startswith("(")]
    # Newest attempt of each node: alpha attempt 2 and beta attempt 1; earlier ones hidden.
    assert sorted((r.split()[1], r.split()[3]) for r in rows) == [("alpha", "2"), ("beta", "1")]
    assert "2 checkpoint(s) of earlier attempts hidden" in default[-1]
    every = without_coverage(cli(sd_env, "snapshots", "r1", "--all").stdout)
    rows = [line for line in every[2:]]
    assert len(rows) == 6 and not every[-1].startswith("(")
    columns_aligned(every[1:])
    beta = without_coverage(cli(sd_env, "snapshots", "r1", "--node", "beta").stdout)
    assert [r.split()[1] for r in beta[2:]] == ["beta"]
    # --json is the complete listing, whatever the table hides.
    data = json.loads(cli(sd_env, "snapshots", "r1", "--json").stdout)
    assert len(data["checkpoints"]) == 4 and len(data["gaps"]) == 2
    assert [g["resolved"] for g in data["gaps"]] == [True, False]


def test_unknown_run_names_the_known_ones(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    populate(sd_env, daemon, tmp_path)
    proc = cli(sd_env, "snapshots", "nope")
    assert proc.returncode == 1
    assert "unknown run 'nope'" in proc.stderr and "r1" in proc.stderr and "r2" in proc.stderr


def test_empty_home(sd_env: Env) -> None:
    proc = cli(sd_env, "runs", "--json")
    assert proc.returncode == 0 and json.loads(proc.stdout) == {"runs": []}
    proc = cli(sd_env, "snapshots", "r1")
    assert proc.returncode == 1 and "nothing has been captured" in proc.stderr
