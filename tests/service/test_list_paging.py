"""The ``list`` reply is paged: a run with thousands of checkpoints lists whole through the
client, the MCP tool and ``snapshots --json``, and no reply comes near the 1 MiB frame."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import msgpack

from snapshotd.ops.operations import Operations
from snapshotd_client.protocol import MAX_FRAME, encode_frame
from tests.conftest import Daemon, Env, make_git_worktree

# Labels near their 1,000-byte limit make a run whose whole listing is over the frame with
# fewer checkpoints (each one is a capture: 3,500 short-labelled ones took 25-45 s).
COUNT = 1000
LABEL = "edit src/module/file.py: " + "x" * 900


def _many_checkpoints(daemon: Daemon, wt: Path) -> None:
    with daemon.client() as c:
        c.attempt_begin("long", "n", str(wt))
        for i in range(COUNT):
            (wt / "a.txt").write_text(f"{i}\n")
            c.snapshot(str(wt), run_id="long", node_id="n", label=f"{LABEL} {i}",
                       tool_use_id=f"toolu_{i:05d}")


def test_a_long_run_lists_whole_in_pages(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    _many_checkpoints(daemon, wt)
    with open(sd_env.gaps, "a") as spool:  # gaps come after the checkpoints, paged the same
        for i in range(3):
            spool.write(json.dumps({"ts": "2026-01-01T00:00:00Z", "run_id": "long",
                                    "node_id": "n", "reason": "timeout",
                                    "detail": f"gap {i}"}) + "\n")
    with daemon.client() as c:
        first = c.request("list", run_id="long")
        assert len(encode_frame({"id": 1, "ok": True, "result": first})) < MAX_FRAME
        assert first["total"] == COUNT + 3 and first["checkpoints_total"] == COUNT
        assert 0 < len(first["checkpoints"]) < COUNT and first["next_offset"] is not None
        small = c.request("list", run_id="long", offset=COUNT - 1, limit=2)
        assert [cp["seq"] for cp in small["checkpoints"]] == [COUNT - 1]
        assert [g["detail"] for g in small["gaps"]] == ["gap 0"]
        assert small["next_offset"] == COUNT + 1
        whole = c.list("long")
    assert [cp["seq"] for cp in whole["checkpoints"]] == list(range(COUNT))
    # Paging is what keeps the replies small: the run whole would not fit in one frame.
    assert len(msgpack.packb(whole, use_bin_type=True)) > MAX_FRAME
    assert [g["detail"] for g in whole["gaps"]] == ["gap 0", "gap 1", "gap 2"]

    tool = Operations(home=sd_env.home, socket=sd_env.socket).list_checkpoints(run_id="long")
    assert tool["source"] == "daemon" and tool["checkpoints_total"] == COUNT
    assert [cp["tool_use_id"] for cp in tool["checkpoints"]][-1] == f"toolu_{COUNT - 1:05d}"
    assert len(tool["checkpoints"]) == COUNT and not tool["truncated"]

    proc = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", "long", "--json"],
                          env=sd_env.environ(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert len(json.loads(proc.stdout)["checkpoints"]) == COUNT
