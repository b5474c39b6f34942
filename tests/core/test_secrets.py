"""Secret values never leave in clear: labels, commit messages, ledger rows, gaps, logs, status,
MCP replies and exports.

Every token here is made up (right shape, random-looking, never issued). A checkpoint is taken
through the real hook (a Bash call exporting a key) and through the client with a label holding
one token of each kind; each surface is then read with its own reader: the ledger with the
backend's driver, the store with the git CLI, the spool file, the daemon's log, ``snapshotd
status --json``, the MCP operations, and a branch exported into the user's repository.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from snapshotd.core.config import RedactingFilter, redact_text
from snapshotd.core.secrets import redact_secrets
from snapshotd.service.gaps import GapSpool
from snapshotd_client.gaps import append_gap, make_gap
from tests.conftest import Daemon, Env, git, make_git_worktree, run_hook

# kind -> a made-up token of that kind, as it would appear in a command line or a message.
TOKENS = {
    "openai": "sk-proj-Qm3xT8vR2kLp9Wz4Yb7Nc1Hd6Fg0Js5A",
    "anthropic": "sk-ant-api03-Vb8Nm2Qx7Lk4Jh9Gf3Ds6Pa1Zw5Ty0Ru",
    "aws": "AKIAZ7QX3MB2RT9KLP4W",
    "github": "ghp_R4nd0mT0k3nV4lu3Xy7Qw2Er9Ty5Ui8Op1As",
    "gitlab": "glpat-Xk7Qm2Vr9Lp4Wz8Yb3Nc",
    "slack": "xoxb-2938475610-Qw8Er4Ty7Ui1",
    "stripe": "sk_live_51Hx8Qm2Vr9Lp4Wz8Yb3Nc7Kd",
    "google": "AIzaSyQ8m2Vr9Lp4Wz8Yb3Nc7Kd1Fg6Hj0Ts5A",
    "bearer": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiI4MjEifQ.Qm3xT8vR2kLp9",
    "url-password": "Pw9xQ2mV7rLk",
    "assignment": "Zx9Yw8Vu7Ts6Rq5Po4Nm3",
    "private-key": "MIIEowIBAAKCAQEAx8Qm2Vr9Lp4Wz8Yb3Nc7Kd1Fg6Hj0",
}
IN_CONTEXT = {
    "openai": f"export OPENAI_API_KEY={TOKENS['openai']}",
    "anthropic": f"ANTHROPIC_API_KEY={TOKENS['anthropic']}",
    "aws": f"aws configure set aws_access_key_id {TOKENS['aws']}",
    "github": f"git push https://{TOKENS['github']}@github.com/o/r",
    "gitlab": f"glab auth login --token {TOKENS['gitlab']}",
    "slack": f"curl -d token={TOKENS['slack']} slack.com/api",
    "stripe": f"stripe --api-key {TOKENS['stripe']}",
    "google": f"gcloud --key={TOKENS['google']}",
    "bearer": f"curl -H 'Authorization: Bearer {TOKENS['bearer']}' api.example",
    "url-password": f"psql postgresql://app:{TOKENS['url-password']}@db/prod",
    "assignment": f"DEPLOY_SECRET={TOKENS['assignment']} make deploy",
    "private-key": "-----BEGIN RSA PRIVATE KEY-----\n" + TOKENS["private-key"]
                   + "\n-----END RSA PRIVATE KEY-----",
}
RUN, NODE = "sec-run", "sec-node"


def assert_clean(text: str, where: str) -> None:
    for kind, token in TOKENS.items():
        assert token not in text, f"{where} shows the {kind} token in clear:\n{text[:2000]}"


@pytest.mark.parametrize("kind", sorted(IN_CONTEXT))
def test_each_kind_is_redacted_with_its_kind_kept(kind: str) -> None:
    out = redact_secrets(IN_CONTEXT[kind])
    assert TOKENS[kind] not in out
    assert f"[redacted:{kind}]" in out, out
    assert redact_secrets(out) == out  # idempotent
    assert redact_text(out) == redact_text(redact_text(out))


def test_the_marker_keeps_the_well_known_prefix() -> None:
    assert redact_secrets(f"k={TOKENS['openai']}") == "k=sk-…[redacted:openai]"
    assert redact_secrets(TOKENS["github"]) == "ghp_…[redacted:github]"


@pytest.mark.parametrize("text", [
    "Edit /home/me/project/src/main.py",
    "Bash pytest -q tests/test_tokens.py -k 'token and key'",
    "SECRET_KEY=changeme PASSWORD=${DB_PASSWORD} API_KEY=your-key-here",
    "git commit -m 'rotate the sk-… key'",
    "monkey=Zx9Yw8Vu7Ts6Rq5Po4Nm3",
])
def test_ordinary_text_is_left_alone(text: str) -> None:
    assert redact_secrets(text) == text


def test_the_log_filter_redacts_tokens() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger("snapshotd.test-secrets")
    logger.addHandler(handler)
    try:
        logger.warning("push failed: %s", IN_CONTEXT["github"])
        try:
            raise RuntimeError(IN_CONTEXT["openai"])
        except RuntimeError:
            logger.exception("capture failed")
    finally:
        logger.removeHandler(handler)
    assert_clean(stream.getvalue(), "a log line")
    assert "[redacted:openai]" in stream.getvalue()


def test_gap_details_are_redacted_in_the_spool_and_when_read(tmp_path: Path) -> None:
    spool = GapSpool(tmp_path / "gaps.ndjson")
    spool.record(reason="capture-failed", detail="git said: " + IN_CONTEXT["gitlab"],
                 run_id=RUN, node_id=NODE)
    # A gap the hook wrote (it has no secret rules of its own) is redacted when read.
    append_gap(make_gap(run_id=RUN, node_id=NODE, iteration=0, attempt=1, worktree="/w",
                        tier=1, source="hook", tool_use_id=None, reason="no-daemon",
                        detail="env: " + IN_CONTEXT["stripe"]), tmp_path / "gaps.ndjson")
    assert_clean((tmp_path / "gaps.ndjson").read_text().split("\n")[0], "the daemon's gap")
    shown = spool.for_run(RUN)
    assert len(shown) == 2
    assert_clean(json.dumps(shown + spool.all()), "gaps as listed")


def cli(env: Env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120)


def bash_payload(wt: Path, tool_use_id: str, command: str) -> dict:
    return {"session_id": "sess-sec", "cwd": str(wt), "tool_use_id": tool_use_id,
            "hook_event_name": "PostToolUse", "tool_name": "Bash",
            "tool_input": {"command": command}, "tool_response": {"stdout": ""}}


def test_no_token_leaves_in_clear_through_any_surface(sd_env: Env, daemon: Daemon,
                                                      tmp_path: Path) -> None:
    from snapshotd.ops.operations import Operations

    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("one\n")
    git(wt, "add", "a.txt")
    git(wt, "commit", "-qm", "base")
    (wt / "k.txt").write_text("hi\n")
    hook = run_hook(sd_env, bash_payload(
        wt, "toolu_sec1", f"export OPENAI_API_KEY={TOKENS['openai']}; echo hi > k.txt"))
    assert hook.returncode == 0, hook.stderr
    labels = [" ; ".join(IN_CONTEXT[k] for k in sorted(IN_CONTEXT)[i::3]) for i in range(3)]
    with daemon.client() as c:
        for i, label in enumerate(labels):
            (wt / "a.txt").write_text(f"change {i}\n")
            c.snapshot(str(wt), run_id=RUN, node_id=NODE, label=label, tool_use_id=f"t{i}")
        listing = c.list(RUN)
        status = c.status()
    assert_clean(json.dumps(listing) + json.dumps(status), "the list and status replies")
    assert "[redacted:openai]" in json.dumps(listing) + json.dumps(cli_listing(sd_env))

    rows = sd_env.ledger_query("SELECT * FROM checkpoints")
    assert len(rows) == 4
    assert_clean(json.dumps(rows, default=str), "the ledger")
    store = git(sd_env.home / "store.git", "log", "--all", "--format=%B")
    assert_clean(store, "the store's commit messages")
    assert "Snapshotd-Label: Bash export OPENAI_API_KEY=sk-…[redacted:openai]" in store

    raw = cli(sd_env, "status", "--json")
    assert raw.returncode == 0, raw.stderr
    assert_clean(raw.stdout + raw.stderr, "snapshotd status --json")

    ops = Operations(home=sd_env.home, socket=sd_env.socket)
    mcp = [ops.list_checkpoints(run_id=RUN), ops.list_checkpoints(run_id="claude-sess-sec"),
           ops.list_gaps(), ops.status(),
           ops.blame_file(run_id=RUN, node_id=NODE, path="a.txt")]
    assert_clean(json.dumps(mcp, default=str), "the MCP replies")
    ops.export_checkpoints(run_id=RUN, node_id=NODE, branch="exported")
    assert_clean(git(wt, "log", "exported", "--format=%B"), "the exported branch")
    daemon.stop()
    assert_clean(daemon.log.read_text(errors="replace"), "the daemon's log")


def cli_listing(env: Env) -> dict:
    out = cli(env, "snapshots", "claude-sess-sec", "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_a_file_that_cannot_be_scanned_is_logged(tmp_path: Path,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    from snapshotd.core.secrets import scan_file

    with caplog.at_level(logging.WARNING, logger="snapshotd.secrets"):
        assert scan_file(tmp_path / "gone.txt") == []
    assert "could not scan" in caplog.text
