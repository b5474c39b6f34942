"""What a purge leaves behind (issue 48): nothing that still speaks of the purged file.

A real git worktree watched by a real daemon (``secret_files = "capture"``, so ``.env`` is
captured and its made-up key marked); ``snapshotd purge RUN .env`` through the CLI. Afterwards:
export is no longer refused for the finding (it went with the purged content), ``snapshots`` and
``show`` no longer list the finding or count the file, no ``watcher-drift`` gap names the
untouched ``.env`` while the watch verifies, and the ``gc`` command purge suggests runs.
``push --release-path`` with no remote says the release was recorded, and exits 0.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import Env, MakeDaemon, git, make_git_worktree

pytestmark = pytest.mark.one_ledger("purge's rewrite of rows and messages, through the CLI")

KEY = "sk-proj-Qm3xT8vR2kLp9Wz4Yb7Nc1Hd6Fg0Js5A"
RUN = "purge-after"


def cli(env: Env, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, text=True, timeout=120)


def test_after_a_purge_nothing_speaks_of_the_file(sd_env: Env, make_daemon: MakeDaemon,
                                                  tmp_path: Path) -> None:
    daemon = make_daemon(sd_env, {"SNAPSHOTD_SECRET_FILES": "capture",
                                  "SNAPSHOTD_SETTLE_MS": "100", "SNAPSHOTD_MAX_WAIT_MS": "500",
                                  "SNAPSHOTD_VERIFY_INTERVAL_S": "1.5"})
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("a0\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "base")
    with daemon.client() as c:
        c.attempt_begin(RUN, "n", str(wt))
        c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="t0")
        (wt / ".env").write_text(f"OPENAI_API_KEY={KEY}\n")
        (wt / "a.txt").write_text("a1\n")
        marked = c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="t1")
        (wt / "a.txt").write_text("a2\n")
        c.snapshot(str(wt), run_id=RUN, node_id="n", tool_use_id="t2")
    assert [f["path"] for f in marked["secrets"]] == [".env"]
    seq = marked["seq"]
    refused = cli(sd_env, "export", RUN, "--node", "n", "--branch", "before")
    assert refused.returncode == 1 and "(secret-held)" in refused.stderr, refused.stderr
    before = {cp["seq"]: cp for cp in
              json.loads(cli(sd_env, "snapshots", RUN, "--json").stdout)["checkpoints"]}
    assert (before[seq]["added"], before[seq]["modified"]) == (1, 1)

    proc = cli(sd_env, "purge", RUN, ".env")
    assert proc.returncode == 0, proc.stderr
    purged = max(before)  # the checkpoints the purge rewrote; later ones take .env again

    # Export: the finding went with the file.
    out = cli(sd_env, "export", RUN, "--node", "n", "--branch", "agent")
    assert out.returncode == 0, out.stderr
    assert git(wt, "rev-parse", "--verify", "agent").strip()
    # Listings: no SECRET note, and the counts are the purged trees'.
    listing = cli(sd_env, "snapshots", RUN)
    rows = [line for line in listing.stdout.splitlines()
            if line.split()[:1] and line.split()[0].isdigit() and int(line.split()[0]) <= purged]
    assert listing.returncode == 0 and len(rows) == purged + 1, listing.stdout
    assert not any("SECRET" in line for line in rows), listing.stdout
    after = [cp for cp in json.loads(cli(sd_env, "snapshots", RUN, "--json").stdout)
             ["checkpoints"] if cp["seq"] <= purged]
    assert all(cp["secrets"] == [] for cp in after), after
    mine = next(cp for cp in after if cp["seq"] == seq)
    assert (mine["added"], mine["modified"], mine["deleted"]) == (0, 1, 0)
    shown = cli(sd_env, "show", RUN, "--node", "n", "--seq", str(seq))
    assert shown.returncode == 0 and "SECRET" not in shown.stdout, shown.stdout

    # The agent goes on (.env untouched, still there): a settled capture, the verification
    # after it, and no drift; the capture took every file (.env too, as docs/secrets.md says).
    store = sd_env.home / "store.git"
    (wt / "a.txt").write_text("a3\n")
    deadline, settled_at, listed = time.monotonic() + 60, None, {}
    while time.monotonic() < deadline:
        with daemon.client() as c:
            listed = c.list(RUN)
        drift = [g for g in listed["gaps"] if g.get("reason") == "watcher-drift"]
        assert not drift, drift
        tip = listed["checkpoints"][-1]["commit"]
        if settled_at is None and git(store, "show", f"{tip}:a.txt") == "a3\n":
            settled_at = time.monotonic()
        if settled_at is not None and time.monotonic() - settled_at > 4:
            break  # the verification after the burst has had its turn
        time.sleep(0.2)
    newest = listed["checkpoints"][-1]
    assert settled_at is not None and newest["source"] == "watch", newest
    assert git(store, "ls-tree", "--name-only", newest["commit"]).split() == [".env", "a.txt"]

    # The command purge suggests for reclaiming the old objects runs.
    suggested = re.search(r"`(snapshotd gc[^`]*)`", proc.stdout)
    assert suggested, proc.stdout
    ran = cli(sd_env, *suggested.group(1).split()[1:])
    assert ran.returncode == 0, ran.stderr
    gone = subprocess.run(["git", "--git-dir", str(store), "cat-file", "-e", marked["commit"]],
                          capture_output=True)
    assert gone.returncode != 0  # the pre-purge commit holding the key is reclaimed


def test_release_path_without_a_remote_says_it_was_recorded(sd_env: Env,
                                                            make_daemon: MakeDaemon) -> None:
    daemon = make_daemon(sd_env)
    for path in (".env", "conf/.env"):  # through the daemon, then on the home directly
        proc = cli(sd_env, "push", "--release-path", path)
        # The release is what was asked for (it lets export and replication go): exit 0.
        assert proc.returncode == 0, (proc.returncode, proc.stderr)
        assert f"released {path}: recorded in" in proc.stdout
        assert "nothing pushed: no remote is configured" in proc.stdout
        daemon.stop()
    released = json.loads((sd_env.home / "secrets-released.json").read_text())
    assert released["paths"] == [".env", "conf/.env"]
    # Without a release, no remote is still a failure.
    assert cli(sd_env, "push").returncode == 1
