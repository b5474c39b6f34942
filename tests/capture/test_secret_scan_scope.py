"""What the content scan for secrets reads, and what it may leave unread.

A seeded first capture scans only the files whose staged content the user's HEAD commit does not
hold (the rest are the user's own committed history); files a capture hashes are always
scanned; a file is read up to ``SCAN_MAX_BYTES``. Credential files are found among many paths
by ``secret_files_among`` exactly as ``secret_file_kind`` names them one by one.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from snapshotd.capture.seeding import index_paths
from snapshotd.capture.stat_caches import StatCaches
from snapshotd.core.secrets import (
    SCAN_MAX_BYTES,
    find_secrets,
    may_name_secret_files,
    scan_file,
    secret_file_kind,
    secret_files_among,
)
from snapshotd.store.store import Store
from tests.conftest import git, make_git_worktree

pytestmark = pytest.mark.one_ledger("which files a first capture scans")

TOKEN = "sk-proj-Vx8Kq2Lm7Np4Rt9Ws3Yz6Ab1Cd5Ef0Gh"  # made up, in the shape of an OpenAI key
PRIVATE_KEY = "-----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAAS\n-----END PRIVATE KEY-----\n"


def repo_with_history(root: Path) -> Path:
    wt = make_git_worktree(root)
    (wt / "clean.py").write_text("x = 1\n")
    (wt / "committed.py").write_text(f"KEY = '{TOKEN}'\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "base")
    return wt


def found_paths(capture_secrets: list[dict]) -> set[str]:
    return {f["path"] for f in capture_secrets}


def test_seeded_capture_scans_what_head_does_not_hold(tmp_path: Path) -> None:
    wt = repo_with_history(tmp_path / "wt")
    (wt / "staged.py").write_text(f"token = '{TOKEN}'\n")
    git(wt, "add", "staged.py")
    (wt / "clean.py").write_text(f"x = '{TOKEN}'\n")  # modified on disk, not staged
    (wt / "untracked.py").write_text(f"y = '{TOKEN}'\n")
    capture = StatCaches(Store(tmp_path / "home")).worktree(wt).capture()
    assert found_paths(capture.secrets) == {"staged.py", "clean.py", "untracked.py"}
    # Still captured: the scan marks a checkpoint, it never leaves a file out.
    assert "committed.py" in git(tmp_path, "--git-dir", str(tmp_path / "home" / "store.git"),
                                 "ls-tree", "-r", "--name-only", capture.tree)


def test_a_staged_change_to_a_committed_file_is_scanned(tmp_path: Path) -> None:
    wt = repo_with_history(tmp_path / "wt")
    (wt / "clean.py").write_text(f"x = '{TOKEN}'\n")
    git(wt, "add", "clean.py")
    capture = StatCaches(Store(tmp_path / "home")).worktree(wt).capture()
    assert found_paths(capture.secrets) == {"clean.py"}


def test_without_a_commit_every_seeded_file_is_scanned(tmp_path: Path) -> None:
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "a.py").write_text(f"k = '{TOKEN}'\n")
    (wt / "b.py").write_text("clean\n")
    git(wt, "add", "-A")
    capture = StatCaches(Store(tmp_path / "home")).worktree(wt).capture()
    assert found_paths(capture.secrets) == {"a.py"}


def test_an_unreadable_head_scans_every_seeded_file(tmp_path: Path,
                                                    caplog: pytest.LogCaptureFixture) -> None:
    wt = repo_with_history(tmp_path / "wt")
    # HEAD names a commit the repository does not have: the comparison cannot be made.
    (wt / ".git" / "refs" / "heads" / "main").write_text("1" * 40 + "\n")
    with caplog.at_level(logging.WARNING, logger="snapshotd.seeding"):
        capture = StatCaches(Store(tmp_path / "home")).worktree(wt).capture()
    assert found_paths(capture.secrets) == {"committed.py"}
    assert "every seeded file is scanned" in caplog.text


def test_a_plain_directory_scans_every_file_on_its_first_capture(tmp_path: Path) -> None:
    wt = tmp_path / "plain"
    wt.mkdir()
    (wt / "a.py").write_text(f"k = '{TOKEN}'\n")
    (wt / "b.py").write_text("clean\n")
    capture = StatCaches(Store(tmp_path / "home")).worktree(wt).capture()
    assert found_paths(capture.secrets) == {"a.py"}


def test_a_committed_credential_file_still_leaves_the_cache(tmp_path: Path) -> None:
    wt = repo_with_history(tmp_path / "wt")
    (wt / "deploy").mkdir()
    (wt / "deploy" / ".env").write_text("A=1\n")
    (wt / "server.pem").write_text(PRIVATE_KEY)
    git(wt, "add", "-A")
    git(wt, "commit", "-qm", "credentials, as happens")
    capture = StatCaches(Store(tmp_path / "home")).worktree(wt).capture()
    skipped = {s["path"]: s["kind"] for s in capture.skipped if s["reason"] == "secret"}
    assert skipped == {"deploy/.env": "env-file", "server.pem": "private-key"}


def test_secret_files_among_agrees_with_secret_file_kind(tmp_path: Path) -> None:
    (tmp_path / "keys").mkdir()
    (tmp_path / "keys" / "server.pem").write_text(PRIVATE_KEY)
    (tmp_path / "cert.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    (tmp_path / "sa.json").write_text('{"private_key": "-----BEGIN PRIVATE KEY-----"}')
    (tmp_path / "package.json").write_text('{"name": "x"}')
    names = [".env", "a/.env", ".env.local", "x/.env.example", "x/.ENV", "id_rsa",
             "d/id_ed25519.pub", "d/id_ecdsa", "k.KEY", "a.p12", "b.PFX", ".netrc", "_netrc",
             ".aws/credentials", "q/.aws/config", "x.aws/credentials", "keys/server.pem",
             "cert.pem", ".npmrc", "sa.json", "package.json", ".kube/config",
             "kubeconfig-prod", "x.Kubeconfig", "normal.txt", "env", "a.env", ".envrc",
             "keys/x.txt", "\u0130\u0130/.env", "line\nbreak/.env", "line\nbreak.txt",
             "tail.key"]
    expected = {n for n in names if secret_file_kind(n, tmp_path / n)}
    assert {".env", "keys/server.pem", "sa.json", "line\nbreak/.env", "tail.key"} <= expected
    assert sorted(secret_files_among(tmp_path, names)) == sorted(expected)
    assert secret_files_among(tmp_path, []) == []


def test_index_paths_lists_a_cache_and_says_when_it_cannot(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    wt = repo_with_history(tmp_path / "wt")
    (wt / "sp ace" / "n\u00e9").mkdir(parents=True)
    (wt / "sp ace" / "n\u00e9" / "f.txt").write_text("x\n")
    git(wt, "add", "-A")
    assert index_paths(wt / ".git") == ["clean.py", "committed.py", "sp ace/n\u00e9/f.txt"]
    with caplog.at_level(logging.WARNING, logger="snapshotd.seeding"):
        assert index_paths(tmp_path / "not-a-git-dir") is None
    assert "could not list the index" in caplog.text


def test_scan_reads_past_its_first_buffer_up_to_the_limit(tmp_path: Path) -> None:
    inside = tmp_path / "inside.txt"
    inside.write_bytes(b"a\n" * (100 << 10) + f"k = '{TOKEN}'\n".encode())
    assert scan_file(inside) == [{"line": (100 << 10) + 1, "kind": "openai"}]
    beyond = tmp_path / "beyond.txt"
    beyond.write_bytes(b"a" * SCAN_MAX_BYTES + f"\nk = '{TOKEN}'\n".encode())
    assert scan_file(beyond) == []  # past the documented limit


@pytest.mark.parametrize(("text", "expected"), [
    ("Authorization: Bearer Bearer ab12cd34ef56gh78ij90", [("bearer", 29)]),
    ("Bearer ab12cd34ef56gh78ij90 token Zq8Xw7Vu6Ts5Rp4q", [("bearer", 7), ("bearer", 34)]),
    ("xBearer ab12cd34ef56gh78ij90", [("bearer", 8)]),
    # A joined name ending in a keyword is a secret's name (PGPASSWORD, HFTOKEN): found once.
    ("tokentoken = a1B2c3D4e5F6g7H8i9", [("assignment", 13)]),
    ("api_key = a1B2c3D4e5F6g7H8i9\nDB_PASSWORD: Zq8Xw7Vu", [("assignment", 10),
                                                           ("assignment", 42)]),
])
def test_bearer_and_assignment_are_found_where_they_start(
        tmp_path: Path, text: str, expected: list[tuple[str, int]]) -> None:
    assert find_secrets(text) == expected
    (tmp_path / "f.txt").write_text(text)
    lines = [{"line": text.count("\n", 0, at) + 1, "kind": kind} for kind, at in expected]
    assert scan_file(tmp_path / "f.txt") == lines


def test_an_index_naming_no_credential_file_is_not_listed(tmp_path: Path) -> None:
    wt = repo_with_history(tmp_path / "wt")
    assert index_paths(wt / ".git", may_name_secret_files) == []
    assert index_paths(wt / ".git", lambda data: True) == ["clean.py", "committed.py"]
    (wt / "conf").mkdir()
    (wt / "conf" / "sa.JSON").write_text("{}")
    git(wt, "add", "-A")
    assert "conf/sa.JSON" in index_paths(wt / ".git", may_name_secret_files)
    assert index_paths(tmp_path / "none", may_name_secret_files) == []  # no index file
