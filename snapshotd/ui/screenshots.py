"""Renders the pictures of docs/ui.md: ``python -m snapshotd.ui.screenshots [OUT_DIR]``.

Owns ``chromium_path`` (the system's Chromium, which the browser tests use too), ``make_demo``
(a throwaway home with one agent run: a few tool calls, a watcher checkpoint, a restore safety
point and a gap) and ``main``, which serves the web app on that home and photographs the runs
page, a timeline and a diff with Playwright into ``OUT_DIR`` (default ``docs/``).

Promises: it touches nothing but a temporary directory and ``OUT_DIR``; it needs Playwright for
Python and a Chromium from the distribution (``apt-get install chromium``), and says so when
either is missing. Playwright's own browser download is never used.
"""

from __future__ import annotations

import os
import secrets
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
DEMO_RUN = "claude-7f3a9c"
# (file, page, what shows it is drawn)
SHOTS = (("ui-runs.png", "#/", "table.runs"),
         ("ui-timeline.png", f"#/run/{DEMO_RUN}", "svg.timeline"),
         ("ui-diff.png", f"#/cp/{DEMO_RUN}/main/0/1/4?mode=split", "#diff h3"))


def chromium_path() -> str | None:
    """The system's Chromium executable ($SNAPSHOTD_CHROMIUM first), or None."""
    given = os.environ.get("SNAPSHOTD_CHROMIUM")
    if given:
        return given if os.access(given, os.X_OK) else None
    for name in CHROMIUM_NAMES:
        found = shutil.which(name)
        if found:
            return found
    return None


def make_demo(home: Path, worktree: Path) -> None:
    """One run of an imaginary agent on ``worktree``, captured into ``home`` without a daemon."""
    from snapshotd.core import load_config
    from snapshotd.features.restore import restore_checkpoint
    from snapshotd.service import GapSpool, Service
    from snapshotd_client import gaps_path

    worktree.mkdir(parents=True, exist_ok=True)
    steps = [
        ("Write app.py", {"app.py": "def main():\n    print('hello')\n"}),
        ("Write README.md", {"README.md": "# demo\n\nA small demo project.\n"}),
        ("Edit app.py", {"app.py": "import sys\n\n\ndef main(argv):\n    # greet\n"
                                   "    name = argv[1] if len(argv) > 1 else 'world'\n"
                                   "    print(f'hello {name}')\n    return 0\n"}),
        ("Bash pytest -q", {"tests/test_app.py": "from app import main\n\n\n"
                                                 "def test_main():\n    assert main(['x']) == 0\n"}),
        ("Edit app.py", {"app.py": "import sys\n\n\ndef main(argv):\n    # greet someone\n"
                                   "    name = argv[1] if len(argv) > 1 else 'world'\n"
                                   "    print(f'hello, {name}!')\n    return 0\n\n\n"
                                   "if __name__ == '__main__':\n    sys.exit(main(sys.argv))\n"}),
    ]
    service = Service(home, load_config(environ={}))
    try:
        for i, (label, files) in enumerate(steps):
            for name, text in files.items():
                (worktree / name).parent.mkdir(parents=True, exist_ok=True)
                (worktree / name).write_text(text)
            service.snapshot({"cwd": str(worktree), "run_id": DEMO_RUN, "node_id": "main",
                              "source": "hook", "label": label, "tool_use_id": f"toolu_{i:04d}"})
            time.sleep(0.05)
        (worktree / "notes.txt").write_text("written by a build step\n")
        service.snapshot({"cwd": str(worktree), "run_id": DEMO_RUN, "node_id": "main",
                          "source": "watch", "tier": 2, "label": "settled writes"})
        # The user rolls back to before the last edit: a restore safety point, then more work.
        (worktree / "scratch.txt").write_text("unsaved experiment\n")
        restore_checkpoint(service, run_id=DEMO_RUN, node_id="main", seq=3, force=True)
        (worktree / "app.py").write_text("def main(argv):\n    return 0\n")
        service.snapshot({"cwd": str(worktree), "run_id": DEMO_RUN, "node_id": "main",
                          "source": "hook", "label": "Edit app.py", "tool_use_id": "toolu_0100"})
    finally:
        service.close()
    GapSpool(gaps_path(home)).record(reason="timeout", detail="the daemon did not answer in "
                                     "2000 ms", run_id=DEMO_RUN, node_id="main",
                                     tool_use_id="toolu_0099")


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else Path(__file__).resolve().parents[2] / "docs"
    browser = chromium_path()
    if browser is None:
        print("no Chromium found: apt-get install chromium (or set SNAPSHOTD_CHROMIUM)",
              file=sys.stderr)
        return 1
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("Playwright for Python is missing: pip install playwright", file=sys.stderr)
        return 1
    from snapshotd.ui.app import bind, create_app, serve

    with tempfile.TemporaryDirectory(prefix="sdui-") as tmp:
        home = Path(tmp) / "home"
        os.environ["SNAPSHOTD_SOCKET"] = str(Path(tmp) / "none.sock")
        make_demo(home, Path(tmp) / "project")
        sock = bind(0)
        port = sock.getsockname()[1]
        token = secrets.token_urlsafe(16)
        app = create_app(home=home, socket=Path(tmp) / "none.sock", token=token, port=port)
        threading.Thread(target=serve, args=(app, sock), daemon=True).start()
        base = f"http://127.0.0.1:{port}/"
        with sync_playwright() as pw:
            chrome = pw.chromium.launch(executable_path=browser, args=["--no-sandbox"])
            page = chrome.new_page(viewport={"width": 1280, "height": 760})
            page.goto(base + "login?code=" + app.mint_code())
            for name, frag, drawn in SHOTS:
                page.goto(base + frag)
                page.wait_for_selector(drawn)
                if name == "ui-diff.png":
                    page.locator("#diff-title").evaluate("el => el.scrollIntoView()")
                page.screenshot(path=str(out / name), full_page=False)
                print(out / name)
            chrome.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
