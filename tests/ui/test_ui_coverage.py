"""Coverage on the web app's pages (issue 43), in a real headless browser (the distribution's
Chromium driven by Playwright) against ``snapshotd ui`` beside a real daemon: the run page says
each attempt's coverage in one line, the runs page has a coverage column, both as
``snapshots --json`` and ``runs --json`` give them.

Skips, saying why, when Playwright for Python or a system Chromium is missing."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshotd.ui.screenshots import chromium_path
from tests.conftest import Daemon, Env
from tests.support.ui_server import UiServer

sync_api = pytest.importorskip("playwright.sync_api",
                               reason="Playwright for Python is not installed")
pytest.importorskip("starlette")
CHROMIUM = chromium_path()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no system Chromium (apt-get install "
                       "chromium, or set SNAPSHOTD_CHROMIUM): browser tests skipped"),
    pytest.mark.one_ledger("the pages in a browser (the figures: tests/service/test_coverage.py)"),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as pw:
        chrome = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield chrome
        chrome.close()


def listing(env: Env, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "snapshotd", *args, "--json"],
                         env=env.environ(), capture_output=True, check=True)
    return json.loads(out.stdout)


def test_the_run_page_and_the_runs_page_show_coverage(browser, sd_env: Env, daemon: Daemon,
                                                      tmp_path: Path) -> None:
    from snapshotd.service.gaps import GapSpool

    wt = tmp_path / "wt"
    wt.mkdir()
    with daemon.client() as c:
        for i in range(2):
            (wt / "f.py").write_text(f"step {i}\n")
            c.snapshot(str(wt), run_id="r", node_id="n", label=f"Edit f.py #{i}",
                       tool_use_id=f"toolu_{i}", source="hook")
    GapSpool(sd_env.gaps).record(reason="timeout", detail="no answer in 2000 ms", run_id="r",
                                 node_id="n", attempt=1, tool_use_id="toolu_9")
    [expected] = listing(sd_env, "snapshots", "r")["coverage"]
    assert expected["summary"].startswith("coverage: 2/3 tool calls captured (67 %) · 1 gap: ")
    server = UiServer.start(sd_env)
    try:
        page = browser.new_page()
        page.goto(server.login_url())
        page.wait_for_selector("table.runs")
        cell = page.inner_text("tr[data-run='r'] td.coverage")
        assert cell == "2/3 (67 %), 1 gap"
        assert "incomplete" in (page.get_attribute("tr[data-run='r'] td.coverage", "class") or "")
        page.goto(server.base + "#/run/r")
        page.wait_for_selector("ul.coverage li")
        assert page.locator("ul.coverage li").all_inner_texts() == [
            "n · it 0 · #1: " + expected["summary"]]
        page.close()
    finally:
        server.stop()
