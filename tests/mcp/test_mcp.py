"""The MCP twin (``snapshotd mcp``) through the SDK's own stdio client, against a real daemon.

Checkpoints are made by the real hook from real Claude Code payloads; the files on disk and the
``snapshots --json`` CLI are the oracles for what the tools return and do.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.conftest import (
    QUIET_WATCHER,
    Daemon,
    Env,
    MakeDaemon,
    claude_payload,
    git,
    make_git_worktree,
    run_hook,
)
from tests.support.mcp_session import call, call_error, tool_text, with_mcp

pytestmark = pytest.mark.one_ledger(
    "the MCP transport (test_listing.py, test_history.py run on each backend)")

RUN = "claude-sess-1"
# Tier 2 stays out of the way (the ``daemon`` fixture runs with QUIET_WATCHER): every checkpoint
# here is the hook's, so seqs are exact.
TOOLS = {"list_runs", "list_checkpoints", "diff_checkpoint", "restore_checkpoint", "list_gaps",
         "status", "blame_file", "export_checkpoints"} | {"show_checkpoint", "log_checkpoints",
                                                         "find_path"} | {"bisect_checkpoints"} \
    | {"list_turns", "restore_turn", "revert_checkpoint"}


def cli_listing(env: Env, run_id: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "snapshotd", "snapshots", run_id, "--json"],
                         env=env.environ(), capture_output=True, check=True)
    return json.loads(out.stdout)


def tree_state(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under root except .git: content and mtime_ns (changes show up in either)."""
    state = {}
    for path in sorted(root.rglob("*")):
        if ".git" in path.relative_to(root).parts or not path.is_file():
            continue
        state[str(path.relative_to(root))] = (path.read_bytes(), path.stat().st_mtime_ns)
    return state


def two_checkpoints(env: Env, wt: Path) -> None:
    """seq 0: hello v1 + keep.txt; seq 1: hello v2, new.txt added; plus an ignored file."""
    (wt / ".gitignore").write_text("build/\n")
    (wt / "hello.txt").write_text("v1\n")
    (wt / "keep.txt").write_text("unchanged\n")
    assert run_hook(env, claude_payload(wt, "toolu_one")).returncode == 0
    (wt / "hello.txt").write_text("v2\n")
    (wt / "new.txt").write_text("added later\n")
    (wt / "build").mkdir()
    (wt / "build" / "out.o").write_bytes(b"\0ignored build output")
    assert run_hook(env, claude_payload(wt, "toolu_two", file_path="new.txt")).returncode == 0


def test_list_checkpoints_diff_and_restore_through_mcp(sd_env: Env, daemon: Daemon,
                                                     tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    two_checkpoints(sd_env, wt)
    expected = cli_listing(sd_env, RUN)
    assert [cp["seq"] for cp in expected["checkpoints"]] == [0, 1]

    async def body(client: Client) -> None:
        # list_checkpoints: the hook-made checkpoints, with exactly the CLI's --json fields.
        listing = await call(client, "list_checkpoints", run_id=RUN)
        assert [cp["seq"] for cp in listing["checkpoints"]] == [0, 1]
        assert [cp["tool_use_id"] for cp in listing["checkpoints"]] == ["toolu_one", "toolu_two"]
        assert listing["checkpoints"] == expected["checkpoints"]
        assert listing["gaps"] == expected["gaps"]
        assert listing["checkpoints"][1]["added"] == 1
        newest = await call(client, "list_checkpoints", run_id=RUN, node_id="session", limit=1)
        assert [cp["seq"] for cp in newest["checkpoints"]] == [1]
        assert newest["checkpoints_total"] == 2 and newest["truncated"] is True

        runs = await call(client, "list_runs")
        [row] = [r for r in runs["runs"] if r["run_id"] == RUN]
        assert row["checkpoints"] == 2 and str(wt.resolve()) in row["worktrees"]

        # diff_checkpoint: what seq 1 changed, and seq 0 against the worktree now.
        changed = await call(client, "diff_checkpoint", run_id=RUN, node_id="session", seq=1)
        files = {f["path"]: f["status"] for f in changed["files"]}
        assert files == {"hello.txt": "M", "new.txt": "A"}
        assert "-v1\n+v2" in changed["patch"]
        (wt / "hello.txt").write_text("v3 unsaved\n")
        against_now = await call(client, "diff_checkpoint", run_id=RUN, node_id="session",
                                 seq=0, worktree=True, patch=False)
        assert {f["path"] for f in against_now["files"]} == {"hello.txt", "new.txt"}
        assert against_now["patch"] is None
        # The unsaved edit stays: no checkpoint holds it, so only the safety checkpoint will.

        # A dry run (the default) returns the plan and changes nothing at all.
        before = tree_state(wt)
        plan = await call(client, "restore_checkpoint", run_id=RUN, node_id="session", seq=0)
        assert plan["dry_run"] is True and plan["applied"] is False
        assert {(p["op"], p["path"]) for p in plan["plan"]} == {("M", "hello.txt"),
                                                                ("D", "new.txt")}
        assert plan["safety"] is None and plan["undo_command"] is None
        assert tree_state(wt) == before
        unchanged = await call(client, "list_checkpoints", run_id=RUN)
        assert len(unchanged["checkpoints"]) == 2  # no safety checkpoint either

        # The CLI's safety rule holds: the session's attempt is active, so no restore without
        # force, and nothing is touched.
        refused = await call_error(client, "restore_checkpoint", run_id=RUN, node_id="session",
                                   seq=0, dry_run=False)
        assert "conflict" in refused and "active" in refused
        assert tree_state(wt) == before

        # A real restore: the files are seq 0's, ignored files and .git survive, the safety
        # checkpoint holds the state it replaced, and the undo command names it.
        git_before = tree_state(wt / ".git")
        reports: list[tuple[float, float | None, str | None]] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            reports.append((progress, total, message))

        raw = await client.call_tool("restore_checkpoint", {
            "run_id": RUN, "node_id": "session", "seq": 0, "dry_run": False, "force": True},
            progress_callback=on_progress)
        assert not raw.is_error, tool_text(raw)
        done = raw.structured_content
        assert done["applied"] is True
        assert reports and reports[-1][:2] == (2, 2)  # the plan's two paths, all done
        assert (wt / "hello.txt").read_text() == "v1\n"
        assert not (wt / "new.txt").exists()
        assert (wt / "keep.txt").read_text() == "unchanged\n"
        assert (wt / "build" / "out.o").read_bytes() == b"\0ignored build output"
        assert tree_state(wt / ".git") == git_before
        assert "!! build/" in git(wt, "status", "--porcelain=v1", "--ignored")
        safety = done["safety"]
        assert safety["seq"] == 2 and safety["deduped"] is False
        assert f"--seq {safety['seq']}" in done["undo_command"]
        after = (await call(client, "list_checkpoints", run_id=RUN))["checkpoints"]
        # The safety checkpoint, then the restored state, where the restore is an event.
        assert [(cp["seq"], cp["source"]) for cp in after][-2:] == [(2, "restore"),
                                                                    (3, "restore")]
        assert [t["kind"] for t in after[-1]["tool_calls"]] == ["restore"]

        # Undo through MCP: the safety checkpoint brings the pre-restore files back.
        await call(client, "restore_checkpoint", run_id=RUN, node_id="session",
                   seq=safety["seq"], dry_run=False, force=True)
        assert (wt / "hello.txt").read_text() == "v3 unsaved\n"
        assert (wt / "new.txt").read_text() == "added later\n"

        # to_dir materializes a checkpoint elsewhere and leaves the worktree alone.
        before = tree_state(wt)
        out = tmp_path / "elsewhere"
        copied = await call(client, "restore_checkpoint", run_id=RUN, node_id="session", seq=0,
                            dry_run=False, to_dir=str(out))
        assert copied["target"] == str(out)
        assert (out / "hello.txt").read_text() == "v1\n"
        assert sorted(p.name for p in out.iterdir()) == [".gitignore", "hello.txt", "keep.txt"]
        assert tree_state(wt) == before

        # A patch too large for one daemon reply is rendered from the store, then cut to
        # max_patch_bytes; the file list still names the file.
        (wt / "big.txt").write_text("".join(f"line {i} of a long file\n" for i in range(60000)))
        assert run_hook(sd_env, claude_payload(wt, "toolu_big", file_path="big.txt")
                        ).returncode == 0
        newest = (await call(client, "list_checkpoints", run_id=RUN, limit=1))["checkpoints"][0]
        assert newest["tool_use_id"] == "toolu_big"
        big = await call(client, "diff_checkpoint", run_id=RUN, node_id="session",
                         seq=newest["seq"], max_patch_bytes=5000)
        assert "big.txt" in {f["path"] for f in big["files"]}
        assert big["patch_truncated"] is True and big["patch_bytes"] > 1_000_000
        assert big["patch"].startswith("diff --git a/big.txt b/big.txt")  # sorted: first
        assert len(big["patch"].encode()) <= 5000

    with_mcp(sd_env, body)


def test_tools_have_input_schemas_and_bad_arguments_are_tool_errors(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    two_checkpoints(sd_env, wt)

    async def body(client: Client) -> None:
        listed = {t.name: t for t in (await client.list_tools()).tools}
        assert set(listed) == TOOLS
        for tool in listed.values():
            assert tool.description, tool.name
            assert tool.input_schema["type"] == "object"
            assert "properties" in tool.input_schema
            assert tool.output_schema is not None and tool.output_schema["type"] == "object"
        checkpoints = listed["list_checkpoints"].input_schema
        assert checkpoints["required"] == ["run_id"]
        assert {"run_id", "node_id", "attempt"} <= set(checkpoints["properties"])
        diff = listed["diff_checkpoint"].input_schema
        assert set(diff["required"]) == {"run_id", "node_id", "seq"}
        assert {"to_seq", "worktree"} <= set(diff["properties"])
        restore = listed["restore_checkpoint"].input_schema
        assert set(restore["required"]) == {"run_id", "node_id"}
        assert restore["properties"]["dry_run"]["default"] is True
        assert {"seq", "to_dir", "force"} <= set(restore["properties"])
        assert "ctx" not in restore["properties"]
        assert "run_id" in listed["list_gaps"].input_schema["properties"]
        assert listed["restore_checkpoint"].annotations.destructive_hint is True
        assert listed["list_checkpoints"].annotations.read_only_hint is True

        status = await call(client, "status")
        assert status["running"] is True
        assert status["pid"] == daemon.proc.pid
        assert Path(status["home"]) == sd_env.home.resolve()

        text = await call_error(client, "list_checkpoints", run_id="no-such-run")
        assert "unknown run 'no-such-run'" in text and RUN in text
        text = await call_error(client, "restore_checkpoint", run_id="no-such-run",
                                node_id="session")
        assert "unknown run" in text and RUN in text
        text = await call_error(client, "diff_checkpoint", run_id="no-such-run",
                                node_id="session", seq=0)
        assert "unknown run" in text
        text = await call_error(client, "list_gaps", run_id="no-such-run")
        assert "unknown run" in text
        assert "bad-id" in await call_error(client, "list_checkpoints", run_id="../../etc")
        text = await call_error(client, "restore_checkpoint", run_id=RUN, node_id="session",
                                seq=99)
        assert "seq 99" in text and "0-1" in text
        text = await call_error(client, "diff_checkpoint", run_id=RUN, node_id="session",
                                seq=0, to_seq=1, worktree=True)
        assert "not both" in text
        assert "absolute" in await call_error(client, "restore_checkpoint", run_id=RUN,
                                              node_id="session", to_dir="relative/dir")
        # Ill-typed and missing arguments are rejected against the input schema.
        assert "seq" in await call_error(client, "diff_checkpoint", run_id=RUN,
                                         node_id="session", seq="latest")
        assert "run_id" in await call_error(client, "list_checkpoints")
        assert "attempt" in await call_error(client, "list_checkpoints", run_id=RUN, attempt=0)
        # ...and after all of that the same server still answers.
        listing = await call(client, "list_checkpoints", run_id=RUN)
        assert len(listing["checkpoints"]) == 2

    with_mcp(sd_env, body)
    assert daemon.ping()


def test_without_a_daemon_reads_work_from_the_ledger_and_restore_works_directly(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    d = make_daemon(sd_env, QUIET_WATCHER)
    two_checkpoints(sd_env, wt)
    # A gap the daemon could not see: a capture of a vanished worktree.
    gone = tmp_path / "gone"
    assert run_hook(sd_env, claude_payload(gone, "toolu_gone", session_id="sess-2")
                    ).returncode == 0
    assert d.stop() == 0

    async def body(client: Client) -> None:
        status = await call(client, "status")
        assert status["running"] is False and str(sd_env.socket) in status["message"]
        listing = await call(client, "list_checkpoints", run_id=RUN)
        assert listing["source"] == "ledger"
        assert [cp["seq"] for cp in listing["checkpoints"]] == [0, 1]
        gaps = await call(client, "list_gaps")
        assert gaps["total"] >= 1 and gaps["unresolved"] >= 1
        [gap] = [g for g in gaps["gaps"] if g["tool_use_id"] == "toolu_gone"]
        assert gap["run_id"] == "claude-sess-2" and gap["resolved"] is False
        assert gaps["by_reason"][gap["reason"]] >= 1
        mine = await call(client, "list_gaps", run_id=RUN)
        assert mine["gaps"] == []
        before = tree_state(wt)
        plan = await call(client, "restore_checkpoint", run_id=RUN, node_id="session", seq=0)
        assert {(p["op"], p["path"]) for p in plan["plan"]} == {("M", "hello.txt"),
                                                                ("D", "new.txt")}
        assert tree_state(wt) == before
        done = await call(client, "restore_checkpoint", run_id=RUN, node_id="session", seq=0,
                          dry_run=False, force=True)
        assert (wt / "hello.txt").read_text() == "v1\n"
        assert done["safety"]["seq"] == 1 and done["safety"]["deduped"] is True  # unchanged

    with_mcp(sd_env, body)


def test_a_remote_password_is_never_shown_through_mcp(sd_env: Env, tmp_path: Path,
                                                      make_daemon: MakeDaemon) -> None:
    # A remote nobody listens on: pushes fail, and the failure names the URL.
    secret = "s3cret-pw"
    remote = f"https://agent:{secret}@127.0.0.1:9/nowhere.git"
    make_daemon(sd_env, dict(QUIET_WATCHER, SNAPSHOTD_REMOTE=remote))
    seen: list[str] = []

    async def body(client: Client) -> None:
        status = await call(client, "status")
        assert status["running"] is True
        assert status["config"]["remote"] == "https://agent:***@127.0.0.1:9/nowhere.git"
        seen.append(json.dumps(status))
        seen.append(tool_text(await client.call_tool("list_runs", {})))

    with_mcp(sd_env, body)
    assert seen and all(secret not in text for text in seen), seen


def test_stdout_carries_nothing_but_the_protocol(sd_env: Env, daemon: Daemon,
                                                 tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    two_checkpoints(sd_env, wt)
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                    "clientInfo": {"name": "raw-test", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "list_checkpoints", "arguments": {"run_id": RUN}}},
        {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
         "params": {"name": "list_checkpoints", "arguments": {"run_id": "nope"}}},
        {"jsonrpc": "2.0", "id": 5, "method": "tools/call",
         "params": {"name": "restore_checkpoint",
                    "arguments": {"run_id": RUN, "node_id": "session", "seq": 0}}},
    ]
    errlog = open(tmp_path / "mcp.stderr", "wb")  # a file: a full stderr pipe cannot block it
    proc = subprocess.Popen(
        [sys.executable, "-m", "snapshotd", "mcp", "--log-level", "debug"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=errlog, env=sd_env.environ())
    # A watchdog, so a server that never answers fails the test instead of hanging it.
    watchdog = threading.Timer(60, proc.kill)
    watchdog.start()
    try:
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(json.dumps(m) + "\n" for m in messages).encode())
        proc.stdin.flush()
        replies: dict[Any, dict] = {}
        while len(replies) < 5:
            line = proc.stdout.readline()
            assert line, "the server closed stdout before answering every request"
            message = json.loads(line)  # every stdout line is one JSON-RPC message
            assert message["jsonrpc"] == "2.0"
            if "id" in message:
                replies[message["id"]] = message
        proc.stdin.close()  # end of input: the server exits
        rest = proc.stdout.read()
        assert proc.wait() == 0
    finally:
        watchdog.cancel()
        errlog.close()
        if proc.poll() is None:
            proc.kill()
    stderr = (tmp_path / "mcp.stderr").read_bytes()
    for line in rest.splitlines():
        assert json.loads(line)["jsonrpc"] == "2.0"
    assert set(replies) == {1, 2, 3, 4, 5}
    assert {t["name"] for t in replies[2]["result"]["tools"]} == TOOLS
    assert replies[3]["result"]["isError"] is False
    assert len(replies[3]["result"]["structuredContent"]["checkpoints"]) == 2
    assert replies[4]["result"]["isError"] is True
    assert replies[5]["result"]["structuredContent"]["dry_run"] is True
    assert stderr  # debug logging went somewhere, and it was not stdout


def test_without_the_sdk_the_command_says_how_to_install_it(sd_env: Env) -> None:
    blocker = ("import sys; sys.modules['mcp'] = None; from snapshotd.cli import main; "
               "sys.argv = ['snapshotd'] + sys.argv[1:]; main()")
    core = subprocess.run([sys.executable, "-c", blocker, "--help"], env=sd_env.environ(),
                          capture_output=True, timeout=60)
    assert core.returncode == 0 and b"mcp" in core.stdout  # the core CLI loads without the SDK
    proc = subprocess.run([sys.executable, "-c", blocker, "mcp"], env=sd_env.environ(),
                          capture_output=True, timeout=60, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1
    assert proc.stdout == b""
    assert b"pip install 'snapshotd[mcp]'" in proc.stderr


def test_plugin_registers_the_server() -> None:
    root = Path(__file__).resolve().parents[2]
    config = json.loads((root / ".mcp.json").read_text())
    server = config["mcpServers"]["snapshotd"]
    assert server["command"] == "snapshotd" and server["args"] == ["mcp"]
    assert os.path.exists(root / ".claude-plugin" / "plugin.json")
