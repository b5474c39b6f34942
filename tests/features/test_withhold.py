"""A checkpoint holding a secret is kept on this host: captured and marked, never pushed.

A real bare repository is the remote and the git CLI the oracle of what it holds. One attempt
writes a file with a (made-up) key at its second checkpoint: the reply, the ledger listing and
``status`` name the finding's path, line and kind; the remote gets the attempt's first
checkpoint and every checkpoint of a clean attempt, never the held commit or anything after it,
until ``snapshotd push RUN --release COMMIT`` lets it go.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.conftest import QUIET_WATCHER, Daemon, Env
from tests.support.helpers import wait_for

KEY = "sk-proj-Qm3xT8vR2kLp9Wz4Yb7Nc1Hd6Fg0Js5A"
LEAK, CLEAN = "leak-run", "clean-run"


def remote_refs(remote: Path) -> dict[str, str]:
    out = subprocess.run(["git", "ls-remote", str(remote)], capture_output=True, text=True,
                         check=True).stdout
    return {line.split("\t")[1]: line.split("\t")[0] for line in out.splitlines() if line}


def remote_has(remote: Path, commit: str) -> bool:
    return subprocess.run(["git", "--git-dir", str(remote), "cat-file", "-e", commit],
                          capture_output=True).returncode == 0


def cli(env: Env, extra: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(**extra),
                          capture_output=True, text=True, timeout=120)


def test_a_checkpoint_with_a_key_is_kept_marked_and_withheld(sd_env: Env,
                                                              tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    extra = dict(QUIET_WATCHER, SNAPSHOTD_REMOTE=str(remote), SNAPSHOTD_PUSH_INTERVAL_MS="20")
    daemon = Daemon(sd_env, extra_env=extra).start()
    clean_wt, leak_wt = tmp_path / "clean", tmp_path / "leak"
    clean_wt.mkdir()
    leak_wt.mkdir()
    replies: list[dict] = []
    with daemon.client() as c:
        (clean_wt / "a.py").write_text("x = 1\n")
        clean = c.snapshot(str(clean_wt), run_id=CLEAN, node_id="n", tool_use_id="c0")
        (leak_wt / "app.py").write_text("print('hi')\n")
        replies.append(c.snapshot(str(leak_wt), run_id=LEAK, node_id="n", tool_use_id="l0"))
        (leak_wt / "settings.py").write_text(f"DEBUG = True\nOPENAI_API_KEY = '{KEY}'\n")
        replies.append(c.snapshot(str(leak_wt), run_id=LEAK, node_id="n", tool_use_id="l1"))
        (leak_wt / "app.py").write_text("print('bye')\n")
        replies.append(c.snapshot(str(leak_wt), run_id=LEAK, node_id="n", tool_use_id="l2"))
    assert "secrets" not in replies[0]
    assert replies[1]["secrets"] == [{"path": "settings.py", "line": 2, "kind": "openai"}]
    assert "secrets" not in replies[2]  # settings.py did not change again
    held = replies[1]["commit"]

    leak_ref = f"refs/snapshotd/runs/{LEAK}/n/0/1"
    clean_ref = f"refs/snapshotd/runs/{CLEAN}/n/0/1"

    def settled() -> dict | None:
        refs = remote_refs(remote)
        return refs if refs.get(clean_ref) == clean["commit"] and leak_ref in refs else None

    refs = wait_for(settled, what="the clean checkpoints on the remote")
    assert refs[leak_ref] == replies[0]["commit"]  # pushed up to the held one, not beyond
    assert not remote_has(remote, held) and not remote_has(remote, replies[2]["commit"])
    status = json.loads(cli(sd_env, extra, "status", "--json").stdout)
    withheld = status["replication"]["withheld"]
    assert [(w["run_id"], w["seq"], w["commit"], w["reason"]) for w in withheld] == \
        [(LEAK, 1, held, "replication-withheld")]
    assert withheld[0]["findings"] == replies[1]["secrets"]
    text = cli(sd_env, extra, "status").stdout
    assert f"WITHHELD {LEAK}/n/0/1 seq 1" in text and KEY not in text
    listing = json.loads(cli(sd_env, extra, "snapshots", LEAK, "--json").stdout)
    marked = {cp["seq"]: cp["secrets"] for cp in listing["checkpoints"]}
    assert marked[1] == replies[1]["secrets"] and marked[0] == [] and marked[2] == []
    shown = cli(sd_env, extra, "snapshots", LEAK).stdout
    assert "SECRET settings.py:2 openai" in shown

    released = cli(sd_env, extra, "push", LEAK, "--release", held)
    assert released.returncode == 0, released.stderr
    wait_for(lambda: remote_refs(remote).get(leak_ref) == replies[2]["commit"],
             what="the released checkpoints on the remote")
    daemon.stop()
    assert "replication-withheld" in daemon.log.read_text()
    assert KEY not in daemon.log.read_text()


def test_release_by_path_and_a_held_first_checkpoint(sd_env: Env, tmp_path: Path) -> None:
    remote = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    extra = dict(QUIET_WATCHER, SNAPSHOTD_REMOTE=str(remote), SNAPSHOTD_PUSH_INTERVAL_MS="20")
    daemon = Daemon(sd_env, extra_env=extra).start()
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "deploy.sh").write_text(f"curl -H 'Authorization: Bearer {KEY}1x' api\n")
    with daemon.client() as c:
        first = c.snapshot(str(wt), run_id=LEAK, node_id="n", tool_use_id="p0")
        assert first["secrets"][0]["path"] == "deploy.sh"
    wait_for(lambda: daemon.client().status()["replication"]["withheld"],
             what="the first checkpoint withheld")
    assert remote_refs(remote) == {}  # nothing of the attempt may leave
    proc = cli(sd_env, extra, "push", LEAK, "--release-path", "deploy.sh")
    assert proc.returncode == 0, proc.stderr
    assert remote_refs(remote).get(f"refs/snapshotd/runs/{LEAK}/n/0/1") == first["commit"]


def _chain(repo: Any, messages: list[str], onto: str | None = None) -> list[str]:
    import pygit2

    sig = pygit2.Signature("t", "t@t", 0, 0)
    tree = repo.TreeBuilder().write()
    out, parent = [], onto
    for message in messages:
        parent = str(repo.create_commit(None, sig, sig, message, tree,
                                        [pygit2.Oid(hex=parent)] if parent else []))
        out.append(parent)
    return out


def test_a_rewritten_chain_is_walked_again(tmp_path: Path) -> None:
    import pygit2

    from snapshotd.features.withhold import Withholder, release

    repo = pygit2.init_repository(str(tmp_path / "r.git"), bare=True)
    mark = 'Snapshotd-Secrets: [{"path":"k.txt","line":1,"kind":"openai"}]'
    old = _chain(repo, ["s0\n\nSnapshotd-Seq: 0\n", f"s1\n\nSnapshotd-Seq: 1\n{mark}\n",
                        "s2\n\nSnapshotd-Seq: 2\n"])
    w = Withholder(tmp_path)
    target, held = w.target(repo, "refs/x", old[2])
    assert target == old[0] and held is not None and held["seq"] == 1
    # gc or purge rewrote the chain: s0 is new, and s1 lost its mark.
    new = _chain(repo, ["s0 again\n\nSnapshotd-Seq: 0\n", "s1\n\nSnapshotd-Seq: 1\n",
                        "s2 again\n\nSnapshotd-Seq: 2\n"])
    assert w.target(repo, "refs/x", new[2]) == (new[2], None)
    # Releasing by path lets a marked chain go whole.
    again = _chain(repo, [f"s3\n\nSnapshotd-Seq: 3\n{mark}\n"], onto=new[2])
    assert w.target(repo, "refs/x", again[0])[0] == new[2]
    release(tmp_path, paths=("k.txt",))
    assert w.target(repo, "refs/x", again[0]) == (again[0], None)
