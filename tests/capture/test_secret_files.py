"""Credential files are not captured by default, and never silently.

Plain directories and git worktrees alike: each credential file (by name, or by name and a peek
at its content) is listed on the checkpoint as skipped with reason ``secret`` and is absent from
the checkpoint's tree (read with the git CLI); look-alikes (``.env.example``, a public key, a
certificate, an ``.npmrc`` without a token) are captured. ``secret_files = "capture"`` turns
it off, and a restore leaves the skipped files alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Daemon, Env, MakeDaemon, git, make_git_worktree

pytestmark = pytest.mark.one_ledger("which files a capture skips")

KEY_BLOCK = ("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9u\n"
             "-----END OPENSSH PRIVATE KEY-----\n")
SECRET_FILES = {
    ".env": "OPENAI_API_KEY=made-up\n",
    ".env.local": "DB_URL=made-up\n",
    "id_rsa": KEY_BLOCK,
    "keys/id_ed25519": KEY_BLOCK,
    "tls/server.pem": "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n",
    "tls/server.key": "whatever is in it\n",
    "store.p12": "binary-ish\n",
    ".netrc": "machine example.com login me password made-up\n",
    ".npmrc": "//registry.npmjs.org/:_authToken=made-up\n",
    ".pypirc": "[pypi]\nusername = __token__\npassword = made-up\n",
    ".aws/credentials": "[default]\naws_access_key_id = made-up\n",
    "gcp/sa.json": '{"type": "service_account", "private_key": "-----BEGIN PRIVATE KEY-----\\n"}\n',
    ".kube/config": "apiVersion: v1\nkind: Config\nusers:\n- name: u\n  user:\n    token: made-up\n",
}
LOOK_ALIKES = {
    ".env.example": "OPENAI_API_KEY=\n",
    "id_rsa.pub": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 me@host\n",
    "tls/ca.pem": "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
    "web/.npmrc": "save-exact=true\n",
    "package.json": '{"name": "x", "private": true}\n',
    "deploy/kubeconfig.yaml": "apiVersion: v1\nkind: Config\n",
}


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)


def tree_paths(env: Env, commit: str) -> set[str]:
    return set(git(env.home / "store.git", "ls-tree", "-r", "--name-only", commit).split("\n"))


def capture(daemon: Daemon, wt: Path, tool_use_id: str) -> dict:
    with daemon.client() as c:
        return c.snapshot(str(wt), run_id="sf-run", node_id="n", tool_use_id=tool_use_id)


def secret_skips(reply: dict) -> dict[str, str]:
    return {s["path"]: s["kind"] for s in reply["skipped"] if s["reason"] == "secret"}


def test_a_plain_directory_skips_credential_files(sd_env: Env, daemon: Daemon,
                                                  tmp_path: Path) -> None:
    wt = tmp_path / "plain"
    wt.mkdir()
    write(wt, SECRET_FILES)
    write(wt, LOOK_ALIKES)
    (wt / "main.py").write_text("print('hi')\n")
    reply = capture(daemon, wt, "t0")
    assert set(secret_skips(reply)) == set(SECRET_FILES), reply["skipped"]
    paths = tree_paths(sd_env, reply["commit"])
    assert not paths & set(SECRET_FILES)
    assert set(LOOK_ALIKES) | {"main.py"} <= paths
    # A later change to a secret file is skipped again, and shown again.
    (wt / ".env").write_text("OPENAI_API_KEY=changed\n")
    (wt / "main.py").write_text("print('bye')\n")
    again = capture(daemon, wt, "t1")
    assert ".env" in secret_skips(again)
    assert ".env" not in tree_paths(sd_env, again["commit"])


def test_a_git_worktree_skips_env_files_tracked_or_not(sd_env: Env, daemon: Daemon,
                                                       tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "repo")
    write(wt, {"app.py": "x = 1\n", "config/.env.production": "TOKEN=made-up\n"})
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "a tracked env file, as happens")
    (wt / ".env").write_text("OPENAI_API_KEY=made-up\n")
    reply = capture(daemon, wt, "t0")
    assert set(secret_skips(reply)) == {".env", "config/.env.production"}, reply["skipped"]
    paths = tree_paths(sd_env, reply["commit"])
    assert "app.py" in paths and ".env" not in paths and "config/.env.production" not in paths


def test_restore_leaves_skipped_files_alone(sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = tmp_path / "plain"
    wt.mkdir()
    (wt / "a.txt").write_text("v1\n")
    (wt / ".env").write_text("A=1\n")
    capture(daemon, wt, "t0")
    (wt / "a.txt").write_text("v2\n")
    (wt / ".env").write_text("A=2\n")
    capture(daemon, wt, "t1")
    with daemon.client() as c:
        c.restore(run_id="sf-run", node_id="n", seq=0, force=True)
    assert (wt / "a.txt").read_text() == "v1\n"
    assert (wt / ".env").read_text() == "A=2\n"


def test_secret_files_capture_turns_it_off(sd_env: Env, make_daemon: MakeDaemon,
                                           tmp_path: Path) -> None:
    daemon = make_daemon(sd_env, dict(QUIET_WATCHER, SNAPSHOTD_SECRET_FILES="capture"))
    wt = tmp_path / "plain"
    wt.mkdir()
    write(wt, {".env": "A=1\n", "id_rsa": KEY_BLOCK})
    reply = capture(daemon, wt, "t0")
    assert not secret_skips(reply)
    assert {".env", "id_rsa"} <= tree_paths(sd_env, reply["commit"])
