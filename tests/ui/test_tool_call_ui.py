"""The web app names every tool call as text (issue 43): the run page lists each tool call by
label and id (a long Bash call whose writes are tier-2 checkpoints, a failing one), not only in
an SVG tooltip; a checkpoint's page names the tool call that owns it. In a real headless
Chromium (the harness of test_ui_browser.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshotd.ui.screenshots import chromium_path
from tests.conftest import Daemon, Env, make_git_worktree
from tests.support.tool_call_session import RUN, T1, T2, T2_COMMAND, T3, T3_COMMAND, run_session
from tests.support.ui_server import UiServer

sync_api = pytest.importorskip("playwright.sync_api",
                               reason="Playwright for Python is not installed")
pytest.importorskip("starlette")
CHROMIUM = chromium_path()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no system Chromium (apt-get install "
                       "chromium, or set SNAPSHOTD_CHROMIUM): browser tests skipped"),
    pytest.mark.one_ledger("the pages in a browser; the read model on both backends: "
                           "tests/service/test_tool_call_model.py"),
]


@pytest.fixture
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chrome
        chrome.close()


def test_run_page_lists_each_tool_call_by_label_and_id(browser, sd_env: Env, daemon: Daemon,
                                                      tmp_path: Path) -> None:
    run_session(sd_env, daemon, make_git_worktree(tmp_path / "proj"))
    server = UiServer.start(sd_env)
    try:
        page = browser.new_page()
        page.goto(server.login_url())
        page.goto(server.base + f"#/run/{RUN}")
        page.wait_for_selector("#toolcalls tr.toolcall")
        # Found by its label, as text on the page.
        row = page.locator("#toolcalls tr.toolcall", has_text=f"Bash {T2_COMMAND}")
        assert row.count() == 1
        assert T2 in row.inner_text() and "seq 1, seq 2 (in flight)" in row.inner_text()
        assert "= seq 2" in row.inner_text()
        failing = page.locator("#toolcalls tr.toolcall", has_text=f"Bash {T3_COMMAND}")
        assert T3 in failing.inner_text() and "FAILED (exit 3)" in failing.inner_text()
        assert page.locator("#toolcalls code.call-id").all_inner_texts() == [T1, T2, T3]
        page.click(f"#toolcalls tr.toolcall:has-text('{T2}') a:has-text('seq 1')")
        page.wait_for_selector("#toolcall code")
        named = page.inner_text("#toolcall")
        assert f"Bash {T2_COMMAND}" in named and T2 in named and "(in flight)" in named
        page.close()
    finally:
        server.stop()
