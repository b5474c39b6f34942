"""A recorded agent session for the bisect and checkout tests: 40 tool calls captured by a
real daemon over its socket (one ``snapshot`` request each, no process per call).

Tool call 23 breaks ``app.py`` (the failure bisect must name), tool call 10 adds an unrelated
failure that tool call 30 fixes, tool call 22 leaves a ``skipme`` marker a command may answer
with 125. Along the way entries change kind (file, directory, symlink), a file turns executable
and a symlink points outside the tree, so a scratch directory moved by diffs meets each case.
Tool call k is checkpoint seq k - 1.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

from tests.conftest import Daemon, make_git_worktree

RUN, NODE = "bisect-run", "session"
CALLS, BREAKS, FIXES_UNRELATED, SKIP_MARK = 40, 23, 30, 22


def build_session(daemon: Daemon, wt: Path, calls: int = CALLS) -> list[dict]:
    """Run ``calls`` tool calls on a new git worktree ``wt``; their checkpoints, in order."""
    make_git_worktree(wt)
    (wt / "app.py").write_text("def app():\n    return 1\n")
    (wt / "notes").mkdir()
    out: list[dict] = []
    with daemon.client() as c:
        c.attempt_begin(RUN, NODE, str(wt))
        for k in range(1, calls + 1):
            edit(wt, k)
            cp = c.snapshot(str(wt), run_id=RUN, node_id=NODE, source="hook",
                            tool_use_id=f"call-{k}", label=f"Edit step {k}")
            assert cp["seq"] == k - 1 and not cp["deduped"], cp
            out.append(cp)
    return out


def edit(wt: Path, k: int) -> None:
    """What tool call ``k`` does to the worktree."""
    (wt / "notes" / f"n{k}.txt").write_text(f"note {k}\n" * k)
    if k == BREAKS:
        (wt / "app.py").write_text("def app():\n    return 1  # BROKEN\n")
        (wt / "skipme").unlink()
    if k == SKIP_MARK:
        (wt / "skipme").write_text("the build is half done\n")
    if k == 10:
        (wt / "unrelated.py").write_text("raise SystemExit(1)  # FAIL\n")
    if k == FIXES_UNRELATED:
        (wt / "unrelated.py").write_text("pass\n")
    if k == 5:
        (wt / "tool.sh").write_text("#!/bin/sh\necho tool\n")
    if k == 12:
        os.chmod(wt / "tool.sh", 0o755)
    if k == 7:
        os.symlink("app.py", wt / "link")
        os.symlink("../../../etc", wt / "outside")
    _kinds(wt, k)


def _kinds(wt: Path, k: int) -> None:
    """``kind/x``: a file (13), a directory (15), a symlink (16), a file again (17); ``deep``,
    a directory tree removed whole at 19."""
    x = wt / "kind" / "x"
    if k == 13:
        x.parent.mkdir()
        x.write_text("a file\n")
    elif k == 15:
        x.unlink()
        x.mkdir()
        (x / "y").write_text("inside\n")
    elif k == 16:
        shutil.rmtree(x)
        os.symlink("../app.py", x)
    elif k == 17:
        x.unlink()
        x.write_text("a file again\n")
    elif k == 18:
        (wt / "deep" / "a" / "b").mkdir(parents=True)
        (wt / "deep" / "a" / "b" / "c.txt").write_text("deep\n")
    elif k == 19:
        shutil.rmtree(wt / "deep")


def tree_digest(root: Path, skip: tuple[str, ...] = ()) -> str:
    """Every entry under ``root``: path, type, mode, and a file's bytes or a link's target."""
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(dirnames + filenames):
            full = Path(dirpath, name)
            rel = str(full.relative_to(root))
            if rel.endswith(skip):
                continue
            st = os.lstat(full)
            h.update(f"{rel}\0{st.st_mode}\0".encode())
            if os.path.islink(full):
                h.update(os.readlink(full).encode())
            elif full.is_file():
                h.update(full.read_bytes())
    return h.hexdigest()
