"""Events reach their worktrees by path: nested worktrees sharing one notifier each see the
changes below their own root (the outer one sees the inner one's too), flush goes to the
nearest watched root, and a verification that finds changes no event announced is one gap
reason, ``watcher-drift``."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from snapshotd_client import Client
from tests.conftest import Env, MakeDaemon, make_git_worktree
from tests.support.helpers import wait_for

pytestmark = pytest.mark.one_ledger("routing of inotify events to worktrees")

FAST_WATCHER = {"SNAPSHOTD_SETTLE_MS": "100", "SNAPSHOTD_MAX_WAIT_MS": "300"}

# The status polls of these tests (s): as often as the watcher tests always polled.
POLL_S = 0.05


def verified(c: Client) -> bool:
    """No verification scan is still owed. Each capture that changed a tree is followed, about a
    second later, by one verification: a full scan that counts as a capture of its worktree too
    and, since nothing here changes behind the watcher's back, is itself deduplicated. So every
    owed one has run once verifications reach the captures that were not deduplicated."""
    w = c.status()["watcher"]
    return w["verifications"] >= w["captures"] - w["deduped"]


def test_nested_worktrees_on_one_notifier_each_see_the_changes_below_them(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    outer = make_git_worktree(tmp_path / "outer")
    (outer / "o.txt").write_text("o\n")
    inner = make_git_worktree(outer / "inner")
    (inner / "i.txt").write_text("i\n")
    sibling = make_git_worktree(tmp_path / "sibling")
    d = make_daemon(sd_env, FAST_WATCHER)
    with d.client() as c:
        for run, root in (("outer", outer), ("inner", inner), ("sibling", sibling)):
            c.attempt_begin(run, "n", str(root))
            c.flush(str(root))
        # Once things are quiet the three notifiers become one.
        wait_for(lambda: c.status()["watcher"]["merges"] >= 1
                 and c.status()["watcher"]["notifiers"] == 1, timeout=20,
                 every=POLL_S, what="the three notifiers merged into one")

        def counts() -> dict[str, int]:
            """Tier-2 captures per worktree (a deduplicated one counts: the outer
            worktree's tree may not change when only the nested repository's files do)."""
            rows = {r["path"]: r["captures"] for r in c.status()["watched"]}
            return {run: rows[str(root)] for run, root in
                    (("outer", outer), ("inner", inner), ("sibling", sibling))}

        # A verification scan still to come would count as one more capture.
        wait_for(lambda: verified(c), every=POLL_S,
                 what="the first captures' verification scans")
        before = counts()
        (inner / "i.txt").write_text("i2\n")
        wait_for(lambda: counts()["inner"] > before["inner"]
                 and counts()["outer"] > before["outer"], every=POLL_S,
                 what="inner and outer captures")
        wait_for(lambda: verified(c), every=POLL_S,
                 what="the verification scan of inner's capture")
        before = counts()
        (outer / "o.txt").write_text("o2\n")
        wait_for(lambda: counts()["outer"] > before["outer"], every=POLL_S, what="an outer capture")
        # Let time pass: a window this write wrongly opened in inner or sibling (settle
        # 100 ms, max wait 300 ms) would have been captured by now.
        time.sleep(0.6)
        after = counts()
        assert after["inner"] == before["inner"] and after["sibling"] == before["sibling"]
        # flush from a directory inside the inner worktree is the inner attempt's.
        (inner / "sub").mkdir()
        (inner / "sub" / "f.txt").write_text("f\n")
        before = {run: len(c.list(run)["checkpoints"]) for run in ("outer", "inner")}
        c.flush(str(inner / "sub"))
        assert len(c.list("inner")["checkpoints"]) == before["inner"] + 1


def test_changes_a_verification_finds_unannounced_are_watcher_drift(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    """While the fast path is off (after a first drift), the verification scan after a burst
    cannot compare against changed paths; a change it finds that no event announced is still
    drift, with the same reason."""
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.txt").write_text("before\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.link(wt / "a.txt", outside / "alias.txt")  # writes through it raise no event in wt
    # The unseen write after the burst usually precedes the burst's verification (due a
    # second after the last one); on a loaded machine that verification can start first, and
    # the write is then found by the next verification of the quiet worktree: ten intervals
    # on, spaced by its share of a core (``took / share``: 0.12 s of scan at the default
    # 0.25 % is 48 s, past the wait below). A share of 1 keeps that within about ten seconds.
    d = make_daemon(sd_env, {**FAST_WATCHER, "SNAPSHOTD_VERIFY_INTERVAL_S": "1",
                             "SNAPSHOTD_QUIET_VERIFY_SHARE": "1"})

    def drifts() -> list[dict]:
        return [g for g in sd_env.read_gaps() if g["reason"] == "watcher-drift"]

    with d.client() as c:
        c.attempt_begin("judge", "n", str(wt))
        c.snapshot(str(wt), run_id="judge", node_id="n")
        (wt / "b.txt").write_text("b\n")
        c.snapshot(str(wt), run_id="judge", node_id="n")
        with open(outside / "alias.txt", "w") as f:
            f.write("first unseen write\n")
        wait_for(lambda: len(drifts()) == 1, timeout=45, every=POLL_S,
                 what="the first watcher-drift gap")
        # The fast path is off now. A burst, and an unseen write before its verification (or,
        # should that verification start first, before the next one).
        (wt / "c.txt").write_text("c\n")
        count = len(c.list("judge")["checkpoints"])
        wait_for(lambda: len(c.list("judge")["checkpoints"]) > count,
                 every=POLL_S, what="the burst's capture")
        with open(outside / "alias.txt", "w") as f:
            f.write("second unseen write\n")
        wait_for(lambda: len(drifts()) == 2, timeout=45, every=POLL_S,
                 what="the second watcher-drift gap")
    assert "captured as seq" in drifts()[1]["detail"]
    assert {g["reason"] for g in sd_env.read_gaps()} == {"watcher-drift"}
