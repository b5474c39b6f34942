"""``show``, ``log`` and ``find`` (and their MCP twins) against git, on a replayed history.

A git repository built here holds a few dozen commits (lines added, changed and removed, files
added, renamed and deleted, a ``def parse`` added and later removed). Each commit is written into
a worktree, as git has it, and captured by the real daemon as one tier-1 tool call, so
checkpoint seq k is commit k. git itself is the oracle: ``git diff --name-status``, ``git log -S``
and ``git log -- PATH`` over the same commits.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from snapshotd.cli import main
from snapshotd_client.gaps import append_gap, make_gap
from tests.conftest import Daemon, Env, git, make_git_worktree
from tests.mcp.test_mcp import call, call_error, with_mcp

RUN = "replay"
NODE = "agent"
COMMITS = 30
PARSE_ADDED, PARSE_HELPER, PARSE_REMOVED, PARSER_DELETED = 8, 12, 20, 28
# A mode-only change: tools/run.sh (added at step 15) becomes executable at step 17.
EXECUTABLE = {"tools/run.sh": 17}


def history_states() -> list[dict[str, str]]:
    """The files of each commit: every step changes something, ``def parse`` comes in at
    PARSE_ADDED and goes at PARSE_REMOVED; other edits of its file keep its count. A path in
    EXECUTABLE is written with mode 755 from the step it is listed for."""
    files = {"README.md": "# demo\n",
             "src/app.py": "import sys\nprint('app')\n",
             "lib/util.py": "".join(f"def util{i}():\n    return {i}\n" for i in range(5)),
             "notes.txt": "".join(f"note {i}\n" for i in range(40))}
    states = [dict(files)]
    for k in range(1, COMMITS):
        step = k % 5
        if step == 0:
            files[f"docs/page{k}.md"] = f"# page {k}\n" + "text\n" * (k % 7 + 1)
        elif step == 1:
            files["src/app.py"] += f"print('step {k}')\n"
        elif step == 2:
            lines = files["lib/util.py"].splitlines(keepends=True)
            lines[1] = f"    return {k * 100}\n"
            files["lib/util.py"] = "".join(lines)
        elif step == 3:
            files["notes.txt"] = "".join(files["notes.txt"].splitlines(keepends=True)[1:])
        else:
            files["src/app.py"] = f"import os  # {k}\n" + files["src/app.py"].split("\n", 1)[1]
            files[f"data/{k}.txt"] = f"data {k}\n"
        if k == PARSE_ADDED:
            files["lib/parser.py"] = "def parse(text):\n    return text.split()\n"
        elif k == PARSE_HELPER:
            files["lib/parser.py"] += "\n\ndef tokens(text):\n    return len(text)\n"
        elif k == PARSE_REMOVED:
            files["lib/parser.py"] = "def tokens(text):\n    return len(text)\n"
        elif k == 15:
            files["tools/run.sh"] = "echo run\n"
        elif k == 24:
            del files["docs/page10.md"]
        elif k == 26:
            files["docs/moved5.md"] = files.pop("docs/page5.md")
        elif k == PARSER_DELETED:
            del files["lib/parser.py"]
        states.append(dict(files))
    return states


def build_source(root: Path) -> list[str]:
    """The source repository: one commit per state; the commit ids, oldest first."""
    src = make_git_worktree(root)
    commits = []
    for k, state in enumerate(history_states()):
        write_state(src, state, k)
        git(src, "add", "-A")
        git(src, "commit", "-q", "-m", f"step {k}")
        commits.append(git(src, "rev-parse", "HEAD").strip())
    return commits


def write_state(root: Path, state: dict[str, str], step: int | None = None,
                executable: set[str] | None = None) -> None:
    """Make root's files (outside .git) exactly ``state``; the ``executable`` ones (default:
    EXECUTABLE's at ``step``) mode 755, the others 644."""
    if executable is None:
        executable = {p for p, since in EXECUTABLE.items() if step is not None and step >= since}
    for path in sorted(root.rglob("*"), reverse=True):
        rel = path.relative_to(root)
        if rel.parts[0] == ".git":
            continue
        if path.is_file() and rel.as_posix() not in state:
            path.unlink()
        elif path.is_dir() and not any(path.iterdir()):
            path.rmdir()
    for rel, text in state.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
        (root / rel).chmod(0o755 if rel in executable else 0o644)


def checkout_from_git(src: Path, commit: str, wt: Path) -> None:
    """Write commit's tree, as git stores it, into wt."""
    listed = [line.split("\t", 1) for line in git(src, "ls-tree", "-r", commit).splitlines()]
    write_state(wt, {name: git(src, "show", f"{commit}:{name}") for _, name in listed},
                executable={name for meta, name in listed if meta.startswith("100755")})


def replay(daemon: Daemon, src: Path, commits: list[str], wt: Path, run: str = RUN) -> None:
    """Each commit as one tool call: its files into wt, then a tier-1 capture."""
    with daemon.client() as client:
        for k, commit in enumerate(commits):
            checkout_from_git(src, commit, wt)
            reply = client.snapshot(wt, run_id=run, node_id=NODE, tier=1, source="hook",
                                    label=f"step {k}", tool_use_id=f"toolu_{k:03d}")
            assert reply["seq"] == k and not reply["deduped"], reply


def sd(env: Env, *args: str, ok: bool = True,
       process: bool = False) -> subprocess.CompletedProcess:
    """``snapshotd ARGS`` on ``env``'s home and environment: as a process with ``process``,
    else in this process through click's runner (the same command code without an
    interpreter's start, 0.3 s a call and dozens of calls a test; each test still runs the
    command as a process once)."""
    if process:
        proc = subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                              capture_output=True, text=True, timeout=60)
    else:
        wanted = env.environ()
        overlay: dict[str, str | None] = {k: None for k in os.environ if k not in wanted}
        overlay.update(wanted)
        result = CliRunner().invoke(main, list(args), env=overlay)
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            raise result.exception
        proc = subprocess.CompletedProcess(["snapshotd", *args], result.exit_code,
                                           result.stdout, result.stderr)
    if ok:
        assert proc.returncode == 0, proc.stderr
    return proc


def sd_json(env: Env, *args: str, process: bool = False) -> dict:
    return json.loads(sd(env, *args, "--json", process=process).stdout)


def git_name_status(src: Path, a: str | None, b: str) -> list[str]:
    """git's name-status of b against a (the first commit: against the empty tree)."""
    out = (git(src, "diff", "--name-status", "-M", a, b) if a else
           git(src, "diff-tree", "--root", "-r", "--no-commit-id", "--name-status", b)).splitlines()
    # git prints a rename's similarity (R100); the status letter is what both sides share.
    return sorted(line[0] + line[line.index("\t"):] for line in out)


def seqs_of(commits: list[str], listed: str) -> list[int]:
    return [commits.index(c) for c in listed.split()]


@pytest.mark.one_ledger(
    "the store's diffs of each checkpoint (the same file's log and find tests read the checkpoints"
    " from each backend)")
def test_show_of_every_checkpoint_is_gits_diff(sd_env: Env, daemon: Daemon,
                                               tmp_path: Path) -> None:
    src = tmp_path / "src"
    commits = build_source(src)
    wt = make_git_worktree(tmp_path / "wt")
    replay(daemon, src, commits, wt)

    # show --name-status of every checkpoint is git's diff of the replayed commits.
    for k in range(COMMITS):
        out = sd(sd_env, "show", RUN, "--node", NODE, "--seq", str(k), "--name-status").stdout
        header, _, body = out.partition("\n\n")
        assert f"step {k}  [toolu_{k:03d}]  tier 1 hook" in header
        parent = commits[k - 1] if k else None
        assert sorted(body.splitlines()) == git_name_status(src, parent, commits[k]), k
    mode_only = sd_json(sd_env, "show", RUN, "--node", NODE, "--seq", "17", process=True)
    assert ("M", "tools/run.sh") in {(f["status"], f["path"]) for f in mode_only["files"]}
    assert "new mode 100755" in mode_only["patch"]
    assert "compared with an empty tree" in sd(sd_env, "show", RUN, "--node", NODE,
                                               "--seq", "0").stdout
    patch = sd(sd_env, "show", RUN, "--node", NODE, "--seq", str(PARSE_ADDED)).stdout
    assert "+def parse(text):" in patch and "diff --git a/lib/parser.py" in patch
    stat = sd(sd_env, "show", RUN, "--node", NODE, "--seq", "3", "--stat").stdout
    assert "notes.txt | 1 -" in stat


def test_log_and_find_agree_with_git(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    src = tmp_path / "src"
    commits = build_source(src)
    wt = make_git_worktree(tmp_path / "wt")
    replay(daemon, src, commits, wt)

    # log -S finds exactly where `def parse` came and went, newest first, as git log -S does.
    found = sd_json(sd_env, "log", RUN, "-S", "def parse")
    assert [e["seq"] for e in found["entries"]] == [PARSE_REMOVED, PARSE_ADDED]
    oracle = git(src, "log", "--format=%H", "-S", "def parse")
    assert [e["seq"] for e in found["entries"]] == seqs_of(commits, oracle)
    assert found["entries"][0]["tool_use_id"] == f"toolu_{PARSE_REMOVED:03d}"

    # log --path: a file and a directory prefix, against git log -- PATH.
    for path in ("lib/parser.py", "lib", "docs/", "notes.txt"):
        listed = sd_json(sd_env, "log", RUN, "--node", NODE, "--path", path)
        oracle = git(src, "log", "--format=%H", "--", path)
        assert [e["seq"] for e in listed["entries"]] == seqs_of(commits, oracle), path
    assert [e["seq"] for e in sd_json(sd_env, "log", RUN, "--path", "lib/parser.py")["entries"]
            ] == [PARSER_DELETED, PARSE_REMOVED, PARSE_HELPER, PARSE_ADDED]

    # log's text form: newest first, each with its tool call and diffstat.
    text = sd(sd_env, "log", RUN, "-n", "2", process=True).stdout
    assert text.index(f"seq {COMMITS - 1} ") < text.index(f"seq {COMMITS - 2} ")
    assert " changed, " in text and f"seq {COMMITS - 3} " not in text
    assert "-def parse(text):" in sd(sd_env, "log", RUN, "-S", "def parse", "--patch").stdout

    # --since: a duration, an ISO time after everything, and something that is neither.
    assert len(sd_json(sd_env, "log", RUN, "--since", "1h")["entries"]) == COMMITS
    assert sd_json(sd_env, "log", RUN, "--since", "2999-01-01T00:00:00")["entries"] == []
    bad = sd(sd_env, "log", RUN, "--since", "yesterday-ish", ok=False)
    assert bad.returncode == 1 and "bad-request" in bad.stderr

    # find: the checkpoints that changed lib/parser.py, with A/M/D, newest first.
    where = sd_json(sd_env, "find", "lib/parser.py", "--cwd", str(wt))
    assert where["worktree"] == str(wt.resolve()) and where["relative"] == "lib/parser.py"
    assert [(c["seq"], c["status"]) for c in where["checkpoints"]] == [
        (PARSER_DELETED, "D"), (PARSE_REMOVED, "M"), (PARSE_HELPER, "M"), (PARSE_ADDED, "A")]
    assert where["runs"] == [RUN]

    # A second run in the same worktree brings the file back: find names both runs.
    (wt / "lib" / "parser.py").write_text("def parse(text):\n    return [text]\n")
    with daemon.client() as client:
        client.snapshot(wt, run_id="second", node_id=NODE, tier=1, source="hook",
                        label="bring parser back", tool_use_id="toolu_back")
    both = sd_json(sd_env, "find", str(wt / "lib" / "parser.py"), "--since", "1h")
    assert both["runs"] == ["second", RUN]
    assert (both["checkpoints"][0]["run_id"], both["checkpoints"][0]["status"]) == ("second", "A")
    whole_dir = sd_json(sd_env, "find", "lib", "--cwd", str(wt))
    assert len(whole_dir["checkpoints"]) > len(both["checkpoints"])
    text = sd(sd_env, "find", "lib/parser.py", "--cwd", str(wt)).stdout
    assert "A  second/agent/0/1 seq 0  bring parser back  [toolu_back]" in text
    outside = sd(sd_env, "find", str(tmp_path / "elsewhere.txt"), ok=False)
    assert outside.returncode == 1 and "not-found" in outside.stderr


def test_json_shapes_gaps_and_errors(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    src = tmp_path / "src"
    commits = build_source(src)[:6]
    wt = make_git_worktree(tmp_path / "wt")
    replay(daemon, src, commits[:4], wt)
    # A capture the hook could not deliver between seq 3 and seq 4: a gap in the spool.
    time.sleep(0.05)
    append_gap(make_gap(run_id=RUN, node_id=NODE, iteration=0, attempt=1, worktree=str(wt),
                        tier=1, source="hook", tool_use_id="toolu_lost",
                        reason="daemon-unavailable", detail="no daemon answered"), sd_env.gaps)
    time.sleep(0.05)
    checkout_from_git(src, commits[4], wt)
    with daemon.client() as client:
        client.snapshot(wt, run_id=RUN, node_id=NODE, tier=1, source="hook", label="step 4",
                        tool_use_id="toolu_004")

    shown = sd_json(sd_env, "show", RUN, "--node", NODE, "--seq", "4")
    assert set(shown) >= {"run_id", "node_id", "iteration", "attempt", "seq", "checkpoint",
                          "from", "to", "base", "gaps", "files", "stats", "stat", "patch"}
    call_row = shown["checkpoint"]
    assert (call_row["label"], call_row["tool_use_id"], call_row["tier"], call_row["source"]) == (
        "step 4", "toolu_004", 1, "hook")
    assert call_row["time"].endswith("+00:00") and call_row["created_at"] > 0
    assert shown["from"]["seq"] == 3 and shown["to"]["seq"] == 4 and shown["base"] == "parent"
    assert [g["tool_use_id"] for g in shown["gaps"]["before"]] == ["toolu_lost"]
    assert shown["gaps"]["before"][0]["resolved"] is False and shown["gaps"]["after"] == []
    assert shown["patch"].startswith("diff --git")
    for f in shown["files"]:
        assert set(f) == {"status", "path", "old_path", "additions", "deletions", "binary"}
    earlier = sd_json(sd_env, "show", RUN, "--node", NODE, "--seq", "3")
    assert [g["tool_use_id"] for g in earlier["gaps"]["after"]] == ["toolu_lost"]
    assert "gap before" in sd(sd_env, "show", RUN, "--node", NODE, "--seq", "4").stdout
    first = sd_json(sd_env, "show", RUN, "--node", NODE, "--seq", "0")
    assert first["base"] == "empty-tree" and first["from"]["commit"] is None
    newest = sd_json(sd_env, "show", RUN, "--node", NODE)
    assert newest["seq"] == 4

    logged = sd_json(sd_env, "log", RUN)
    assert set(logged) >= {"run_id", "filters", "entries", "total", "pruned_skipped"}
    assert [e["seq"] for e in logged["entries"]] == [4, 3, 2, 1, 0]
    assert set(logged["entries"][0]) >= {"seq", "label", "tool_use_id", "tier", "source", "time",
                                         "files", "stats", "stat", "patch"}
    assert logged["entries"][0]["patch"] is None  # --stat unless --patch

    missing = sd(sd_env, "show", RUN, "--node", NODE, "--seq", "99", ok=False, process=True)
    assert missing.returncode == 1 and "not-found" in missing.stderr and "0-4" in missing.stderr
    bad_id = sd(sd_env, "show", "bad/run", "--node", NODE, ok=False)
    assert bad_id.returncode == 1 and "bad-id" in bad_id.stderr
    unknown = sd(sd_env, "log", "no-such-run", ok=False)
    assert "not-found" in unknown.stderr and RUN in unknown.stderr
    escape = sd(sd_env, "log", RUN, "--path", "../etc", ok=False)
    assert "bad-request" in escape.stderr

    # Read-only: all of it works with the daemon stopped.
    daemon.stop()
    assert sd_json(sd_env, "show", RUN, "--node", NODE, "--seq", "4")["files"] == shown["files"]
    assert [e["seq"] for e in sd_json(sd_env, "log", RUN)["entries"]] == [4, 3, 2, 1, 0]


def test_mcp_twins_return_what_the_cli_does(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    src = tmp_path / "src"
    commits = build_source(src)[:PARSE_REMOVED + 1]
    wt = make_git_worktree(tmp_path / "wt")
    replay(daemon, src, commits, wt)
    cli_show = sd_json(sd_env, "show", RUN, "--node", NODE, "--seq", str(PARSE_ADDED),
                       process=True)
    cli_log = sd_json(sd_env, "log", RUN, "-S", "def parse")
    cli_find = sd_json(sd_env, "find", "lib/parser.py", "--cwd", str(wt))

    def same(a: dict, b: dict) -> None:
        drop = {"elapsed_ms", "patch_truncated"}
        assert {k: v for k, v in a.items() if k not in drop} == {
            k: v for k, v in b.items() if k not in drop}

    async def body(client) -> None:  # noqa: ANN001 - the SDK's client
        shown = await call(client, "show_checkpoint", run_id=RUN, node_id=NODE,
                           seq=PARSE_ADDED)
        same(shown, cli_show)
        logged = await call(client, "log_checkpoints", run_id=RUN, pickaxe="def parse")
        assert [e["seq"] for e in logged["entries"]] == [e["seq"] for e in cli_log["entries"]]
        assert [e["seq"] for e in logged["entries"]] == [PARSE_REMOVED, PARSE_ADDED]
        for mine, theirs in zip(logged["entries"], cli_log["entries"], strict=True):
            same(mine, theirs)
        by_path = await call(client, "log_checkpoints", run_id=RUN, path="lib/parser.py",
                             limit=2)
        assert [e["seq"] for e in by_path["entries"]] == [PARSE_REMOVED, PARSE_HELPER]
        found = await call(client, "find_path", path="lib/parser.py", cwd=str(wt))
        same(found, cli_find)
        absolute = await call(client, "find_path", path=str(wt / "lib" / "parser.py"))
        assert absolute["checkpoints"] == cli_find["checkpoints"]
        missing = await call_error(client, "show_checkpoint", run_id=RUN, node_id=NODE, seq=999)
        assert "not-found: " in missing and "0-20" in missing
        bad = await call_error(client, "show_checkpoint", run_id=RUN, node_id="../up", seq=0)
        assert "bad-id: " in bad
        relative = await call_error(client, "find_path", path="lib", cwd="relative/dir")
        assert "bad-request: " in relative

    with_mcp(sd_env, body)
    shutil.rmtree(wt / "lib")  # a path that no longer exists is still found by name
    gone = sd_json(sd_env, "find", "lib/parser.py", "--cwd", str(wt))
    assert gone["checkpoints"] == cli_find["checkpoints"]
