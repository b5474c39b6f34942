"""The web app in a real headless browser: the distribution's Chromium driven by Playwright,
against ``snapshotd ui`` as a subprocess beside a real daemon. One browser per module.

Skips, saying why, when Playwright for Python or a system Chromium is missing (``.ci/run``
installs Debian's ``chromium`` when it can; Playwright's own browser download is never used).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshotd.ui.screenshots import chromium_path
from tests.conftest import Daemon, Env
from tests.support.helpers import wait_for
from tests.support.ui_server import UiServer

sync_api = pytest.importorskip("playwright.sync_api",
                               reason="Playwright for Python is not installed")
pytest.importorskip("starlette")
CHROMIUM = chromium_path()
pytestmark = [
    pytest.mark.skipif(CHROMIUM is None, reason="no system Chromium (apt-get install "
                       "chromium, or set SNAPSHOTD_CHROMIUM): browser tests skipped"),
    pytest.mark.one_ledger("the pages in a browser (test_ui.py runs on each backend)"),
]
REBOUND = "rebound.test"


@pytest.fixture(autouse=True)
def _sqlite_only(ledger_backend: str) -> None:
    # The pages read the ledger through the same calls on either backend (test_ui.py runs on
    # both); one browser pass keeps the suite's time down.
    if ledger_backend != "sqlite":
        pytest.skip("browser tests run on the sqlite ledger; test_ui.py covers postgres")


@pytest.fixture(scope="module")
def browser() -> Iterator[object]:
    with sync_api.sync_playwright() as pw:
        # REBOUND resolves to 127.0.0.1 in this browser: a DNS rebinding attack, simulated.
        chrome = pw.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", f"--host-resolver-rules=MAP {REBOUND} 127.0.0.1"])
        yield chrome
        chrome.close()


@pytest.fixture
def wt(tmp_path: Path) -> Path:
    path = tmp_path / "wt"
    path.mkdir()
    return path


@pytest.fixture
def ui(sd_env: Env, daemon: Daemon, wt: Path) -> Iterator[UiServer]:
    with daemon.client() as c:
        for i, text in enumerate(("one\n", "one\ntwo\n", "one\ntwo\nthree\n")):
            (wt / "f.py").write_text(f"# step {i}\n" + text)
            c.snapshot(str(wt), run_id="r", node_id="n", label=f"Edit f.py #{i}",
                       tool_use_id=f"toolu_{i}")
    server = UiServer.start(sd_env)
    yield server
    server.stop()


def test_follow_a_run_diff_two_checkpoints_and_restore(browser, ui: UiServer, wt: Path,
                                                       tmp_path: Path, daemon: Daemon) -> None:
    page = browser.new_page()
    page.goto(ui.login_url())
    page.click("a.run-link")
    page.wait_for_selector("svg.timeline rect.mark")
    page.click("rect.mark[data-seq='2']")
    page.wait_for_selector("#diff h3")
    assert "Edit f.py #2" in page.inner_text("#toolcall")
    added = lambda: page.locator("#diff td.add").all_inner_texts()  # noqa: E731
    assert added() == ["# step 2", "three"]
    # Pick seq 0 on the timeline: the diff is now between the two.
    page.click("rect.mark[data-seq='0']")
    page.wait_for_selector("#diff-title:has-text('seq 0')")
    assert added() == ["# step 2", "two", "three"]
    page.click("text=split")
    page.wait_for_selector(".diff.split td.add")

    target = tmp_path / "restored"
    page.fill("#restore-to", str(target))
    page.click("#restore-preview")
    page.wait_for_selector("#restore-confirm")
    assert "f.py" in page.inner_text("#result") and not target.exists()
    page.click("#restore-confirm")
    page.wait_for_selector("#restore-done")
    assert (target / "f.py").read_text() == "# step 2\none\ntwo\nthree\n"
    assert page.inner_text("#undo")

    # In place, over an active attempt: refused until the box is ticked.
    (wt / "f.py").write_text("scribbled\n")
    page.fill("#restore-to", "")
    page.click("#restore-preview")
    page.click("#restore-confirm")
    page.wait_for_selector("#result .error")
    assert "active" in page.inner_text("#result")
    assert (wt / "f.py").read_text() == "scribbled\n"
    page.check("#restore-force")
    page.click("#restore-preview")
    page.click("#restore-confirm")
    page.wait_for_selector("#restore-done")
    assert (wt / "f.py").read_text() == "# step 2\none\ntwo\nthree\n"
    assert "snapshotd restore r" in page.inner_text("#undo")
    # The safety checkpoint shows up on the run's timeline by itself (live updates).
    page.goto(ui.base + "#/run/r")
    page.wait_for_selector("svg.timeline polygon.mark.safety", timeout=10_000)
    before = page.locator("svg.timeline .mark").count()
    with daemon.client() as c:
        (wt / "g.py").write_text("new\n")
        c.snapshot(str(wt), run_id="r", node_id="n", label="Write g.py")
    count = lambda: page.locator("svg.timeline .mark").count()  # noqa: E731
    wait_for(lambda: count() == before + 1, timeout=15, what="the new checkpoint on the live timeline")
    page.close()


def test_refused_without_sign_in_or_with_a_foreign_host(browser, ui: UiServer) -> None:
    context = browser.new_context()
    page = context.new_page()
    response = page.goto(ui.base)
    assert response.status == 403 and "sign in" in page.inner_text("body")
    # A good code, but through a name that resolves to 127.0.0.1 (DNS rebinding).
    response = page.goto(ui.login_url().replace("127.0.0.1", REBOUND))
    assert response.status == 403 and "Host" in page.inner_text("body")
    url = ui.login_url("/#/run/r")
    response = page.goto(url)
    assert response.status == 200 and page.url == ui.base + "#/run/r"
    page.wait_for_selector("svg.timeline rect.mark")
    # The same code again (another user who read it from ps) is refused, and the session it
    # opened is closed.
    other = browser.new_context()
    response = other.new_page().goto(url)
    assert response.status == 403 and "already used" in response.text()
    other.close()
    assert page.goto(ui.base).status == 403
    context.close()


FIRST_PAINT_HANG_S = 10.0


def test_first_paint_of_a_long_run(browser, sd_env: Env, wt: Path) -> None:
    from snapshotd.core.config import load_config
    from snapshotd.service.service import Service

    service = Service(sd_env.home, load_config(environ=sd_env.environ()))
    try:
        for i in range(1000):
            (wt / "f.txt").write_text(str(i))
            service.snapshot({"cwd": str(wt), "run_id": "long", "node_id": "n",
                              "label": f"step {i}"})
    finally:
        service.close()
    server = UiServer.start(sd_env)
    try:
        page = browser.new_page()
        page.goto(server.login_url())
        page.wait_for_selector("table.runs")
        started = time.perf_counter()
        page.goto(server.base + "#/run/long")
        page.locator("svg.timeline .mark").nth(999).wait_for()
        elapsed = time.perf_counter() - started
        assert page.locator("svg.timeline .mark").count() == 1000
        print(f"first paint of 1000 checkpoints: {elapsed:.2f} s")
        # A bound on a hang, not the 1-s budget: a loaded 2-core machine took 1.04 s once, and
        # no performance figure is asserted in a test.
        assert elapsed < FIRST_PAINT_HANG_S, f"first paint of 1000 checkpoints took {elapsed:.2f} s"
        page.close()
    finally:
        server.stop()


def test_gaps_tree_and_blame(browser, ui: UiServer, sd_env: Env) -> None:
    from snapshotd.service.gaps import GapSpool

    GapSpool(sd_env.gaps).record(reason="timeout", detail="no answer in 2000 ms", run_id="r",
                                 node_id="n", tool_use_id="toolu_9")
    page = browser.new_page()
    page.goto(ui.login_url())
    page.goto(ui.base + "#/gaps/r")
    page.wait_for_selector("table.gaps td code")
    row = page.inner_text("table.gaps")
    assert "timeout" in row and "SNAPSHOTD_HOOK_TIMEOUT_MS" in row and "no answer" in row
    page.goto(ui.base + "#/run/r")
    page.wait_for_selector("svg.timeline circle.gap")
    page.goto(ui.base + "#/tree/r/n/0/1/1/")
    page.click("text=f.py")
    page.wait_for_selector("a:has-text('blame')")
    assert "two" in page.inner_text("table.patch")
    page.click("a:has-text('blame')")
    page.wait_for_selector("table.blame td.who a")
    assert page.locator("table.blame td.who").all_inner_texts() == ["seq 1", "seq 0", "seq 1"]
    page.close()


def test_a_restore_whose_checkpoints_deduplicate_shows_on_the_run_page(
        browser, ui: UiServer, sd_env: Env, wt: Path, daemon: Daemon) -> None:
    """Issue 43: the watcher already holds the state, so the restore's safety checkpoint and the
    restored state both deduplicate onto it; the run page still names the restore."""
    import subprocess
    import sys

    with daemon.client() as c:
        (wt / "f.py").write_text("by hand\n")
        c.flush(str(wt))  # seq 3, tier 2, no label
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "restore", "r", "--node", "n",
                           "--seq", "3", "--force"], env=sd_env.environ(), capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    page = browser.new_page()
    page.goto(ui.login_url())
    page.goto(ui.base + "#/run/r")
    page.wait_for_selector("#events li")
    assert page.locator("svg.timeline .mark").count() == 4  # nothing new was numbered
    [item] = page.locator("#events li").all_inner_texts()
    assert item.startswith("seq 3 restore to seq 3 (safety checkpoint seq 3) restore-"), item
    page.close()


def test_undo_this_tool_call_in_the_browser(browser, ui: UiServer, wt: Path) -> None:
    page = browser.new_page()
    page.goto(ui.login_url())
    page.click("a.run-link")
    page.wait_for_selector("svg.timeline rect.mark")
    page.click("rect.mark[data-seq='2']")
    page.wait_for_selector("#revert-call-preview")
    page.check("#restore-force")  # the attempt is still active
    page.click("#revert-call-preview")
    page.wait_for_selector("#revert-confirm")
    assert "f.py" in page.inner_text("#result") and "reverted" in page.inner_text("#result")
    assert (wt / "f.py").read_text() == "# step 2\none\ntwo\nthree\n"
    page.click("#revert-confirm")
    page.wait_for_selector("#revert-done")
    assert (wt / "f.py").read_text() == "# step 1\none\ntwo\n"
    assert "snapshotd restore r" in page.inner_text("#undo")
    page.close()
