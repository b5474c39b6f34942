"""A tool call's start (PreToolUse; Gemini BeforeTool) through ``snapshot-hook-native``: the
daemon runs it (the ``hook`` op routes it to ``before_tool``), no Python hook is started for it,
and what it leaves is what the Python hook leaves for the same payload.

The start event runs before every tool call, so it must cost next to nothing (issue 43): a
hand-over to the Python hook there would be a Python start-up per tool call. Each test runs the
same start payload through the Python hook against one daemon and through the native program
against a twin daemon (same settings), and compares the checkpoints and gaps of the worktree;
``status`` → ``native_hook`` shows the request was relayed, not handed back."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshotd_client.hook import route
from tests.conftest import QUIET_WATCHER, Daemon, Env, make_git_worktree
from tests.daemon import test_native_hook as base
from tests.daemon.test_native_hook import agent_payload, handovers, run_native, run_python

pytestmark = pytest.mark.one_ledger("the native hook's transport of a tool call's start")

native = base.native  # the built program and its hand-over marker (a module-scoped fixture)

# The agents whose hook settings name a before-tool event, and its name there.
START_EVENT = {"claude": "PreToolUse", "codex": "PreToolUse", "qwen": "PreToolUse",
               "gemini": "BeforeTool"}


def start_payload(agent: str, worktree: Path, session: str) -> dict:
    """The agent's real after-tool payload (tests/fixtures) as its start event: the same
    fields but the event's name, and no tool result yet."""
    payload = agent_payload(agent, worktree, session)
    payload["hook_event_name"] = START_EVENT[agent]
    payload.pop("tool_response", None)
    assert route(dict(payload))[1] == "before_tool", agent
    return payload


def _pair(tmp_path_factory: pytest.TempPathFactory, name: str,
          extra: dict[str, str]) -> Iterator[tuple[tuple[Env, Daemon], tuple[Env, Daemon]]]:
    made = []
    for side in ("python", "native"):
        env = Env(tmp_path_factory.mktemp(f"{name}-{side}"))
        # The guard off: the bracketing capture is what is compared (guard: tests/features/guard).
        made.append((env, Daemon(env, {**QUIET_WATCHER, "SNAPSHOTD_GUARD": "0", **extra}).start()))
    yield made[0], made[1]
    for env, daemon in made:
        daemon.stop()
        shutil.rmtree(env.sockdir, ignore_errors=True)


@pytest.fixture(scope="module", params=["bracket-off", "bracket-on"])
def pair(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Two daemons with the same settings: the Python hook's and the native hook's."""
    bracket = "1" if request.param == "bracket-on" else "0"
    yield from _pair(tmp_path_factory, request.param, {"SNAPSHOTD_BRACKET": bracket})


def left_behind(env: Env, worktree: Path) -> tuple[list[dict], list[tuple]]:
    rows = env.ledger_query(
        "SELECT run_id, node_id, iteration, attempt, source, tier, label, tool_use_id "
        "FROM checkpoints WHERE worktree = ? ORDER BY created_at", (str(worktree),))
    gaps = [(g["reason"], g.get("tool_use_id")) for g in env.read_gaps()
            if g.get("worktree") == str(worktree)]
    return rows, gaps


def relayed(daemon: Daemon) -> dict:
    with daemon.client() as c:
        return c.status()["native_hook"]


@pytest.mark.parametrize("agent", sorted(START_EVENT))
def test_a_start_event_is_run_by_the_daemon_as_the_python_hook_runs_it(
        native, pair, tmp_path: Path, agent: str) -> None:
    (py_env, _), (nat_env, nat_daemon) = pair
    worktree = make_git_worktree(tmp_path / "wt")
    (worktree / "hello.txt").write_text("changed before the tool call\n")
    payload = start_payload(agent, worktree, f"s-start-{agent}")
    assert run_python(py_env.environ(), payload, cwd=worktree) == b""
    before, counts = handovers(native), relayed(nat_daemon)
    proc = run_native(native, nat_env.environ(), payload, cwd=worktree)
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
    assert handovers(native) == before, "the start event was handed to the Python hook"
    after = relayed(nat_daemon)
    assert after["requests"] == counts["requests"] + 1
    assert after["fallbacks"] == counts["fallbacks"]
    assert left_behind(nat_env, worktree) == left_behind(py_env, worktree)
    rows, gaps = left_behind(nat_env, worktree)
    assert gaps == []
    if nat_daemon.extra_env["SNAPSHOTD_BRACKET"] == "1":  # the bracketing capture was taken
        assert [(r["source"], r["label"].startswith("before ")) for r in rows] == [
            ("outside", True)]


def test_a_start_then_its_end_both_stay_in_the_daemon(native, pair,
                                                      tmp_path: Path) -> None:
    """One whole tool call as Claude Code hooks it (start, then end): two relayed requests,
    no hand-over, and the end's checkpoint is the Python hook's."""
    (py_env, _), (nat_env, nat_daemon) = pair
    worktree = make_git_worktree(tmp_path / "wt")
    start = start_payload("claude", worktree, "s-whole")
    end = agent_payload("claude", worktree, "s-whole")
    before, counts = handovers(native), relayed(nat_daemon)
    for env, run in ((py_env, None), (nat_env, native)):
        for event in (start, end):
            if event is end:
                (worktree / "hello.txt").write_text("written by the tool call\n")
            if run is None:
                assert run_python(env.environ(), event, cwd=worktree) == b""
            else:
                proc = run_native(run, env.environ(), event, cwd=worktree)
                assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"")
        (worktree / "hello.txt").unlink()
    assert handovers(native) == before
    assert relayed(nat_daemon)["requests"] == counts["requests"] + 2
    assert relayed(nat_daemon)["fallbacks"] == counts["fallbacks"]
    rows, gaps = left_behind(nat_env, worktree)
    assert (rows, gaps) == left_behind(py_env, worktree)
    assert gaps == [] and [r["tool_use_id"] for r in rows if r["source"] == "hook"] == [
        end["tool_use_id"]]
