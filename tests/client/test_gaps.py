"""The gap record and spool of ``snapshotd_client.gaps``: shape, permissions, no torn lines."""

from __future__ import annotations

import json
import multiprocessing
import re
import stat
from pathlib import Path

import pytest

from snapshotd_client.gaps import append_gap, make_gap, read_gaps

KEYS = ["ts", "run_id", "node_id", "iteration", "attempt", "worktree", "tier", "source",
        "tool_use_id", "reason", "detail"]
WRITERS = 8
LINES_EACH = 200


def _gap(**overrides: object) -> dict:
    fields: dict = dict(run_id="r", node_id="n", iteration=0, attempt=1, worktree="/w", tier=1,
                        source="hook", tool_use_id="t", reason="daemon-unavailable", detail="d")
    fields.update(overrides)
    return make_gap(**fields)


def test_make_gap_has_exactly_the_contract_keys_and_a_utc_ms_timestamp():
    gap = _gap()
    assert list(gap) == KEYS
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", gap["ts"])
    assert gap["reason"] == "daemon-unavailable" and gap["tool_use_id"] == "t"


def test_append_creates_private_dir_and_file_and_writes_one_compact_line(tmp_path):
    spool = tmp_path / "new" / "gaps.ndjson"
    append_gap(_gap(detail="é ✓"), spool)
    assert stat.S_IMODE(spool.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(spool.stat().st_mode) == 0o600
    raw = spool.read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1
    assert b'"detail":"\xc3\xa9 \xe2\x9c\x93"' in raw  # ensure_ascii=False, no spaces
    assert read_gaps(spool)[0]["detail"] == "é ✓"


def test_append_uses_snapshotd_gaps_env_by_default(tmp_path, monkeypatch):
    spool = tmp_path / "env-spool.ndjson"
    monkeypatch.setenv("SNAPSHOTD_GAPS", str(spool))
    append_gap(_gap(reason="timeout"))
    assert [g["reason"] for g in read_gaps()] == ["timeout"]


def test_unencodable_text_still_yields_a_valid_line(tmp_path):
    spool = tmp_path / "gaps.ndjson"
    append_gap(_gap(worktree="/w/\udcff-undecodable", detail=Path("/a/path")), spool)
    (gap,) = read_gaps(spool)
    assert gap["worktree"] == "/w/\udcff-undecodable"
    assert gap["detail"] == "/a/path"


def test_read_gaps_skips_a_torn_line_and_keeps_the_rest(tmp_path):
    spool = tmp_path / "gaps.ndjson"
    append_gap(_gap(tool_use_id="first"), spool)
    whole = json.dumps(_gap(tool_use_id="torn"))
    with open(spool, "ab") as f:
        f.write(whole[: len(whole) // 2].encode() + b"\n")  # a writer killed mid-line
        f.write(b"\xff\xfe not utf-8\n")
        f.write(b"[1, 2, 3]\n")  # valid JSON, not a record
        f.write(b"\n")
    append_gap(_gap(tool_use_id="last"), spool)
    assert [g["tool_use_id"] for g in read_gaps(spool)] == ["first", "last"]


def test_read_gaps_of_a_missing_spool_is_empty(tmp_path):
    assert read_gaps(tmp_path / "absent.ndjson") == []


def _writer(path: str, writer: int) -> None:
    for i in range(LINES_EACH):
        # Lines from 100 bytes to ~70 kB: well past PIPE_BUF and a pipe's buffer, so a
        # write that is not under the lock and in one piece would interleave.
        size = 100 + ((i * 7919 + writer * 104729) % 70_000) if i % 10 == 0 else 100 + i
        append_gap(_gap(run_id=f"w{writer}", tool_use_id=f"{writer}-{i}",
                        detail=chr(ord("a") + writer) * size), Path(path))


def test_concurrent_appends_never_tear_a_line(tmp_path):
    spool = tmp_path / "gaps.ndjson"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(spool), w)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * WRITERS

    raw_lines = spool.read_bytes().split(b"\n")
    assert raw_lines[-1] == b""
    raw_lines = raw_lines[:-1]
    assert len(raw_lines) == WRITERS * LINES_EACH
    seen: dict[int, list[int]] = {w: [] for w in range(WRITERS)}
    for raw in raw_lines:
        gap = json.loads(raw)  # every line parses: nothing torn, nothing interleaved
        writer, i = map(int, gap["tool_use_id"].split("-"))
        assert gap["detail"] == chr(ord("a") + writer) * len(gap["detail"])
        seen[writer].append(i)
    # Each writer's lines are all there, in the order it wrote them.
    assert all(seen[w] == list(range(LINES_EACH)) for w in range(WRITERS))
    assert len(read_gaps(spool)) == WRITERS * LINES_EACH


def test_append_raises_oserror_when_the_spool_cannot_be_written(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(OSError):
        append_gap(_gap(), blocker / "gaps.ndjson")
