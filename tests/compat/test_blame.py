"""``snapshotd blame``: a repository history built here, replayed as tool calls, blamed by
snapshotd and by ``git blame --first-parent`` over the same commits (the oracle)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, git
from tests.support.review_replay import Replay, build_history, cli, replay

pytestmark = pytest.mark.one_ledger("blame against git blame over the store's commits")

START = 5


def oracle(rep: Replay, path: str, upto: str) -> list[tuple[int, int | None, str]]:
    """``(line, seq, text)`` per line from ``git blame --first-parent`` over the replayed
    commits; lines older than the replayed range (boundary commits) are the base's: seq None
    (the worktree's HEAD, the start commit, is the first checkpoint's base)."""
    out = git(rep.worktree, "blame", "--first-parent", "--line-porcelain",
              f"{rep.commits[rep.start]}..{upto}", "--", path)
    rows = []
    commit, final, boundary = "", 0, False
    for line in out.splitlines():
        if line.startswith("\t"):
            seq = None if boundary else rep.seq_of(commit)
            rows.append((final, seq, line[1:]))
        elif len(line) > 41 and line[40] == " " and all(c in "0123456789abcdef"
                                                         for c in line[:40]):
            commit, final, boundary = line[:40], int(line.split()[2]), False
        elif line == "boundary":
            boundary = True
    return rows


def blame_json(env: Env, rep: Replay, path: str, *extra: str) -> dict:
    proc = cli(env, "blame", rep.run_id, path, "--node", rep.node_id, "--json", *extra)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_blame_agrees_with_git_blame_first_parent(sd_env: Env, daemon: Daemon,
                                                  tmp_path: Path) -> None:
    commits = build_history(tmp_path / "wt")
    rep = replay(sd_env, daemon, tmp_path / "wt", commits, START)
    newest = len(rep.replayed) - 1
    seqs: set[int | None] = set()
    for path in ("src/app.py", "README.md", "src/extra.py"):
        got = blame_json(sd_env, rep, path)
        assert got["path"] == path and got["seq"] == newest
        assert set(got) == {"path", "seq", "total_lines", "first_line", "last_line", "lines",
                            "turn"}
        assert (got["first_line"], got["last_line"]) == (1, got["total_lines"])
        assert all(set(x) == {"line", "text", "seq", "tool_use_id", "label", "tier", "source",
                                "tool_call"}
                   for x in got["lines"])
        mine = [(x["line"], x["seq"], x["text"]) for x in got["lines"]]
        assert mine == oracle(rep, path, commits[-1]), path
        for x in got["lines"]:
            if x["seq"] is None:  # held by the base, before the session
                assert x["source"] == "base" and x["tool_use_id"] is None
                assert x["label"] == f"before the session ({commits[START][:8]})"
                continue
            assert x["tool_use_id"] == f"call-{x['seq']}"
            assert x["tier"] == 1 and x["source"] == "hook"
        seqs |= {x["seq"] for x in got["lines"]}
    assert None in seqs and len(seqs) > 5, "lines from before the replay and from many calls"
    # An older checkpoint, by --seq, and a file that existed then only.
    seq = 20 - START - 1
    got = blame_json(sd_env, rep, "notes.txt", "--seq", str(seq))
    assert [(x["line"], x["seq"], x["text"]) for x in got["lines"]] == \
        oracle(rep, "notes.txt", commits[START + seq])


def test_blame_without_a_daemon_and_in_text(sd_env: Env, daemon: Daemon,
                                            tmp_path: Path) -> None:
    commits = build_history(tmp_path / "wt", count=12)
    rep = replay(sd_env, daemon, tmp_path / "wt", commits, 3)
    through_daemon = blame_json(sd_env, rep, "src/app.py")
    # An absolute path inside the worktree names the same file.
    absolute = blame_json(sd_env, rep, str(tmp_path / "wt" / "src" / "app.py"))
    assert absolute == through_daemon
    daemon.stop()
    assert blame_json(sd_env, rep, "src/app.py") == through_daemon
    text = cli(sd_env, "blame", rep.run_id, "src/app.py", "--node", rep.node_id)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert len(lines) == len(through_daemon["lines"])
    first = through_daemon["lines"][0]
    seq = "-" if first["seq"] is None else str(first["seq"])
    assert lines[0].split()[0] == seq and lines[0].endswith(") " + first["text"])


def test_blame_errors(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    commits = build_history(tmp_path / "wt", count=4)
    rep = replay(sd_env, daemon, tmp_path / "wt", commits, 1)
    missing = cli(sd_env, "blame", rep.run_id, "nope.txt", "--node", rep.node_id)
    assert missing.returncode == 1 and "nope.txt is not in checkpoint" in missing.stderr
    folder = cli(sd_env, "blame", rep.run_id, "src", "--node", rep.node_id)
    assert folder.returncode == 1 and "directory" in folder.stderr
    escape = cli(sd_env, "blame", rep.run_id, "../x", "--node", rep.node_id)
    assert escape.returncode == 1 and "(bad-request)" in escape.stderr
    outside = cli(sd_env, "blame", rep.run_id, "/etc/passwd", "--node", rep.node_id)
    assert outside.returncode == 1 and "not inside" in outside.stderr
    unknown = cli(sd_env, "blame", "no-such-run", "x", "--node", "n")
    assert unknown.returncode == 1 and "unknown run" in unknown.stderr
    seq = cli(sd_env, "blame", rep.run_id, "README.md", "--node", rep.node_id, "--seq", "99")
    assert seq.returncode == 1 and "no checkpoint seq 99" in seq.stderr


def test_the_mcp_twin_answers_the_same(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    from snapshotd.ops.operations import Operations

    commits = build_history(tmp_path / "wt", count=8)
    rep = replay(sd_env, daemon, tmp_path / "wt", commits, 2)
    ops = Operations(home=sd_env.home, socket=sd_env.socket)
    whole = blame_json(sd_env, rep, "README.md")
    assert ops.blame_file(run_id=rep.run_id, node_id=rep.node_id, path="README.md") == whole
    part = ops.blame_file(run_id=rep.run_id, node_id=rep.node_id, path="README.md",
                          first_line=3, last_line=5)
    assert part["lines"] == whole["lines"][2:5]


def test_a_blame_too_large_for_one_frame_is_completed_from_the_store(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = tmp_path / "big"
    wt.mkdir()
    lines = [f"{i:06d} " + "x" * 120 for i in range(6000)]  # ~760 KB of text
    (wt / "big.txt").write_text("\n".join(lines) + "\n")
    with daemon.client() as c:
        c.snapshot(str(wt), run_id="big", node_id="n", tool_use_id="t0", label="write big")
        lines[100] = "changed by the second call"
        (wt / "big.txt").write_text("\n".join(lines) + "\n")
        c.snapshot(str(wt), run_id="big", node_id="n", tool_use_id="t1", label="edit big")
        raw = c.request("blame", run_id="big", node_id="n", path="big.txt")
    assert raw["lines_omitted"] is True and raw["lines"] == []
    proc = cli(sd_env, "blame", "big", "big.txt", "--node", "n", "--json")
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout)["lines"]
    assert len(got) == 6000 and got[100]["seq"] == 1 and got[100]["tool_use_id"] == "t1"
    assert {x["seq"] for i, x in enumerate(got) if i != 100} == {0}
