"""Every kind of token, through the surfaces tests/core/test_secrets.py reaches with only some kinds.

tests/core/test_secrets.py sends labels holding every kind through the ledger, the store's commit
messages, ``status --json``, the listing MCP replies and an exported branch. Here, every kind
(the same made-up tokens) also goes through: a log line and a logged traceback (the daemon's
log filter), both writers of the gap spool (the daemon's, and the hook's, read back by the
daemon), the content scan of captured files (each kind found, at its path and line, with only
path, line and kind recorded), the review MCP replies (``show_checkpoint``,
``log_checkpoints``, ``find_path``, ``diff_checkpoint``) and ``snapshotd show``.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest

from snapshotd.core.config import RedactingFilter
from snapshotd.service.gaps import GapSpool
from snapshotd_client.gaps import append_gap, make_gap
from tests.conftest import Daemon, Env
from tests.core.test_secrets import IN_CONTEXT, TOKENS, assert_clean

pytestmark = pytest.mark.one_ledger("tokens redacted before anything is written or shown")

RUN, NODE = "surf-run", "surf-node"
KINDS = sorted(IN_CONTEXT)


@pytest.mark.parametrize("kind", KINDS)
def test_a_log_line_and_a_traceback_hide_each_kind(kind: str) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(RedactingFilter())
    logger = logging.getLogger(f"snapshotd.test-surfaces.{kind}")
    logger.addHandler(handler)
    try:
        logger.warning("a git error: %s", IN_CONTEXT[kind])
        try:
            raise RuntimeError(IN_CONTEXT[kind])
        except RuntimeError:
            logger.exception("capture failed")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert TOKENS[kind] not in text, text
    # The kind's marker, or ``***`` where the token was a URL's user part.
    assert text.count("[redacted:") + text.count("***@") >= 2, text


@pytest.mark.parametrize("kind", KINDS)
def test_both_gap_writers_hide_each_kind(kind: str, tmp_path: Path) -> None:
    spool_path = tmp_path / "gaps.ndjson"
    spool = GapSpool(spool_path)
    spool.record(reason="capture-failed", detail="git said: " + IN_CONTEXT[kind],
                 run_id=RUN, node_id=NODE)
    append_gap(make_gap(run_id=RUN, node_id=NODE, iteration=0, attempt=1, worktree="/w",
                        tier=1, source="hook", tool_use_id=None, reason="no-daemon",
                        detail="env: " + IN_CONTEXT[kind]), spool_path)
    # The daemon's own line is written redacted; the hook's (no rules of its own) is
    # redacted whenever it is read.
    assert TOKENS[kind] not in spool_path.read_text().split("\n")[0]
    shown = json.dumps(spool.for_run(RUN) + spool.all())
    assert TOKENS[kind] not in shown
    assert "[redacted:" in shown or "***@" in shown


def test_captured_files_are_scanned_for_each_kind_and_review_replies_stay_clean(
        sd_env: Env, daemon: Daemon, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from snapshotd.ops.operations import Operations

    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "a.txt").write_text("zero\n")
    for kind in KINDS:
        (wt / f"k_{kind}.txt").write_text(f"# line one\n{IN_CONTEXT[kind]}\n")
    label = " ; ".join(IN_CONTEXT[k].split("\n")[0] for k in KINDS if k != "private-key")
    with daemon.client() as c:
        first = c.snapshot(str(wt), run_id=RUN, node_id=NODE, label=label, tool_use_id="s0")
        (wt / "a.txt").write_text("one\n")
        c.snapshot(str(wt), run_id=RUN, node_id=NODE, label=label, tool_use_id="s1")
    found = {(f["path"], f["line"], f["kind"]) for f in first["secrets"]}
    assert {(f"k_{kind}.txt", 2, kind) for kind in KINDS} <= found, first["secrets"]
    assert all(set(f) == {"path", "line", "kind"} for f in first["secrets"])
    rows = sd_env.ledger_query("SELECT label, secrets FROM checkpoints")
    assert_clean(json.dumps(rows), "the ledger rows of a scanned capture")

    # Review replies about the second checkpoint (its change holds no token; its label held
    # every kind) show the label only redacted.
    for key, value in sd_env.vars.items():  # the ops read the ledger's address as a user's
        monkeypatch.setenv(key, value)        # MCP server would: from its environment
    ops = Operations(home=sd_env.home, socket=sd_env.socket)
    replies = [ops.show_checkpoint(run_id=RUN, node_id=NODE, seq=1),
               ops.log_checkpoints(run_id=RUN, node_id=NODE, path="a.txt", patch=True),
               ops.find_path(path=str(wt / "a.txt")),
               ops.diff_checkpoint(run_id=RUN, node_id=NODE, seq=0, to_seq=1, patch=False)]
    text = json.dumps(replies, default=str)
    assert_clean(text, "the review MCP replies")
    assert "[redacted:openai]" in text
    shown = subprocess.run([sys.executable, "-m", "snapshotd", "show", RUN, "--node", NODE,
                            "--seq", "0", "--stat"], env=sd_env.environ(),
                           capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert_clean(shown.stdout, "snapshotd show --stat")
    for kind in KINDS:
        assert f"SECRET     k_{kind}.txt:2 {kind}" in shown.stdout
    daemon.stop()
    assert_clean(daemon.log.read_text(errors="replace"), "the daemon's log")
