"""``snapshot-hook-native`` (client/native/snapshot_hook.c), built with the machine's C compiler
by the code ``snapshotd native-hook`` runs, against a real daemon.

The fast path: every agent's real after-tool payload becomes the very checkpoint the Python hook
makes of it (label, tool call id, attempt), with no Python started and nothing printed. The
hand-overs: whatever is not the fast path reaches the Python hook (here a small script that notes
each hand-over, then runs ``snapshotd_client.hook.main``) with the payload on its stdin and one
budget between them: no daemon, a stopped daemon (the timeout gap, within the budget), an
untrusted socket directory, a setting it does not take as given, a payload too big for a frame,
a session start (whose context line reaches the agent), a payload that is not JSON; each leaves
exactly the outcome the Python hook alone would have left."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshotd.daemon.native_hook import BuildError, build, c_string
from snapshotd_client.hook import RELAYED_ENV, route, started_at
from tests.client.test_agent_lifecycle import TOOL_CALL, localized, tool_call
from tests.conftest import (
    QUIET_WATCHER,
    REPO,
    Daemon,
    Env,
    claude_payload,
    load_payloads,
    make_git_worktree,
)
from tests.support.helpers import wait_for

pytestmark = pytest.mark.one_ledger("the native hook's transport and hand-overs")

CC = shutil.which(os.environ.get("CC") or "cc")
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc) on this machine")
SOURCE = REPO / "client" / "native" / "snapshot_hook.c"


@pytest.fixture(scope="module")
def native(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The built program and the file its hand-over script appends a line to per hand-over."""
    if CC is None:
        pytest.skip("no C compiler (cc) on this machine")
    where = tmp_path_factory.mktemp("native")
    marker = where / "handed-over"
    fallback = where / "snapshot-hook"
    fallback.write_text(
        f"#!{sys.executable}\n"
        "import os, time\n"
        "time.sleep(float(os.environ.get('TEST_SLOW_START_S', '0')))\n"
        f"with open({str(marker)!r}, 'a') as f:\n"
        "    f.write(os.environ.get('SNAPSHOTD_HOOK_STARTED_NS', '-') + '\\n')\n"
        "from snapshotd_client.hook import main\n"
        "main()\n")
    fallback.chmod(0o755)
    return build(where / "snapshot-hook-native", fallback=fallback), marker


def _serving(tmp_path_factory: pytest.TempPathFactory,
             name: str) -> Iterator[tuple[Env, Daemon]]:
    env = Env(tmp_path_factory.mktemp(name))
    daemon = Daemon(env, dict(QUIET_WATCHER))
    daemon.start()
    yield env, daemon
    daemon.stop()
    shutil.rmtree(env.sockdir, ignore_errors=True)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Env, Daemon]]:
    """One daemon for the module (SQLite ledger): each test works in worktrees of its own."""
    yield from _serving(tmp_path_factory, "nativeworld")


def run_native(native: tuple[Path, Path], env: dict[str, str], payload: dict | bytes,
               cwd: Path | None = None, timeout: float = 30.0) -> subprocess.CompletedProcess:
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    return subprocess.run([str(native[0])], input=data, env=env, cwd=cwd, capture_output=True,
                          timeout=timeout)


def run_python(env: dict[str, str], payload: dict, cwd: Path | None = None) -> bytes:
    proc = subprocess.run(
        [sys.executable, "-c", "from snapshotd_client.hook import main; main()"],
        input=json.dumps(payload).encode(), env=env, cwd=cwd, capture_output=True, timeout=30)
    assert (proc.returncode, proc.stderr) == (0, b"")
    return proc.stdout


def handovers(native: tuple[Path, Path]) -> int:
    marker = native[1]
    return len(marker.read_text().splitlines()) if marker.exists() else 0


def handed_start_ns(native: tuple[Path, Path]) -> int:
    """The ``SNAPSHOTD_HOOK_STARTED_NS`` the last hand-over gave the Python hook."""
    return int(native[1].read_text().splitlines()[-1])


def checkpoint(env: Env, worktree: Path) -> dict:
    rows = env.ledger_query(
        "SELECT run_id, node_id, iteration, attempt, source, tier, label, tool_use_id "
        "FROM checkpoints WHERE worktree = ? ORDER BY created_at", (str(worktree),))
    assert len(rows) == 1, rows
    return rows[0]


def with_session(agent: str, payload: dict, session: str) -> dict:
    path = TOOL_CALL[agent][1] if agent in TOOL_CALL else ("session_id",)
    holder = payload
    for key in path[:-1]:
        holder = holder[key]
    if path:
        holder[path[-1]] = session
    return payload


AFTER_TOOL = {"claude": "claude-code/post-tool-use.ndjson", "codex": "codex/post-tool-use.ndjson",
              "gemini": "gemini/after-tool.ndjson"}


def agent_payload(agent: str, worktree: Path, session: str) -> dict:
    if agent in TOOL_CALL:
        payload = tool_call(agent, worktree, session)
    else:
        payload = localized(load_payloads(AFTER_TOOL[agent])[0], worktree)
        payload["cwd"] = str(worktree)
    return with_session(agent, payload, session)


# -- the fast path ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Env, Daemon]]:
    """A second daemon, so the same payload in the same worktree can go through both hooks."""
    yield from _serving(tmp_path_factory, "nativetwin")


@needs_cc
@pytest.mark.parametrize("agent", sorted([*AFTER_TOOL, *TOOL_CALL]))
def test_every_agents_payload_makes_the_checkpoint_the_python_hook_makes(
        native, world, twin, tmp_path: Path, agent: str) -> None:
    worktree = make_git_worktree(tmp_path / "wt")
    (worktree / "hello.txt").write_text("hello\n")
    payload = agent_payload(agent, worktree, "s-parity")
    python_env, native_env = world[0], twin[0]
    run_python(python_env.environ(), payload, cwd=worktree)
    before = handovers(native)
    proc = run_native(native, native_env.environ(), payload, cwd=worktree)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert handovers(native) == before, "the fast path handed over"
    made = [wait_for(lambda e=e: checkpoint(e, worktree), what="checkpoint")
            for e in (python_env, native_env)]
    assert made[1] == made[0]
    assert made[1]["source"] == "hook" and made[1]["tier"] == 1 and made[1]["label"]
    assert native_env.read_gaps() == []


@needs_cc
def test_explicit_attribution_travels_with_the_payload_and_a_refusal_is_one_gap(
        native, world, tmp_path: Path) -> None:
    env, daemon = world
    worktree = make_git_worktree(tmp_path / "wt")
    (worktree / "a.txt").write_text("a\n")
    payload = claude_payload(worktree, "toolu_explicit_bad", session_id="s-explicit")
    gaps_before = len(env.read_gaps())
    # An iteration the protocol cannot carry: the daemon refuses (bad-request) and, the hook's
    # gap being the daemon's to write here, records exactly one naming the attempt.
    proc = run_native(native, env.environ(SNAPSHOTD_RUN_ID="r-native", SNAPSHOTD_NODE_ID="impl",
                                          SNAPSHOTD_ITERATION="x1"), payload, cwd=worktree)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    gaps = env.read_gaps()[gaps_before:]
    assert [(g["reason"], g["run_id"], g["node_id"], g["tool_use_id"]) for g in gaps] == [
        ("bad-request", "r-native", "impl", "toolu_explicit_bad")]
    with daemon.client() as c:
        assert c.status()["native_hook"]["gaps"] >= 1


# -- hand-overs ---------------------------------------------------------------------------------


@needs_cc
def test_no_daemon_hands_over_and_the_python_hook_records_the_gap(native, hook_env,
                                                                   short_dir: Path) -> None:
    before = handovers(native)
    payload = claude_payload(short_dir, "toolu_nodaemon", session_id="s-nodaemon")
    launched_ns = time.monotonic_ns()
    proc = run_native(native, hook_env, payload)
    returned_ns = time.monotonic_ns()
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert handovers(native) == before + 1
    gaps = [json.loads(line) for line in (short_dir / "gaps.ndjson").read_text().splitlines()]
    assert [(g["reason"], g["tool_use_id"]) for g in gaps] == [
        ("daemon-unavailable", "toolu_nodaemon")]
    assert launched_ns <= handed_start_ns(native) <= returned_ns  # one budget for both


@needs_cc
@pytest.mark.parametrize("slow_start", [0.0, 0.5], ids=["python-starts-fast",
                                                        "python-starts-slow"])
def test_a_stopped_daemon_gets_the_timeout_gap_within_one_budget(
        native, sd_env: Env, make_daemon, tmp_path: Path, slow_start: float) -> None:
    """The contract without a stopwatch: with the daemon stopped (SIGSTOP), the hook still
    exits, cleanly, and leaves the timeout gap naming its budget; the Python hook it hands over
    to counts from the native hook's start (one budget, not two: ``started_at`` takes the start
    it is handed: test_a_start_handed_over_counts_only_when_it_is_recent). ``python-starts-slow``
    begins only after the whole 300 ms budget is spent (it sleeps 0.5 s first, as on a loaded
    machine): the payload it was handed is still read whole, and the gap still says timeout."""
    daemon = make_daemon(sd_env, QUIET_WATCHER)
    worktree = make_git_worktree(tmp_path / "wt")
    (worktree / "a.txt").write_text("a\n")
    before = handovers(native)
    os.kill(daemon.proc.pid, signal.SIGSTOP)
    try:
        launched_ns = time.monotonic_ns()
        proc = run_native(native, sd_env.environ(SNAPSHOTD_HOOK_TIMEOUT_MS="300",
                                                 TEST_SLOW_START_S=str(slow_start)),
                          claude_payload(worktree, "toolu_stopped", session_id="s-stopped"),
                          cwd=worktree)
        returned_ns = time.monotonic_ns()
    finally:
        os.kill(daemon.proc.pid, signal.SIGCONT)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert handovers(native) == before + 1
    assert launched_ns <= handed_start_ns(native) <= returned_ns
    (gap,) = [g for g in sd_env.read_gaps() if g["tool_use_id"] == "toolu_stopped"]
    assert gap["reason"] == "timeout" and "within 300 ms" in gap["detail"], gap
    assert (gap["source"], gap["tier"], gap["worktree"]) == ("hook", 1, str(worktree)), gap
    assert sd_env.ledger_query("SELECT seq FROM checkpoints WHERE tool_use_id = ?",
                               ("toolu_stopped",)) == []


@needs_cc
def test_an_untrusted_socket_directory_is_never_written_to(native, world, tmp_path: Path) -> None:
    env, _ = world
    worktree = make_git_worktree(tmp_path / "wt")
    (worktree / "a.txt").write_text("a\n")
    os.chmod(env.sockdir, 0o777)
    try:
        before = handovers(native)
        proc = run_native(native, env.environ(), claude_payload(worktree, "toolu_untrusted",
                                                         session_id="s-untrusted"),
                          cwd=worktree)
    finally:
        os.chmod(env.sockdir, 0o700)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert handovers(native) == before + 1
    assert env.ledger_query("SELECT seq FROM checkpoints WHERE tool_use_id = ?",
                            ("toolu_untrusted",)) == []
    (gap,) = [g for g in env.read_gaps() if g["tool_use_id"] == "toolu_untrusted"]
    assert gap["reason"] == "socket-untrusted"


@needs_cc
@pytest.mark.parametrize("case", ["budget-text", "budget-spaces", "relative-socket",
                                  "big-payload"])
def test_what_it_does_not_take_as_given_is_the_python_hooks_to_decide(
        native, world, tmp_path: Path, case: str) -> None:
    env, _ = world
    worktree = make_git_worktree(tmp_path / "wt")
    (worktree / "a.txt").write_text("a\n")
    payload = claude_payload(worktree, f"toolu_{case}", session_id=f"s-{case}")
    extra: dict[str, str] = {}
    cwd = worktree
    if case == "budget-text":
        extra["SNAPSHOTD_HOOK_TIMEOUT_MS"] = "soon"
    elif case == "budget-spaces":
        extra["SNAPSHOTD_HOOK_TIMEOUT_MS"] = " 4000 "
    elif case == "relative-socket":
        extra["SNAPSHOTD_SOCKET"] = env.socket.name
        cwd = env.sockdir
        payload["cwd"] = str(worktree)
    else:  # a Read of a big file: the payload carries it, more than one frame holds
        payload["tool_response"] = {"content": "x" * (1 << 20)}
    before = handovers(native)
    proc = run_native(native, env.environ(**extra), payload, cwd=cwd)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert handovers(native) == before + 1
    rows = wait_for(lambda: env.ledger_query(
        "SELECT source FROM checkpoints WHERE tool_use_id = ?", (f"toolu_{case}",)),
        what="checkpoint")
    assert [r["source"] for r in rows] == ["hook"]
    gaps = [g for g in env.read_gaps() if g["tool_use_id"] == f"toolu_{case}"]
    assert gaps == []


@needs_cc
def test_a_session_start_is_handed_over_and_its_context_reaches_the_agent(
        native, world, tmp_path: Path) -> None:
    env, daemon = world
    worktree = make_git_worktree(tmp_path / "wt")
    (start,) = [dict(p, cwd=str(worktree), session_id="s-native-start")
                for p in load_payloads("claude-code/session-lifecycle.ndjson")
                if p["hook_event_name"] == "SessionStart"]
    before = handovers(native)
    with daemon.client() as c:
        fallbacks = c.status()["native_hook"]["fallbacks"]
    proc = run_native(native, env.environ(), start, cwd=worktree)
    assert (proc.returncode, proc.stderr) == (0, b"")
    assert handovers(native) == before + 1
    doc = json.loads(proc.stdout)
    assert "snapshotd" in doc["hookSpecificOutput"]["additionalContext"]
    with daemon.client() as c:
        assert c.status()["native_hook"]["fallbacks"] == fallbacks + 1


@needs_cc
def test_stdin_that_never_closes_is_one_gap_within_the_budget(native, hook_env,
                                                               short_dir: Path) -> None:
    before = handovers(native)
    proc = subprocess.Popen([str(native[0])], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**hook_env,
                                                         "SNAPSHOTD_HOOK_TIMEOUT_MS": "300"})
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    try:
        proc.stdin.write(b'{"session_id": "s", ')  # and then nothing, and never closed
        proc.stdin.flush()
        proc.wait(timeout=10)  # a hang guard only: it exits on its own, stdin still open
        out, err = proc.stdout.read(), proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()
    assert (proc.returncode, out, err) == (0, b"", b"")
    assert handovers(native) == before + 1
    gaps = [json.loads(line) for line in (short_dir / "gaps.ndjson").read_text().splitlines()]
    assert [g["reason"] for g in gaps] == ["bad-payload"]
    assert "not closed within 300 ms" in gaps[0]["detail"]


@needs_cc
@pytest.mark.parametrize("stdin", [b"{not json", b"[1, 2]", b""], ids=["garbled", "list",
                                                                        "empty"])
def test_a_bad_payload_is_one_bad_payload_gap(native, world, tmp_path: Path,
                                             stdin: bytes) -> None:
    env, _ = world
    gaps_before = len(env.read_gaps())
    before = handovers(native)
    proc = run_native(native, env.environ(), stdin, cwd=tmp_path)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert handovers(native) == before + 1
    gaps = env.read_gaps()[gaps_before:]
    assert [g["reason"] for g in gaps] == ["bad-payload"]


# -- the parts ----------------------------------------------------------------------------------


def test_the_program_relays_exactly_the_variables_the_python_hook_reads() -> None:
    text = SOURCE.read_text()
    listed = re.search(r"RELAYED_ENV\[\] = \{(.*?)\};", text, re.S)
    assert listed is not None
    names = tuple(re.findall(r'"([A-Z_]+)"', listed.group(1)))
    assert names == RELAYED_ENV
    # And the Python hook reads no other variable to attribute a payload.
    hook_text = (REPO / "client" / "hook.py").read_text()
    read = set(re.findall(r'env(?:\.get\(|\[)"([A-Z_]+)"', hook_text))
    # (The budget it reads itself; the socket it connects to itself; autostart and the start
    # handed over are the Python hook's own, after a hand-over.)
    transport = {"SNAPSHOTD_HOOK_TIMEOUT_MS", "SNAPSHOTD_SOCKET", "SNAPSHOTD_AUTOSTART",
                 "SNAPSHOTD_HOOK_STARTED_NS"}
    assert read - transport <= set(RELAYED_ENV)


def test_route_sends_each_event_where_the_hook_always_did() -> None:
    assert route({"hook_event_name": "PreToolUse"})[1] == "before_tool"
    assert route({"hook_event_name": "SessionStart", "session_id": "s"})[1] == "session"
    assert route({"hook_event_name": "PostToolUse"})[1] == "snapshot"
    (gemini,) = load_payloads("gemini/after-tool.ndjson")[:1]
    assert route(dict(gemini))[1] == "snapshot"


def test_a_start_handed_over_counts_only_when_it_is_recent() -> None:
    now = time.monotonic()
    recent = str(int((now - 0.25) * 1e9))
    assert started_at({"SNAPSHOTD_HOOK_STARTED_NS": recent}, now) == pytest.approx(now - 0.25)
    for stale in (str(int((now - 600) * 1e9)), str(int((now + 5) * 1e9)), "soon", "-1", ""):
        assert started_at({"SNAPSHOTD_HOOK_STARTED_NS": stale}, now) == now
    assert started_at({}, now) == now


def test_the_fallback_path_is_compiled_in_as_a_literal_whatever_it_holds() -> None:
    assert c_string(b"/usr/bin/snapshot-hook") == '"/usr/bin/snapshot-hook"'
    assert c_string(b'/a"b\\c?\n\xc3\xa9') == '"/a\\042b\\134c\\077\\012\\303\\251"'


@needs_cc
def test_a_strange_fallback_path_still_builds_and_is_the_one_run(tmp_path: Path,
                                                                 hook_env) -> None:
    odd = tmp_path / 'dir "quoted" \\ é'
    odd.mkdir()
    marker = tmp_path / "ran"
    fallback = odd / "hook"
    fallback.write_text(f"#!{sys.executable}\nopen({str(marker)!r}, 'w').write('yes')\n")
    fallback.chmod(0o755)
    program = build(tmp_path / "native", fallback=fallback)
    subprocess.run([str(program)], input=b"{}", env={**hook_env, "SNAPSHOTD_HOOK_TIMEOUT_MS": "x"},
                   capture_output=True, timeout=30, check=True)
    assert marker.read_text() == "yes"


def test_building_without_a_compiler_says_what_to_do(tmp_path: Path) -> None:
    fallback = tmp_path / "hook"
    fallback.write_text("#!/bin/sh\n")
    fallback.chmod(0o755)
    with pytest.raises(BuildError, match="no C compiler 'no-such-cc'"):
        build(tmp_path / "out", fallback=fallback, compiler="no-such-cc")
    assert not (tmp_path / "out").exists()
    with pytest.raises(BuildError, match="not an executable snapshot-hook"):
        build(tmp_path / "out", fallback=tmp_path / "missing")


@needs_cc
def test_a_compiler_error_leaves_what_was_there(tmp_path: Path) -> None:
    fallback = tmp_path / "hook"
    fallback.write_text("#!/bin/sh\n")
    fallback.chmod(0o755)
    out = tmp_path / "out"
    out.write_text("the old program\n")
    fake_cc = tmp_path / "cc"
    fake_cc.write_text("#!/bin/sh\necho 'snapshot_hook.c:1: error: it broke' >&2\nexit 3\n")
    fake_cc.chmod(0o755)
    with pytest.raises(BuildError, match="exit 3.*it broke"):
        build(out, fallback=fallback, compiler=str(fake_cc))
    assert out.read_text() == "the old program\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


@needs_cc
def test_the_cli_builds_it_beside_the_hook_or_where_told(tmp_path: Path) -> None:
    out = tmp_path / "bin" / "snapshot-hook-native"
    out.parent.mkdir()
    fallback = tmp_path / "hook"
    fallback.write_text("#!/bin/sh\n")
    fallback.chmod(0o755)
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "native-hook", "-o", str(out),
                           "--fallback", str(fallback), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"path": str(out), "fallback": str(fallback)}
    assert os.access(out, os.X_OK)
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "native-hook", "-o", str(out),
                           "--fallback", str(tmp_path / "missing")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "not an executable snapshot-hook" in proc.stderr


GOOD = {"fallback": False, "outcome": "ok"}
ODD_VALUES = {"n": None, "f": 1.5, "big": 2**63, "neg": -2**40, "bin": b"\x00" * 300,
              "nested": [[{"k": [1, 2, {"d": b"x"}]}]], "s": "é" * 40}


@needs_cc
@pytest.mark.parametrize("reply, fast", [
    ({"id": 1, "ok": True, "result": GOOD}, True),
    ({**ODD_VALUES, "id": 1, "ok": True, "result": {**ODD_VALUES, **GOOD}}, True),
    ({"id": 2, "ok": True, "result": GOOD}, False),
    ({"id": 1, "ok": True, "result": {"outcome": "ok"}}, False),
    ({"id": 1, "ok": True, "result": [GOOD]}, False),
    ({"id": 1, "ok": True, "result": {"fallback": 0}}, False),
    ({"id": 1, "ok": True, "result": {"fallback": True}}, False),
    ({"id": 1, "ok": False, "error": {"code": "unknown-op", "message": "no hook op"}}, False),
    ("close", False),
], ids=["plain", "odd-values", "other-id", "no-fallback", "result-list", "fallback-int",
        "fallback-asked", "unknown-op", "hung-up"])
def test_any_reply_but_done_is_a_hand_over(native, hook_env, short_dir: Path, reply,
                                           fast: bool) -> None:
    """What the daemon answers the hook op, read by the program's own small msgpack reader:
    only a done reply ends the hook there; anything else (an older daemon's unknown-op, a
    reply it cannot read) goes to the Python hook, which then asks as it always did."""
    from tests.support.fake_daemon import FakeDaemon

    def respond(request: dict) -> dict | str:
        if request.get("op") == "hook":
            return reply
        return {"id": request["id"], "ok": True, "result": {"seq": 1}}

    before = handovers(native)
    with FakeDaemon(short_dir / "d.sock", respond) as fake:
        proc = run_native(native, hook_env, claude_payload(short_dir, "toolu_reply"))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert [r["op"] for r in fake.requests] == (["hook"] if fast else ["hook", "snapshot"])
    assert handovers(native) == before + (0 if fast else 1)
    hook_request = fake.requests[0]
    assert hook_request["payload"] == json.dumps(claude_payload(short_dir,
                                                                "toolu_reply")).encode()
    assert not (short_dir / "gaps.ndjson").exists()


@needs_cc
def test_a_python_hook_gone_since_the_build_still_exits_0_silently(tmp_path: Path,
                                                                    hook_env) -> None:
    """The one outcome left to the system log: the program it hands over to was removed."""
    fallback = tmp_path / "hook"
    fallback.write_text("#!/bin/sh\n")
    fallback.chmod(0o755)
    program = build(tmp_path / "native", fallback=fallback)
    fallback.unlink()
    proc = subprocess.run([str(program)], input=b"{}", env=hook_env, capture_output=True,
                          timeout=30)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
