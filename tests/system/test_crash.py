"""Nothing lost: the daemon dies at every boundary of a capture, and comes back consistent.

For each crash point, 6 runs (``SNAPSHOTD_CRASH_RUNS`` for more): a daemon armed to ``os._exit``
at the k-th time it reaches the point (k = 1, 2, 3 in turn) takes captures (client calls,
which tell us what was acknowledged, and real hooks) until it dies; the next daemon starts
clean. At the end: every acknowledged checkpoint is listed with
its commit and content, seqs strictly increase, every unacknowledged hook left a gap or became a
complete checkpoint, ``git fsck --strict`` and SQLite's integrity check are clean.
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from random import Random

import pytest

from snapshotd.core.faults import CRASH_EXIT_STATUS
from snapshotd_client import SnapshotdError
from tests.conftest import (
    QUIET_WATCHER,
    Env,
    MakeDaemon,
    claude_payload,
    git,
    make_git_worktree,
    run_hook,
)
from tests.support.helpers import wait_windows_recovered

CAPTURE_POINTS = ["after-blobs", "after-tree", "after-commit", "after-ref", "after-row",
                  "before-reply"]
# Six runs: each k of 1..3 twice (ten took 9-16 s per point and backend, the largest share of
# the suite); a longer soak sets SNAPSHOTD_CRASH_RUNS.
RUNS = int(os.environ.get("SNAPSHOTD_CRASH_RUNS", "6"))
RUN_ENV = {"SNAPSHOTD_RUN_ID": "crash", "SNAPSHOTD_NODE_ID": "n"}


def store_git(env: Env, *args: str) -> str:
    return git(env.home, "--git-dir", str(env.home / "store.git"), *args)


@pytest.mark.parametrize("point", CAPTURE_POINTS)
def test_crash_at_every_capture_boundary(point: str, sd_env: Env, tmp_path: Path,
                                         make_daemon: MakeDaemon) -> None:
    rng = Random(zlib.crc32(point.encode()))
    wt = make_git_worktree(tmp_path / "wt")
    acked: dict[int, tuple[str, str]] = {}
    hook_contents: dict[str, str] = {}  # each hook's tool_use_id: what f.txt held for it
    unacked_client_ids: list[str] = []
    step = 0
    for run in range(RUNS):
        k = 1 + run % 3
        daemon = make_daemon(sd_env, extra_env={**QUIET_WATCHER,
                                                "SNAPSHOTD_CRASH_AT": f"{point}:{k}"}, start=False)
        try:
            daemon.start()
        except RuntimeError:
            # The start-up capture of a settle window the previous crash left open reached the
            # crash point: that is one more crash at this boundary, before serving.
            assert daemon.proc is not None and daemon.proc.returncode == CRASH_EXIT_STATUS
            continue
        assert daemon.proc is not None
        while daemon.proc.poll() is None and step < 10_000:
            step += 1
            content = f"run {run} step {step} {rng.random()}\n"
            (wt / "f.txt").write_text(content)
            tool_id = f"toolu_{point}_{step}"
            if step % 2:
                try:
                    with daemon.client(timeout=20) as c:
                        r = c.snapshot(str(wt), run_id="crash", node_id="n", source="hook",
                                       tool_use_id=tool_id)
                    acked[r["seq"]] = (r["commit"], content)
                except (SnapshotdError, OSError):
                    unacked_client_ids.append(tool_id)
            else:
                result = run_hook(sd_env, claude_payload(wt, tool_id), **RUN_ENV)
                assert result.returncode == 0 and result.stdout == b"" and result.stderr == b""
                hook_contents[tool_id] = content
        assert daemon.proc.wait(timeout=20) == CRASH_EXIT_STATUS

    final = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    # The last crash may have left a settle window open: the final daemon captures it on its
    # pool while it already serves, so the listing waits for that checkpoint.
    wait_windows_recovered(sd_env.home)
    with final.client() as c:
        listing = c.list("crash")
    final.stop()
    checkpoints = [cp for cp in listing["checkpoints"] if cp["node_id"] == "n"]
    seqs = [cp["seq"] for cp in checkpoints]
    assert seqs == sorted(set(seqs)), "seqs strictly increase with no duplicate"
    by_seq = {cp["seq"]: cp for cp in checkpoints}
    for seq, (commit, content) in acked.items():
        assert seq in by_seq, f"acknowledged seq {seq} lost"
        assert by_seq[seq]["commit"] == commit
        assert store_git(sd_env, "show", f"{commit}:f.txt") == content
    # Each checkpoint is complete: its commit and every object below it exist.
    tip = store_git(sd_env, "rev-parse", "refs/snapshotd/runs/crash/n/0/1").strip()
    assert tip == checkpoints[-1]["commit"]
    store_git(sd_env, "fsck", "--strict")
    for cp in checkpoints:
        store_git(sd_env, "ls-tree", "-r", cp["commit"])
    # An unacknowledged hook became a complete checkpoint, or left a gap; or its capture found
    # the tree a checkpoint already held (the start-up capture of a window a crash left open can
    # take the hook's write first) and the ledger maps its tool call to that checkpoint, whose
    # tree holds what the hook saw.
    recorded = {cp["tool_use_id"] for cp in checkpoints}
    gapped = {g["tool_use_id"] for g in sd_env.read_gaps()}
    mapped = {r["tool_use_id"]: r["seq"] for r in sd_env.ledger_query(
        "SELECT t.tool_use_id AS tool_use_id, t.seq AS seq FROM tool_calls t"
        " JOIN attempts a ON a.pk = t.attempt_pk WHERE a.run_id = ? AND t.deduped <> 0",
        ("crash",))}
    for tool_id, content in hook_contents.items():
        if tool_id in recorded or tool_id in gapped:
            continue
        assert tool_id in mapped, f"{tool_id} neither captured nor gapped"
        commit = by_seq[mapped[tool_id]]["commit"]
        assert store_git(sd_env, "show", f"{commit}:f.txt") == content, tool_id
    assert sd_env.ledger_intact()


def _tree_state(root: Path) -> dict[str, tuple[str, bytes]]:
    """Every non-.git path: (kind+mode, bytes or link target)."""
    import os
    import stat

    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            st = p.lstat()
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(p).encode())
            else:
                out[rel] = (f"file{oct(st.st_mode & 0o111)}", p.read_bytes())
    return out


def test_restore_killed_half_way_then_rerun(sd_env: Env, tmp_path: Path,
                                            make_daemon: MakeDaemon) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    for i in range(40):
        (wt / f"f{i}.txt").write_text(f"checkpoint {i}\n")
    daemon = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    with daemon.client() as c:
        c.snapshot(str(wt), run_id="rs", node_id="n")
    daemon.stop()
    target = _tree_state(wt)
    # Edited while no daemon watches, so the restore's safety checkpoint is what holds them.
    for i in range(40):
        (wt / f"f{i}.txt").write_text(f"edited later {i}\n")
    (wt / "extra.txt").write_text("not in the checkpoint\n")
    original = _tree_state(wt)

    dying = make_daemon(sd_env, extra_env={**QUIET_WATCHER, "SNAPSHOTD_CRASH_AT": "restore-mid"})
    with dying.client() as c:
        try:
            c.restore(run_id="rs", node_id="n", seq=0, force=True)
            raise AssertionError("the restore should have died half-way")
        except (SnapshotdError, OSError):
            pass
    assert dying.proc is not None and dying.proc.wait(timeout=20) == CRASH_EXIT_STATUS
    half = _tree_state(wt)
    assert half != target and half != original  # really half-way

    again = make_daemon(sd_env, extra_env=dict(QUIET_WATCHER))
    with again.client() as c:
        cps = c.list("rs")["checkpoints"]
        safety = [cp for cp in cps if cp["source"] == "restore"]
        assert len(safety) == 1  # the first run's safety checkpoint survived the crash
        c.restore(run_id="rs", node_id="n", seq=0, force=True)
        assert _tree_state(wt) == target
        c.restore(run_id="rs", node_id="n", seq=safety[0]["seq"], force=True)
        assert _tree_state(wt) == original
    again.stop()
    store_git(sd_env, "fsck", "--strict")
