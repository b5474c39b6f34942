"""The default excludes of a plain (non-git) directory are ours, not the user's: they stay on when
a root ``.gitignore`` appears, so ``node_modules/`` never enters a checkpoint and a restore never
deletes it; a ``.gitignore`` that re-includes a folder still wins."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Daemon, Env, git

pytestmark = pytest.mark.one_ledger("the default excludes of a plain directory")

RUN = {"run_id": "plain", "node_id": "n"}


def files(env: Env, wt: Path, commit: str) -> set[str]:
    out = git(wt, "--git-dir", str(env.home / "store.git"), "ls-tree", "-r", "--name-only", commit)
    return set(out.split())


def test_default_excludes_survive_a_root_gitignore_and_a_restore(sd_env: Env,
                                                                 tmp_path: Path) -> None:
    wt = tmp_path / "plain"
    (wt / "node_modules" / "pkg").mkdir(parents=True)
    (wt / "node_modules" / "pkg" / "index.js").write_text("module.exports = 1\n")
    (wt / "app.js").write_text("v1\n")
    d = Daemon(sd_env, extra_env=dict(QUIET_WATCHER)).start()
    try:
        with d.client() as c:
            c.attempt_begin("plain", "n", str(wt))
            first = c.snapshot(str(wt), **RUN)
            assert files(sd_env, wt, first["commit"]) == {"app.js"}
            (wt / ".gitignore").write_text("*.log\n")
            (wt / "app.js").write_text("v2\n")
            second = c.snapshot(str(wt), **RUN)
            assert files(sd_env, wt, second["commit"]) == {"app.js", ".gitignore"}
            c.restore(run_id="plain", node_id="n", seq=first["seq"], force=True)
            assert (wt / "node_modules" / "pkg" / "index.js").read_text() == \
                "module.exports = 1\n"
            assert (wt / "app.js").read_text() == "v1\n"
            # The user's own rule wins over our default.
            (wt / ".gitignore").write_text("!node_modules/\n")
            third = c.snapshot(str(wt), **RUN)
            assert "node_modules/pkg/index.js" in files(sd_env, wt, third["commit"])
    finally:
        d.stop()


def test_a_root_gitignore_that_never_ends_is_not_read_whole(sd_env: Env, tmp_path: Path) -> None:
    """Our look at a plain directory's ``.gitignore`` (for re-included folders) once read the
    whole file, following a symlink: any user could point it at a device that never ends
    (``/dev/urandom`` here; ``/dev/zero`` filled gigabytes in seconds) and the capture read
    until the daemon's memory ran out. git and libgit2 read no more than the file's stat size
    (0 for a device), and neither follows a symlinked ``.gitignore`` in the tree."""
    wt = tmp_path / "plain"
    (wt / "node_modules").mkdir(parents=True)
    (wt / "node_modules" / "x.js").write_text("x\n")
    (wt / "app.js").write_text("v1\n")
    (wt / ".gitignore").symlink_to("/dev/urandom")
    d = Daemon(sd_env, extra_env=dict(QUIET_WATCHER)).start()
    try:
        with d.client(timeout=20) as c:
            first = c.snapshot(str(wt), **RUN)
        # The link is kept as a link; node_modules stays out: no rule re-included it.
        assert files(sd_env, wt, first["commit"]) == {"app.js", ".gitignore"}
        assert git(wt, "--git-dir", str(sd_env.home / "store.git"), "cat-file", "-p",
                   f"{first['commit']}:.gitignore") == "/dev/urandom"
    finally:
        d.stop()
