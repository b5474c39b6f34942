"""Every setting the hook reads is bounded: an absurd value neither hangs nor crashes the hook,
it falls back (or is clamped) by a documented rule, and the gap's detail says so."""

from __future__ import annotations

import pytest

from snapshotd_client.gaps import read_gaps
from snapshotd_client.hook import (
    DEFAULT_TIMEOUT_MS,
    MAX_TIMEOUT_MS,
    MIN_TIMEOUT_MS,
    budget_setting,
)
from snapshotd_client.protocol import MAX_FRAME
from tests.support.fake_daemon import (
    FakeDaemon,
    assert_silent_success,
    fail,
    hook_stdin,
    ok,
    run_hook_timed,
)


@pytest.mark.parametrize(("raw", "used", "noted"), [
    (None, DEFAULT_TIMEOUT_MS, False),
    ("", DEFAULT_TIMEOUT_MS, False),
    ("2500", 2500, False),
    (" 2500 ", 2500, False),
    (str(10 ** 30), MAX_TIMEOUT_MS, True),
    ("9" * 5000, MAX_TIMEOUT_MS, True),
    ("1", MIN_TIMEOUT_MS, True),
    ("0", DEFAULT_TIMEOUT_MS, True),
    ("-5", DEFAULT_TIMEOUT_MS, True),
    ("nan", DEFAULT_TIMEOUT_MS, True),
    ("inf", DEFAULT_TIMEOUT_MS, True),
    ("1e3", DEFAULT_TIMEOUT_MS, True),
    ("2.5", DEFAULT_TIMEOUT_MS, True),
    ("five seconds", DEFAULT_TIMEOUT_MS, True),
    ("\u0661\u0662", DEFAULT_TIMEOUT_MS, True),  # Arabic-Indic digits: not ASCII
])
def test_budget_setting_rule(raw, used, noted):
    env = {} if raw is None else {"SNAPSHOTD_HOOK_TIMEOUT_MS": raw}
    budget, note = budget_setting(env)
    assert budget == used
    assert bool(note) == noted
    if noted:
        assert "SNAPSHOTD_HOOK_TIMEOUT_MS" in note and f"used {used}" in note
        assert len(note) < 200  # a 5000-digit value is not copied into every gap


@pytest.mark.parametrize("raw", [str(10 ** 30), "-1", "nan", "text", "0"])
def test_hook_with_an_absurd_timeout_still_writes_a_noted_gap(hook_env, short_dir, raw):
    hook_env["SNAPSHOTD_HOOK_TIMEOUT_MS"] = raw
    proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert gap["reason"] == "daemon-unavailable"
    assert "SNAPSHOTD_HOOK_TIMEOUT_MS" in gap["detail"]


def test_hook_with_a_tiny_timeout_is_clamped_and_still_asks(hook_env, short_dir):
    hook_env["SNAPSHOTD_HOOK_TIMEOUT_MS"] = "1"
    with FakeDaemon(short_dir / "d.sock", ok()) as daemon:
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)
    gaps = read_gaps(short_dir / "gaps.ndjson")
    # Within the clamped budget the request usually goes out; if it did not, the gap says why.
    if gaps:
        (gap,) = gaps
        assert f"used {MIN_TIMEOUT_MS}" in gap["detail"]
    else:
        assert [r["op"] for r in daemon.requests] == ["snapshot"]


@pytest.mark.parametrize("raw", ["1" * 30, "9" * 5000, "-1", "1_0", "x"])
def test_an_attempt_number_the_protocol_cannot_carry_is_sent_as_text(hook_env, short_dir, raw):
    hook_env.update(SNAPSHOTD_RUN_ID="run-9", SNAPSHOTD_NODE_ID="impl", SNAPSHOTD_ATTEMPT=raw)
    with FakeDaemon(short_dir / "d.sock", fail("bad-request")) as daemon:
        proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)
    (req,) = daemon.requests
    assert isinstance(req["attempt"], str) and len(req["attempt"]) <= 100
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert (gap["reason"], gap["run_id"]) == ("bad-request", "run-9")


def test_an_oversized_run_id_becomes_a_bounded_gap(hook_env, short_dir):
    hook_env.update(SNAPSHOTD_RUN_ID="r" * 100_000, SNAPSHOTD_NODE_ID="impl")  # no daemon
    proc, _ = run_hook_timed(hook_env, hook_stdin("/srv/proj"))
    assert_silent_success(proc)
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert gap["reason"] == "daemon-unavailable"
    assert len(gap["run_id"]) <= 1024 and gap["run_id"].startswith("rrrr")
    assert (short_dir / "gaps.ndjson").stat().st_size < 8192


def test_an_oversized_request_becomes_a_bounded_gap(hook_env, short_dir):
    with FakeDaemon(short_dir / "d.sock", ok()) as daemon:
        proc, _ = run_hook_timed(hook_env, hook_stdin("/" + "w" * MAX_FRAME))
    assert_silent_success(proc)
    assert daemon.requests == []  # never sent
    (gap,) = read_gaps(short_dir / "gaps.ndjson")
    assert gap["reason"] == "frame-too-large"
    assert len(gap["worktree"]) <= 1024 and gap["worktree"].startswith("/www")
    assert (short_dir / "gaps.ndjson").stat().st_size < 8192
