"""A tool call owns what changed while it ran (issue 43; docs/review.md, "Who changed what").

Through the real ``snapshot-hook`` and a real daemon with a watcher that settles quickly: the
tier-2 checkpoints the watcher takes between a tool call's start event (Claude Code's and Qwen
Code's ``PreToolUse``) and its end are that call's, ``in-flight``, in the ledger and in the
commit's trailer; without a start event they are its ``inferred`` ones; a person's edit while
the session is idle stays unowned; a failing shell call owns its changes and is marked failed;
and with two sessions in one folder the watcher's capture goes to the session whose tool call
is running.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.client.test_agents import localize
from tests.conftest import Daemon, Env, MakeDaemon, git, load_payloads, make_git_worktree, run_hook

pytestmark = pytest.mark.one_ledger("the hook and the watcher end to end")

FAST_WATCHER = {"SNAPSHOTD_SETTLE_MS": "100", "SNAPSHOTD_MAX_WAIT_MS": "1000"}
COMMAND = "echo two > b.txt; sleep 1.2; echo three > c.txt"


@pytest.fixture
def watching(sd_env: Env, make_daemon: MakeDaemon) -> Daemon:
    return make_daemon(sd_env, FAST_WATCHER)


def claude(wt: Path, event: str, tool_use_id: str | None = None, *, session: str = "s1",
           command: str | None = None, file_path: str | None = None) -> dict:
    """A real Claude Code payload (the fixtures' Write or Bash call) in ``wt``."""
    raw = load_payloads("claude-code/post-tool-use.ndjson")
    base = dict(raw[1] if command is not None else raw[0])
    base = dict(localize(base, "<harness>/runs/canonical/proj", wt))  # type: ignore[arg-type]
    base.update(session_id=session, hook_event_name=event)
    if event != "PostToolUse":
        base.pop("tool_response", None)
    if tool_use_id is not None:
        base["tool_use_id"] = tool_use_id
    if command is not None:
        base["tool_input"] = dict(base["tool_input"], command=command)
    if file_path is not None:
        base["tool_input"] = dict(base["tool_input"], file_path=str(wt / file_path))
    return base


def lifecycle(wt: Path, event: str, session: str = "s1") -> dict:
    found = [p for p in load_payloads("claude-code/session-lifecycle.ndjson")
             if p["hook_event_name"] == event][0]
    return dict(localize(found, "<harness>/runs/lifecycle/proj", wt),  # type: ignore[arg-type]
                session_id=session)


def hook(env: Env, wt: Path, payload: dict) -> None:
    result = run_hook(env, payload, CLAUDE_PROJECT_DIR=str(wt))
    assert (result.returncode, result.stdout, result.stderr) == (0, b"", b"")


def rows(env: Env, run: str) -> list[dict]:
    return env.ledger_query(
        "SELECT seq, tier, source, tool_use_id, owner, owner_how, commit_id, created_at"
        " FROM checkpoints WHERE run_id=? ORDER BY seq", (run,))


def call_row(env: Env, run: str, tool_use_id: str) -> dict:
    [row] = env.ledger_query(
        "SELECT t.* FROM tool_calls t JOIN attempts a ON a.pk = t.attempt_pk"
        " WHERE a.run_id=? AND t.tool_use_id=?", (run, tool_use_id))
    return row


def wait_tier2(env: Env, run: str, count: int) -> list[dict]:
    """The run's tier-2 rows once there are ``count`` (the watcher settled)."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [r for r in rows(env, run) if r["tier"] == 2]
        if len(found) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"no {count} tier-2 checkpoints of {run}: {rows(env, run)}")


def trailer_owner(env: Env, commit: str) -> str | None:
    message = git(env.home, "--git-dir", str(env.home / "store.git"), "show", "-s",
                  "--format=%B", commit)
    found = [line.split(": ", 1)[1] for line in message.splitlines()
             if line.startswith("Snapshotd-Owner: ")]
    return found[0] if found else None


def long_bash(env: Env, wt: Path, *, start: bool, wait_last: bool = True) -> list[dict]:
    """t1 writes a.txt; then the Bash call t2 writes b.txt, runs past the settle window (the
    watcher takes a checkpoint) and writes c.txt. Returns the run's rows."""
    (wt / "a.txt").write_text("one\n")
    hook(env, wt, claude(wt, "PostToolUse", "t1", file_path="a.txt"))
    if start:
        hook(env, wt, claude(wt, "PreToolUse", "t2", command=COMMAND))
    (wt / "b.txt").write_text("two\n")
    wait_tier2(env, "claude-s1", 1)
    (wt / "c.txt").write_text("three\n")
    if wait_last:
        wait_tier2(env, "claude-s1", 2)
    hook(env, wt, claude(wt, "PostToolUse", "t2", command=COMMAND))
    return rows(env, "claude-s1")


def test_start_event_makes_tier2_checkpoints_the_calls(sd_env: Env, watching: Daemon,
                                                       tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    found = long_bash(sd_env, wt, start=True)
    tier2 = [r for r in found if r["tier"] == 2]
    assert len(tier2) >= 2
    assert [(r["owner"], r["owner_how"]) for r in tier2] == [("t2", "in-flight")] * len(tier2)
    assert [trailer_owner(sd_env, r["commit_id"]) for r in tier2] == ["in-flight t2"] * len(tier2)
    assert trailer_owner(sd_env, found[0]["commit_id"]) is None  # t1's own capture
    t2 = call_row(sd_env, "claude-s1", "t2")
    assert t2["label"] == f"Bash {COMMAND}"
    assert t2["deduped"] == 1 and t2["seq"] == tier2[-1]["seq"]  # its end found nothing new
    assert t2["started_at"] is not None and t2["started_at"] <= tier2[0]["created_at"]
    assert call_row(sd_env, "claude-s1", "t1")["started_at"] is None  # no start event


def test_without_start_event_the_changes_are_inferred(sd_env: Env, watching: Daemon,
                                                      tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    found = long_bash(sd_env, wt, start=False, wait_last=False)
    tier2 = [r for r in found if r["tier"] == 2]
    assert tier2 and [(r["owner"], r["owner_how"]) for r in tier2] == \
        [("t2", "inferred")] * len(tier2)
    # Known only at the call's end: in the ledger, never in the commit.
    assert [trailer_owner(sd_env, r["commit_id"]) for r in tier2] == [None] * len(tier2)
    assert call_row(sd_env, "claude-s1", "t2")["started_at"] is None


@pytest.mark.parametrize("next_turn", ["prompt", "no-prompt", "start-event"])
def test_edit_while_idle_stays_unowned(sd_env: Env, watching: Daemon, tmp_path: Path,
                                       next_turn: str) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "a.txt").write_text("one\n")
    hook(sd_env, wt, claude(wt, "PostToolUse", "t1", file_path="a.txt"))
    hook(sd_env, wt, lifecycle(wt, "Stop"))
    (wt / "human.txt").write_text("by hand\n")
    [edit] = wait_tier2(sd_env, "claude-s1", 1)
    if next_turn == "prompt":
        hook(sd_env, wt, lifecycle(wt, "UserPromptSubmit"))
    if next_turn == "start-event":
        hook(sd_env, wt, claude(wt, "PreToolUse", "t3", file_path="x.txt"))
    (wt / "x.txt").write_text("x\n")
    hook(sd_env, wt, claude(wt, "PostToolUse", "t3", file_path="x.txt"))
    found = {r["seq"]: r for r in rows(sd_env, "claude-s1")}
    assert (found[edit["seq"]]["owner"], found[edit["seq"]]["owner_how"]) == (None, None)
    assert trailer_owner(sd_env, edit["commit_id"]) is None
    assert call_row(sd_env, "claude-s1", "t3")["seq"] > edit["seq"]


def _failing_calls(wt: Path) -> list[tuple[str, dict, str]]:
    claude_fail = dict(localize(load_payloads("claude-code/post-tool-use-failure.ndjson")[0],
                                "<harness>/runs/failures/proj", wt))  # type: ignore[arg-type]
    qwen_fail = dict(localize(load_payloads("qwen/post-tool-use.ndjson")[2],
                              "<harness>/proj", wt))  # type: ignore[arg-type]
    assert {claude_fail["hook_event_name"], qwen_fail["hook_event_name"]} == {
        "PostToolUseFailure"}
    return [(f"claude-{claude_fail['session_id']}", claude_fail, "z.txt"),
            (f"qwen-{qwen_fail['session_id']}", qwen_fail, "failed.txt")]


@pytest.mark.parametrize("agent", ["claude", "qwen"])
def test_failing_shell_call_owns_its_changes(sd_env: Env, watching: Daemon, tmp_path: Path,
                                             agent: str) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    run, end, written = [c for c in _failing_calls(wt) if c[0].startswith(agent)][0]
    first = dict(end, hook_event_name="PostToolUse", tool_use_id="first",
                 tool_call_id="call_first", tool_input={"command": "true"})
    first.pop("error", None)
    hook(sd_env, wt, first)  # the session's attempt, watched from here on
    start = {k: v for k, v in end.items() if k != "error"}
    start["hook_event_name"] = "PreToolUse"
    hook(sd_env, wt, start)
    (wt / written).write_text("partial\n")
    tier2 = wait_tier2(sd_env, run, 1)
    hook(sd_env, wt, end)
    found = [r for r in rows(sd_env, run) if r["seq"] in {t["seq"] for t in tier2}]
    assert [(r["owner"], r["owner_how"]) for r in found] == \
        [(end["tool_use_id"], "in-flight")] * len(found)
    row = call_row(sd_env, run, end["tool_use_id"])
    assert row["started_at"] is not None and '"exit_code": 3' in row["outcome"]
    if agent == "qwen":  # the model's id is the same call
        assert call_row(sd_env, run, end["tool_call_id"])["seq"] == row["seq"]


def test_shared_folder_tier2_goes_to_the_session_whose_call_runs(
        sd_env: Env, watching: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "a.txt").write_text("a\n")
    hook(sd_env, wt, claude(wt, "PostToolUse", "a1", session="A", file_path="a.txt"))
    (wt / "b.txt").write_text("b\n")
    hook(sd_env, wt, claude(wt, "PostToolUse", "b1", session="B", file_path="b.txt"))
    # B spoke last, so the watcher's captures went to B; A's tool call now runs.
    since = time.time()  # the watcher may still take a.txt or b.txt before this: not ours
    hook(sd_env, wt, claude(wt, "PreToolUse", "a2", session="A", command="make"))
    (wt / "built.txt").write_text("built\n")
    deadline = time.monotonic() + 30
    while not (ours := [r for r in wait_tier2(sd_env, "claude-A", 1)
                        if r["created_at"] > since]):
        assert time.monotonic() < deadline, rows(sd_env, "claude-A")
        time.sleep(0.05)
    [cp] = ours
    assert (cp["owner"], cp["owner_how"]) == ("a2", "in-flight")
    assert [r for r in rows(sd_env, "claude-B") if r["tier"] == 2
            and r["created_at"] > since] == []
    hook(sd_env, wt, claude(wt, "PostToolUse", "a2", session="A", command="make"))
    assert call_row(sd_env, "claude-A", "a2")["seq"] == cp["seq"]  # deduplicated onto it


def test_start_without_a_stable_id_is_matched_by_order(sd_env: Env, watching: Daemon,
                                                       tmp_path: Path) -> None:
    """Gemini CLI derives its ids from each event's timestamp: the start names no id the end
    repeats, so the end takes the start's place and the checkpoints since it (ledger only)."""
    wt = make_git_worktree(tmp_path / "proj")
    raw = load_payloads("gemini/after-tool.ndjson")
    shell = [p for p in raw if p["tool_name"] == "run_shell_command"][0]
    end = dict(localize(shell, "<harness>/runs/final-basic/proj", wt))  # type: ignore[arg-type]
    first = dict(end, timestamp="2026-11-29T11:50:00.000Z", tool_input={"command": "true"})
    hook(sd_env, wt, first)  # the session's attempt, watched from here on
    start = {k: v for k, v in end.items() if k != "tool_response"}
    start.update(hook_event_name="BeforeTool", timestamp="2026-11-29T11:51:00.000Z")
    hook(sd_env, wt, start)
    (wt / "out.txt").write_text("out\n")
    run = f"gemini-{end['session_id']}"
    tier2 = wait_tier2(sd_env, run, 1)
    assert [trailer_owner(sd_env, r["commit_id"]) for r in tier2] == [None]  # no id yet
    hook(sd_env, wt, end)
    ended = [r for r in sd_env.ledger_query(
        "SELECT t.tool_use_id, t.started_at FROM tool_calls t JOIN attempts a"
        " ON a.pk = t.attempt_pk WHERE a.run_id=? ORDER BY t.created_at", (run,))][-1]
    assert ended["started_at"] is not None
    found = [r for r in rows(sd_env, run) if r["seq"] == tier2[0]["seq"]]
    assert [(r["owner"], r["owner_how"]) for r in found] == [(ended["tool_use_id"], "in-flight")]


def test_a_restart_forgets_the_call_in_flight(sd_env: Env, make_daemon: MakeDaemon,
                                              tmp_path: Path) -> None:
    """The calls in flight live in the daemon's memory: across a restart the call's changes
    are inferred, as for an agent that sends no start event."""
    wt = make_git_worktree(tmp_path / "proj")
    first = make_daemon(sd_env, FAST_WATCHER)
    (wt / "a.txt").write_text("one\n")
    hook(sd_env, wt, claude(wt, "PostToolUse", "t1", file_path="a.txt"))
    hook(sd_env, wt, claude(wt, "PreToolUse", "t2", command=COMMAND))
    assert first.stop() == 0
    make_daemon(sd_env, FAST_WATCHER)
    (wt / "b.txt").write_text("two\n")
    [cp] = wait_tier2(sd_env, "claude-s1", 1)
    hook(sd_env, wt, claude(wt, "PostToolUse", "t2", command=COMMAND))
    found = {r["seq"]: r for r in rows(sd_env, "claude-s1")}
    assert (found[cp["seq"]]["owner"], found[cp["seq"]]["owner_how"]) == ("t2", "inferred")
    assert call_row(sd_env, "claude-s1", "t2")["started_at"] is None
