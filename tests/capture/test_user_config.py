"""The user's own git configuration never changes what a capture holds. The stat caches are git
worktrees of the store, so libgit2 and git read the user's global ``~/.gitconfig`` for them;
before, ``core.ignoreCase = true`` there dropped one of two names that differ only in case
(``A.txt`` and ``a.txt``: one of them was in no checkpoint), and ``core.ignoreStat = true``
made every full scan blind to changed files. The daemon runs as a real subprocess with a
``HOME`` whose ``.gitconfig`` sets all of that; the oracle is the git CLI reading the store."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import Env, MakeDaemon, git, make_git_worktree

HOSTILE_GITCONFIG = """[core]
\tignoreCase = true
\tignoreStat = true
\tcheckStat = minimal
\ttrustctime = false
\tautocrlf = true
\tfilemode = false
\tsymlinks = false
"""


def listing(home: Path, tree: str) -> dict[str, str]:
    """``{path: "mode content"}`` of ``tree`` in the store, as the git CLI reads it."""
    store = ["--git-dir", str(home / "store.git")]
    out = {}
    for line in git(home, *store, "ls-tree", "-r", tree).splitlines():
        meta, path = line.split("\t", 1)
        mode, _kind, oid = meta.split()
        out[path] = f"{mode} {git(home, *store, 'cat-file', 'blob', oid)}"
    return out


def test_a_hostile_global_gitconfig_changes_nothing_a_capture_holds(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    home = tmp_path / "user-home"
    home.mkdir()
    (home / ".gitconfig").write_text(HOSTILE_GITCONFIG)
    wt = make_git_worktree(tmp_path / "wt")
    files = {"A.txt": "upper\n", "a.txt": "lower\n", "Dir/x": "in Dir\n", "dir/x": "in dir\n",
             "dos.txt": "one\r\ntwo\r\n", "run.sh": "#!/bin/sh\n"}
    for path, text in files.items():
        (wt / path).parent.mkdir(exist_ok=True)
        (wt / path).write_bytes(text.encode())
    (wt / "run.sh").chmod(0o755)
    (wt / "link").symlink_to("a.txt")
    expected = {p: f"{'100755' if p == 'run.sh' else '100644'} {t}" for p, t in files.items()}
    expected["link"] = "120000 a.txt"

    daemon = make_daemon(sd_env, extra_env={"HOME": str(home)})
    with daemon.client() as c:
        c.attempt_begin("cfg", "n", str(wt))
        first = c.snapshot(str(wt), run_id="cfg", node_id="n")
    assert listing(sd_env.home, first["tree"]) == expected
    daemon.stop()

    # Changed while no daemon ran: the next daemon's full scan, against the stat cache on disk,
    # must see it (same size, so only the stat data's times and inode tell).
    (wt / "a.txt").write_text("LOWER\n")
    (wt / "Dir" / "x").unlink()
    daemon = make_daemon(sd_env, extra_env={"HOME": str(home)})
    with daemon.client() as c:
        second = c.snapshot(str(wt), run_id="cfg", node_id="n")
    expected["a.txt"] = "100644 LOWER\n"
    del expected["Dir/x"]
    assert listing(sd_env.home, second["tree"]) == expected
