"""A blob ``git gc`` pruned is written again when a later capture needs it.

libgit2 keeps the pack files it has opened in the odb of each handle and, on a write, first
"freshens" an object it believes exists: within two seconds of that pack's last freshen it
returns without touching the file (or writing the object). After ``git gc`` repacked the store
and pruned an object, a handle still holding the old (deleted) pack therefore skipped the write
of that object, and a checkpoint was acknowledged whose tree named a blob missing from the store.

The scenario: a content captured in an attempt, packed by a first gc, its checkpoint pruned and
the content removed from the worktree (so no stat cache vouches for it), a capture that freshens
the old pack, a gc with no prune grace, and at once the same content written and captured again.
Every object of that checkpoint must be in the store and ``git fsck --strict`` clean.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import Daemon, Env, make_git_worktree


def store_has(env: Env, oid: str) -> bool:
    proc = subprocess.run(["git", "--git-dir", str(env.home / "store.git"), "cat-file", "-e",
                           oid], capture_output=True)
    return proc.returncode == 0


def missing_objects(env: Env, commit: str) -> list[str]:
    """The objects ``commit`` reaches (itself, its tree, every tree and blob below, its
    ancestors') that the store lacks."""
    if not store_has(env, commit):
        return [commit]
    proc = subprocess.run(["git", "--git-dir", str(env.home / "store.git"), "rev-list",
                           "--objects", "--missing=print", commit],
                          capture_output=True, text=True, check=True)
    return [line[1:] for line in proc.stdout.splitlines() if line.startswith("?")]


def place(wt: Path, kind: str, content: str) -> None:
    if kind == "symlink":
        os.symlink(content, wt / "link")
    else:
        (wt / "f.txt").write_text(content)


def remove(wt: Path, kind: str) -> None:
    (wt / ("link" if kind == "symlink" else "f.txt")).unlink()


@pytest.mark.parametrize("kind", ["file", "symlink"])
def test_pruned_content_captured_again_is_in_the_store(
        sd_env: Env, daemon: Daemon, tmp_path: Path, kind: str) -> None:
    old = make_git_worktree(tmp_path / "old")
    live = make_git_worktree(tmp_path / "live")
    (old / "keep.txt").write_text("kept in every checkpoint\n")
    content = f"f1-{kind}.txt"
    with daemon.client() as c:
        c.attempt_begin("old", "n", str(old))
        place(old, kind, content)
        first = c.snapshot(str(old), run_id="old", node_id="n")
        remove(old, kind)
        c.snapshot(str(old), run_id="old", node_id="n")
        c.attempt_end("old", "n", status="finished")
        # A first gc packs every object, the content's too (its checkpoint is still kept).
        c.request("gc", keep_last=100, safety_interval_s=0)
        assert missing_objects(sd_env, first["commit"]) == []
        c.attempt_begin("live", "n", str(live))
        # This capture writes a blob the pack holds: libgit2 freshens the pack.
        (live / "keep.txt").write_text("kept in every checkpoint\n")
        # A file of its own: the new checkpoint's tree is new, its content blob is not.
        (live / "live.txt").write_text("only here\n")
        c.snapshot(str(live), run_id="live", node_id="n")
        started = time.monotonic()
        report = c.request("gc", keep_last=1, safety_interval_s=0)
        assert report["checkpoints_pruned"] == 1
        place(live, kind, content)
        again = c.snapshot(str(live), run_id="live", node_id="n")
        elapsed = time.monotonic() - started
    missing = missing_objects(sd_env, again["commit"])
    assert missing == [], f"checkpoint {again['commit']} names missing objects {missing} " \
                          f"(captured {elapsed:.2f}s after the gc began)"
    fsck = subprocess.run(["git", "--git-dir", str(sd_env.home / "store.git"), "fsck",
                           "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
