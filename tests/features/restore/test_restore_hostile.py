"""Restore, diff and their replies under hostile input: targets reached through symbolic links,
worktrees whose parent became a link, file names that are not UTF-8, replies too large for one
frame. A real daemon, real git worktrees, bytes on disk compared."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from snapshotd.core.config import load_config
from snapshotd.core.errors import ServiceError
from snapshotd.features.restore.restore import restore_checkpoint
from snapshotd.service.service import Service
from tests.conftest import Daemon, Env, git, make_git_worktree

pytestmark = pytest.mark.one_ledger("links, odd names and reply sizes in restore and diff")

NAME = b"caf\xe9.txt"  # Latin-1 bytes: not UTF-8
DIR = b"d\xff\xfe"


def cli(env: Env, *args: str) -> subprocess.CompletedProcess:
    """The CLI with byte output (what it prints for a name that is not UTF-8 is under test)."""
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(),
                          capture_output=True, timeout=120)


def ok(proc: subprocess.CompletedProcess) -> bytes:
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")
    return proc.stdout


def capture(daemon: Daemon, wt: Path) -> dict:
    with daemon.client() as c:
        return c.snapshot(str(wt), run_id="r", node_id="n")


def end_attempt(daemon: Daemon) -> None:
    with daemon.client() as c:
        c.attempt_end("r", "n")


def tree_bytes(root: bytes) -> dict[bytes, bytes]:
    """Every regular file under root (not .git), by its byte path: the oracle for odd names."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != b".git"]
        for name in filenames:
            full = os.path.join(dirpath, name)
            with open(full, "rb") as f:
                out[os.path.relpath(full, root)] = f.read()
    return out


def run_printed(env: Env, command: str) -> subprocess.CompletedProcess:
    argv = shlex.split(command)
    assert argv[0] == "snapshotd"
    return cli(env, *argv[1:])


# -- --to: where the target resolves -------------------------------------------------------------


def test_to_through_a_symlinked_parent_into_the_home_is_refused(sd_env: Env, daemon: Daemon,
                                                                tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "f.txt").write_text("one\n")
    capture(daemon, wt)
    link = tmp_path / "innocent"
    os.symlink(sd_env.home, link)
    refs_before = sorted(p.name for p in (sd_env.home / "store.git" / "refs").iterdir())
    home_before = sorted(p.name for p in sd_env.home.iterdir())
    for target in (link / "store.git" / "refs" / "evil", link / "fresh", link / "a" / "b"):
        proc = cli(sd_env, "restore", "r", "--node", "n", "--to", str(target))
        assert proc.returncode == 1, proc.stdout
        assert b"snapshotd home" in proc.stderr
        dry = cli(sd_env, "restore", "r", "--node", "n", "--to", str(target), "--dry-run")
        assert dry.returncode == 1 and b"snapshotd home" in dry.stderr
    assert sorted(p.name for p in (sd_env.home / "store.git" / "refs").iterdir()) == refs_before
    assert sorted(p.name for p in sd_env.home.iterdir()) == home_before
    # The final component a link into the home: refused the same way.
    os.symlink(sd_env.home / "store.git" / "refs", tmp_path / "last")
    proc = cli(sd_env, "restore", "r", "--node", "n", "--to", str(tmp_path / "last"))
    assert proc.returncode == 1 and b"snapshotd home" in proc.stderr


def test_to_through_a_legitimate_symlink_lands_where_it_resolves(sd_env: Env, daemon: Daemon,
                                                                 tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    wt.mkdir()
    (wt / "f.txt").write_text("one\n")
    capture(daemon, wt)
    real = tmp_path / "private" / "tmp"
    real.mkdir(parents=True)
    os.symlink(real, tmp_path / "tmp")  # as /tmp -> /private/tmp on macOS
    out = json.loads(ok(cli(sd_env, "restore", "r", "--node", "n", "--to",
                            str(tmp_path / "tmp" / "a" / "out"), "--json")))
    assert out["target"] == str(real / "a" / "out")
    assert (real / "a" / "out" / "f.txt").read_text() == "one\n"


def test_to_refuses_a_component_that_became_a_link_after_resolution(sd_env: Env,
                                                                    tmp_path: Path) -> None:
    """The writer walks the resolved path from / without following links: a component swapped
    for a link after the request was checked stops it before anything is created there."""
    outside = tmp_path / "outside"
    outside.mkdir()
    base = tmp_path / "base"
    (base / "sub").mkdir(parents=True)
    from snapshotd.features.restore.apply import open_confined

    os.close(open_confined(base / "sub", create=False))
    (base / "sub").rmdir()
    os.symlink(outside, base / "sub")
    with pytest.raises(OSError):
        open_confined(base / "sub" / "new", create=True)
    assert list(outside.iterdir()) == []


# -- in place: a worktree whose parent became a link ---------------------------------------------


@pytest.mark.parametrize("outside_has_worktree", [False, True])
def test_in_place_through_a_parent_turned_link_touches_nothing_outside(
        sd_env: Env, tmp_path: Path, outside_has_worktree: bool) -> None:
    wt = tmp_path / "p" / "wt"
    wt.mkdir(parents=True)
    (wt / "f.txt").write_text("checkpoint\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    if outside_has_worktree:
        (outside / "wt").mkdir()
        (outside / "wt" / "f.txt").write_text("someone else's\n")
    service = Service(sd_env.home, load_config(environ=_ledger_env(sd_env)))
    try:
        service.snapshot({"cwd": str(wt), "run_id": "r", "node_id": "n"})
        os.rename(tmp_path / "p", tmp_path / "p-moved")
        os.symlink(outside, tmp_path / "p")
        before = tree_bytes(os.fsencode(outside))
        with pytest.raises(ServiceError) as err:
            restore_checkpoint(service, run_id="r", node_id="n", seq=0, force=True)
        assert err.value.code == "restore-failed"
        assert "symbolic link" in err.value.message and "nothing was changed" in err.value.message
        with pytest.raises(ServiceError):  # a dry run is refused the same way
            restore_checkpoint(service, run_id="r", node_id="n", seq=0, dry_run=True)
    finally:
        service.close()
    assert tree_bytes(os.fsencode(outside)) == before
    assert os.path.isdir(outside / "wt") == outside_has_worktree
    # No safety checkpoint was taken of what the link leads to.
    assert [c["seq"] for c in service_rows(sd_env)] == [0]


def service_rows(env: Env) -> list[dict]:
    return env.ledger_query("SELECT seq FROM checkpoints ORDER BY seq")


# -- names that are not UTF-8 --------------------------------------------------------------------


@pytest.fixture
def odd_worktree(tmp_path: Path) -> Path:
    wt = make_git_worktree(tmp_path / "wt")
    root = os.fsencode(wt)
    with open(root + b"/" + NAME, "wb") as f:
        f.write(b"zero\n")
    os.mkdir(root + b"/" + DIR)
    with open(root + b"/" + DIR + b"/in\x80side", "wb") as f:
        f.write(b"inner zero\n")
    (wt / "plain.txt").write_text("plain zero\n")
    git(wt, "add", "-A")
    git(wt, "commit", "-q", "-m", "init")
    return wt


def test_names_that_are_not_utf8_restore_in_place_to_and_diff(sd_env: Env, daemon: Daemon,
                                                              odd_worktree: Path,
                                                              tmp_path: Path) -> None:
    wt = odd_worktree
    root = os.fsencode(wt)
    cp0 = capture(daemon, wt)
    end_attempt(daemon)
    state0 = tree_bytes(root)
    assert NAME in state0 and DIR + b"/in\x80side" in state0
    with open(root + b"/" + NAME, "wb") as f:
        f.write(b"one\n")
    os.unlink(root + b"/" + DIR + b"/in\x80side")
    with open(root + b"/new\xfe", "wb") as f:
        f.write(b"new\n")

    # In place, through the daemon: applied, reported, and the undo printed.
    out = json.loads(ok(cli(sd_env, "restore", "r", "--node", "n", "--seq", "0", "--json")))
    assert out["applied"] and out["undo_command"], out
    changed = tree_bytes(root)
    assert tree_bytes(root) == state0
    paths = {p["path"]: p["op"] for p in out["plan"]}
    assert paths == {os.fsdecode(NAME): "M", os.fsdecode(DIR + b"/in\x80side"): "A",
                     os.fsdecode(b"new\xfe"): "D"}
    undo = run_printed(sd_env, out["undo_command"])
    ok(undo)
    changed = tree_bytes(root)
    assert changed[NAME] == b"one\n" and b"new\xfe" in changed
    # Text output: the name, its odd bytes shown as \xNN escapes.
    text = ok(cli(sd_env, "restore", "r", "--node", "n", "--seq", "0", "--dry-run"))
    assert b"M caf\\xe9.txt\n" in text and b"D new\\xfe\n" in text

    # --to: the same bytes in a new directory.
    fresh = tmp_path / "fresh"
    to = json.loads(ok(cli(sd_env, "restore", "r", "--node", "n", "--seq", "0", "--to",
                           str(fresh), "--json")))
    assert to["applied"] and tree_bytes(os.fsencode(fresh)) == state0
    assert os.fsdecode(NAME) in {p["path"] for p in to["plan"]}
    # A --to path that is not UTF-8 cannot travel in a request: refused by name, nothing made.
    odd_to = os.fsencode(tmp_path) + b"/out\xe9"
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "restore", "r", "--node", "n",
                           "--to", odd_to], env=sd_env.environ(), capture_output=True,
                          timeout=120)
    assert proc.returncode == 1 and b"not UTF-8" in proc.stderr, proc.stderr
    assert not os.path.lexists(odd_to)

    # diff: against the worktree and between checkpoints, as JSON and as text.
    d = json.loads(ok(cli(sd_env, "diff", "r", "--node", "n", "--seq", "0", "--worktree",
                          "--json")))
    assert {f["path"] for f in d["files"]} == {os.fsdecode(p) for p in
                                              (NAME, DIR + b"/in\x80side", b"new\xfe")}
    ns = ok(cli(sd_env, "diff", "r", "--node", "n", "--seq", "0", "--worktree",
                "--name-status"))
    assert b"M\tcaf\\xe9.txt\n" in ns
    patch = ok(cli(sd_env, "diff", "r", "--node", "n", "--seq", "0", "--worktree"))
    assert b"-zero\n+one\n" in patch
    assert cp0["seq"] == 0


def test_json_output_escapes_what_is_not_utf8(sd_env: Env, daemon: Daemon, odd_worktree: Path) -> None:
    """--json is ASCII-safe for odd names: ``\\udcXX`` per byte, which ``os.fsencode`` of the
    parsed string turns back into the name's bytes."""
    capture(daemon, odd_worktree)
    end_attempt(daemon)
    raw = ok(cli(sd_env, "restore", "r", "--node", "n", "--seq", "0", "--dry-run", "--json",
                 "--to", str(odd_worktree.parent / "x")))
    raw.decode("utf-8")  # strict: the output is valid UTF-8
    assert b"caf\\udce9.txt" in raw
    plan = json.loads(raw)["plan"]
    assert NAME in {os.fsencode(p["path"]) for p in plan}


def test_snapshots_json_lists_a_checkpoint_whose_skipped_files_are_not_utf8(
        sd_env: Env, daemon: Daemon, odd_worktree: Path) -> None:
    root = os.fsencode(odd_worktree)
    with open(root + b"/big\xe9.bin", "wb") as f:
        f.truncate(200 * 1024 * 1024)  # sparse, over the default size cap: skipped
    cp = capture(daemon, odd_worktree)
    assert cp["seq"] == 0
    listing = cli(sd_env, "snapshots", "r", "--json")
    runs = cli(sd_env, "runs")
    assert runs.returncode == 0, runs.stderr
    assert listing.returncode == 0, listing.stderr
    listing.stdout.decode("utf-8")
    assert json.loads(listing.stdout)["checkpoints"][0]["seq"] == 0


# -- replies that do not fit -----------------------------------------------------------------


def test_an_applied_restore_whose_plan_overflows_a_frame_still_returns_its_undo(
        sd_env: Env, daemon: Daemon, tmp_path: Path) -> None:
    wt = tmp_path / "wt"
    deep = wt.joinpath(*[f"{i:02d}" + "d" * 200 for i in range(15)])
    deep.mkdir(parents=True)
    names = [f"{i:04d}" + "f" * 200 for i in range(400)]  # ~3.2 KB paths: 1.3 MB of plan
    for n in names:
        (deep / n).write_text("zero\n")
    capture(daemon, wt)
    end_attempt(daemon)
    for n in names:
        (deep / n).write_text("one\n")
    out = json.loads(ok(cli(sd_env, "restore", "r", "--node", "n", "--seq", "0", "--json")))
    assert out["applied"] and out["undo_command"]
    assert out["plan_total"] == 400 and out["plan_truncated"]
    assert all((deep / n).read_text() == "zero\n" for n in names)
    ok(run_printed(sd_env, out["undo_command"]))
    assert all((deep / n).read_text() == "one\n" for n in names)
    # A dry run pages the whole plan in frames that fit.
    dry = ok(cli(sd_env, "restore", "r", "--node", "n", "--seq", "0", "--dry-run"))
    assert len(dry.splitlines()) == 400


# -- the wire ------------------------------------------------------------------------------------


def test_text_that_is_not_utf8_travels_as_an_extension_and_comes_back_the_same() -> None:
    import socket

    import msgpack

    from snapshotd_client.protocol import EXT_FS_TEXT, decode_body, encode_frame, read_frame

    odd = os.fsdecode(b"caf\xe9/" + DIR)
    message = {"result": {"plan": [{"path": odd, "op": "M"}], odd: [odd, "plain"]}}
    frame = encode_frame(message)
    # Standard msgpack: an extension value holding the name's bytes, no invalid UTF-8 str.
    raw = msgpack.unpackb(frame[4:], raw=False, strict_map_key=False)
    assert raw["result"]["plan"][0]["path"] == msgpack.ExtType(EXT_FS_TEXT, os.fsencode(odd))
    a, b = socket.socketpair()
    with a, b:
        a.sendall(frame)
        assert read_frame(b) == message  # a client reads the same str back
    # The daemon reading a request leaves it an extension value, which no field accepts.
    assert isinstance(decode_body(frame[4:])["result"]["plan"][0]["path"], msgpack.ExtType)


def test_a_reply_that_cannot_fit_keeps_the_undo_and_says_so(
        caplog: pytest.LogCaptureFixture) -> None:
    from snapshotd.features.restore.restore import fit_reply

    result = {"run_id": "r", "node_id": "n", "iteration": 0, "attempt": 1, "seq": 0,
              "commit": "c" * 40, "mode": "in-place", "dry_run": False, "applied": True,
              "undo_command": "snapshotd restore r --node n --seq 3 --force",
              "safety": {"seq": 3}, "counts": {"A": 0, "M": 300, "D": 0},
              "plan": [{"op": "M", "path": f"{i:04d}" + "p" * 4000} for i in range(300)],
              "kept": [], "plan_total": 300}
    assert fit_reply({**result, "plan": result["plan"][:2]})["plan"]  # fits: unchanged
    with caplog.at_level("WARNING", logger="snapshotd.restore"):
        out = fit_reply(result)
    assert out["undo_command"] == result["undo_command"] and out["safety"] == {"seq": 3}
    assert out["plan"] == [] and out["plan_truncated"] and "exceeds" in out["reply_trimmed"]
    assert any("did not fit" in r.getMessage() for r in caplog.records)


def _ledger_env(env: Env) -> dict[str, str]:
    """The environment that puts a Service built in the test on the test's ledger."""
    return {"SNAPSHOTD_LEDGER_URL": env.ledger_url} if env.ledger_url else {}
