"""Replication to a git remote, fetch, restore anywhere and handoff (docs/scale-out.md).

Two daemons with separate homes and sockets stand in for two hosts; a bare repository in the
test's tmp directory is the remote; the git CLI is the oracle for what the remote holds.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from tests.conftest import QUIET_WATCHER, Daemon, Env, git
from tests.support.helpers import wait_for

RUN = "rep-run"
NODE = "build"


class Host:
    """One machine: its own home, socket, daemon and worktrees."""

    def __init__(self, root: Path, remote: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.env = Env(root)
        self.extra = dict(QUIET_WATCHER, SNAPSHOTD_REMOTE=str(remote),
                          SNAPSHOTD_PUSH_INTERVAL_MS="50")
        self.daemon = Daemon(self.env, extra_env=self.extra)  # started by start()

    @property
    def store(self) -> Path:
        return self.env.home / "store.git"

    def start(self) -> Host:
        """Start a daemon with the current ``extra`` (again after a stop or kill -9). Every
        Daemon is stopped when the test ends (conftest), so a Host needs no teardown."""
        self.daemon = Daemon(self.env, extra_env=self.extra).start()
        return self

    def cli(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-m", "snapshotd", *args],
                              env=self.env.environ(**self.extra), capture_output=True,
                              text=True, timeout=60)
        if check and proc.returncode != 0:
            raise AssertionError(f"snapshotd {' '.join(args)} exited {proc.returncode}: "
                                 f"{proc.stderr}")
        return proc

    def snap(self, wt: Path, tool: str, **fields: object) -> dict:
        with self.daemon.client() as c:
            return c.snapshot(str(wt), run_id=RUN, node_id=NODE, tool_use_id=tool,
                              **fields)  # type: ignore[arg-type]

    def status(self) -> dict:
        with self.daemon.client() as c:
            return c.status()["replication"]


@pytest.fixture
def remote(tmp_path: Path) -> Path:
    path = tmp_path / "remote.git"
    subprocess.run(["git", "init", "-q", "--bare", str(path)], check=True)
    return path


@pytest.fixture
def hosts(tmp_path: Path, remote: Path) -> tuple[Host, Host]:
    return Host(tmp_path / "hostA", remote), Host(tmp_path / "hostB", remote)


def remote_refs(remote: Path) -> dict[str, str]:
    if not remote.exists():
        return {}
    out = subprocess.run(["git", "ls-remote", str(remote)], capture_output=True, text=True)
    refs = {}
    for line in out.stdout.splitlines():
        sha, name = line.split("\t")
        refs[name] = sha
    return refs


def local_ref(host: Host, key: str) -> str:
    return git(host.store, "rev-parse", key).strip()


def wait_replicated(host: Host, remote: Path, ref: str, timeout: float = 10.0) -> float:
    """Seconds until the remote's ref equals the host's local ref."""
    started = time.monotonic()
    want = local_ref(host, ref)
    while time.monotonic() - started < timeout:
        if remote_refs(remote).get(ref) == want:
            return time.monotonic() - started
        time.sleep(0.05)
    raise AssertionError(f"{ref} did not reach {remote} within {timeout}s: "
                         f"{remote_refs(remote)} vs {want}; status {host.status()}")


def ref_of(attempt: int = 1) -> str:
    return f"refs/snapshotd/runs/{RUN}/{NODE}/0/{attempt}"


def tree_state(root: Path) -> dict[str, tuple]:
    """Every file and symlink under root (not .git): content, exec bit, link target."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".git"]
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            p = Path(dirpath, name)
            rel = str(p.relative_to(root))
            if p.is_symlink():
                state[rel] = ("link", os.readlink(p))
            else:
                state[rel] = ("file", p.read_bytes(), os.access(p, os.X_OK))
    return state


def populate(wt: Path, n: int) -> None:
    wt.mkdir(parents=True, exist_ok=True)
    (wt / "src").mkdir(exist_ok=True)
    (wt / "src" / "main.py").write_text(f"print('round {n}')\n")
    (wt / "notes.md").write_text("notes\n" * (n + 1))
    tool = wt / "run.sh"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    if not (wt / "link").is_symlink():
        (wt / "link").symlink_to("src/main.py")


# -- replication ---------------------------------------------------------------------------------


def test_captures_replicate_in_the_background(hosts: tuple[Host, Host], remote: Path,
                                              tmp_path: Path) -> None:
    a, _ = hosts
    a.start()
    wt = tmp_path / "wtA"
    seqs = []
    for i in range(3):
        populate(wt, i)
        seqs.append(a.snap(wt, f"toolu_{i}")["seq"])
    assert seqs == [0, 1, 2]
    lag = wait_replicated(a, remote, ref_of())
    assert lag < 10
    # The remote holds the whole chain, every object of it (git itself checks).
    chain = git(remote, "rev-list", ref_of()).split()
    assert len(chain) == 3
    subprocess.run(["git", "-C", str(remote), "fsck", "--strict"], check=True,
                   capture_output=True)
    wait_for(lambda: a.status()["unpushed_checkpoints"] == 0, timeout=5,
             what="nothing left unpushed")
    st = a.status()
    assert st["enabled"] and st["remote"] == str(remote)
    assert st["unpushed_checkpoints"] == 0 and st["attempts"] == []
    assert st["last_error"] is None and st["pushes"] >= 1
    # The stat-cache refs are per host and never replicated.
    assert all(r.startswith("refs/snapshotd/runs/") for r in remote_refs(remote))


def test_remote_down_captures_continue_and_catch_up(tmp_path: Path) -> None:
    remote = tmp_path / "later.git"  # does not exist yet: unreachable
    a = Host(tmp_path / "hostA", remote).start()
    wt = tmp_path / "wtA"
    for i in range(3):
        populate(wt, i)
        assert a.snap(wt, f"toolu_{i}")["seq"] == i  # captures succeed locally
    wait_for(lambda: a.status()["last_error"] is not None, timeout=10,
             what="a failed push")
    first = a.status()
    assert first["unpushed_checkpoints"] == 3
    assert str(remote) in first["last_error"]
    [row] = first["attempts"]
    assert (row["run_id"], row["attempt"], row["unpushed"]) == (RUN, 1, 3)
    time.sleep(0.1)  # let time pass: the lag is measured to the millisecond
    second = a.status()
    assert second["lag_s"] > first["lag_s"]  # lag grows while the remote is away
    assert second["consecutive_failures"] >= 1
    human = a.cli("status").stdout
    assert "3 checkpoint(s) not pushed" in human and "FAILING" in human, human
    assert f"{RUN}/{NODE}/0/1: 3 unpushed" in human
    # The remote appears: everything replicates, nothing lost.
    subprocess.run(["git", "init", "-q", "--bare", str(remote)], check=True)
    wait_replicated(a, remote, ref_of(), timeout=40)
    assert len(git(remote, "rev-list", ref_of()).split()) == 3
    wait_for(lambda: a.status()["unpushed_checkpoints"] == 0, timeout=5,
             what="nothing left unpushed")
    assert f"replicate {remote}  up to date" in a.cli("status").stdout
    # Remote away again, a capture, the daemon stops before it can push: at the next
    # start-up the comparison with the remote finds the ref behind and pushes it.
    moved = tmp_path / "moved.git"
    remote.rename(moved)
    populate(wt, 9)
    assert a.snap(wt, "toolu_9")["seq"] == 3
    assert a.daemon.stop() == 0
    moved.rename(remote)
    assert remote_refs(remote)[ref_of()] != local_ref(a, ref_of())
    a.start()
    wait_replicated(a, remote, ref_of(), timeout=20)
    assert len(git(remote, "rev-list", ref_of()).split()) == 4


# -- fetch and restore anywhere ------------------------------------------------------------------


def test_host_b_fetches_lists_and_restores_byte_for_byte(hosts: tuple[Host, Host],
                                                         remote: Path, tmp_path: Path) -> None:
    a, b = hosts
    a.start()
    wt = tmp_path / "wtA"
    states = []
    for i in range(2):
        populate(wt, i)
        a.snap(wt, f"toolu_{i}")
        states.append(tree_state(wt))
    wait_replicated(a, remote, ref_of())
    b.start()
    # B knows nothing of the run yet.
    assert b.cli("snapshots", RUN, "--json", check=False).returncode != 0
    fetched = json.loads(b.cli("fetch", RUN, "--json").stdout)
    assert fetched["refs"][0]["action"] == "created" and fetched["rebuilt_rows"] == 2
    listing_a = json.loads(a.cli("snapshots", RUN, "--json").stdout)
    listing_b = json.loads(b.cli("snapshots", RUN, "--json").stdout)
    assert [(c["seq"], c["commit"], c["tree"]) for c in listing_b["checkpoints"]] == \
        [(c["seq"], c["commit"], c["tree"]) for c in listing_a["checkpoints"]]
    for seq in (0, 1):
        out = tmp_path / f"onB-{seq}"
        b.cli("restore", RUN, "--node", NODE, "--seq", str(seq), "--to", str(out))
        assert tree_state(out) == states[seq]
    # A second fetch is a no-op.
    again = json.loads(b.cli("fetch", RUN, "--json").stdout)
    assert again["refs"][0]["action"] == "unchanged" and again["rebuilt_rows"] == 0
    # A run the remote does not hold is a clear error.
    missing = b.cli("fetch", "no-such-run", check=False)
    assert missing.returncode == 1 and "holds no checkpoints of run 'no-such-run'" in \
        missing.stderr


def _corrupt_loose_object(repo: Path, oid: str) -> None:
    """Rewrite a loose object so its content no longer hashes to its name."""
    path = repo / "objects" / oid[:2] / oid[2:]
    assert path.exists(), "expected a loose object on the remote"
    body = b"tampered content\n"
    path.chmod(0o644)
    path.write_bytes(zlib.compress(b"blob %d\0" % len(body) + body))


def test_tampered_object_on_remote_is_refused(hosts: tuple[Host, Host], remote: Path,
                                             tmp_path: Path) -> None:
    a, b = hosts
    a.start()
    wt = tmp_path / "wtA"
    populate(wt, 0)
    commit = a.snap(wt, "toolu_0")["commit"]
    wait_replicated(a, remote, ref_of())
    blob = git(a.store, "rev-parse", f"{commit}:src/main.py").strip()
    _corrupt_loose_object(remote, blob)
    b.start()
    proc = b.cli("fetch", RUN, check=False)
    assert proc.returncode == 1
    assert "could not fetch" in proc.stderr and str(remote) in proc.stderr
    # Nothing was adopted: no ref, no rows, nothing to restore.
    assert git(b.store, "for-each-ref", "refs/snapshotd/runs/").strip() == ""
    assert git(b.store, "for-each-ref", "refs/snapshotd-fetch/").strip() == ""
    assert b.cli("snapshots", RUN, "--json", check=False).returncode != 0
    out = tmp_path / "never"
    assert b.cli("restore", RUN, "--node", NODE, "--to", str(out), check=False).returncode != 0
    assert not out.exists()


def _drop_local_checkpoints(host: Host) -> None:
    """The host's store loses its checkpoint commits (a lost disk, a fresh cache)."""
    git(host.store, "update-ref", "-d", ref_of())
    for ref in git(host.store, "for-each-ref", "--format=%(refname)").split():
        git(host.store, "update-ref", "-d", ref)
    git(host.store, "reflog", "expire", "--expire=now", "--all")
    git(host.store, "gc", "-q", "--prune=now")


def test_restore_anywhere_fetches_verifies_and_refuses_forgeries(hosts: tuple[Host, Host],
                                                                 remote: Path,
                                                                 tmp_path: Path) -> None:
    a, _ = hosts
    a.start()
    wt = tmp_path / "wtA"
    populate(wt, 0)
    a.snap(wt, "toolu_0")
    populate(wt, 1)
    honest = a.snap(wt, "toolu_1")["commit"]
    want = tree_state(wt)
    wait_replicated(a, remote, ref_of())
    assert a.daemon.stop() == 0
    _drop_local_checkpoints(a)
    assert subprocess.run(["git", "-C", str(a.store), "cat-file", "-e", honest]).returncode != 0
    # The remote's ref is moved to a forged commit: same trailers, other content.
    message = git(remote, "log", "-1", "--format=%B", honest)
    forged_tree = git(remote, "rev-parse", f"{honest}~1^{{tree}}").strip()
    parent = git(remote, "rev-parse", f"{honest}~1").strip()
    forged = git(remote, "commit-tree", forged_tree, "-p", parent, "-m", message).strip()
    git(remote, "update-ref", ref_of(), forged)
    out = tmp_path / "restored"
    proc = a.cli("restore", RUN, "--node", NODE, "--to", str(out), check=False)
    assert proc.returncode == 1
    assert "exists nowhere reachable" in proc.stderr
    assert str(a.store) in proc.stderr and str(remote) in proc.stderr
    assert "the ledger records" in proc.stderr  # the forgery was named, not adopted
    assert not out.exists()
    # Put the honest commit back: the restore fetches it, checks it, and gives A's tree.
    git(remote, "update-ref", ref_of(), honest)
    a.cli("restore", RUN, "--node", NODE, "--to", str(out))
    assert tree_state(out) == want
    assert local_ref(a, ref_of()) == honest  # the ref came back, forward only
    # Nowhere at all: no remote configured and no local commit.
    _drop_local_checkpoints(a)
    proc = subprocess.run([sys.executable, "-m", "snapshotd", "restore", RUN, "--node", NODE,
                           "--to", str(tmp_path / "nowhere")], capture_output=True, text=True,
                          env=a.env.environ(**dict(a.extra, SNAPSHOTD_REMOTE="")))
    assert proc.returncode == 1 and "no remote is configured" in proc.stderr


# -- handoff -------------------------------------------------------------------------------------


def test_handoff_manifest_round_trip(hosts: tuple[Host, Host], remote: Path,
                                     tmp_path: Path) -> None:
    a, b = hosts
    a.start()
    wt = tmp_path / "wtA"
    wt.mkdir()
    a.cli("attempt", "begin", "--run", RUN, "--node", NODE, "--cwd", str(wt), "--json")
    for i in range(2):
        populate(wt, i)
        a.snap(wt, f"toolu_{i}")
    want = tree_state(wt)
    wait_replicated(a, remote, ref_of())
    manifest_file = tmp_path / "handoff.json"
    printed = json.loads(a.cli("handoff", RUN, "--node", NODE, "--to", "hostB", "--output",
                               str(manifest_file), "--json").stdout)
    manifest = json.loads(manifest_file.read_text())
    assert manifest == printed
    assert (manifest["format"], manifest["version"]) == ("snapshotd-handoff", 1)
    assert (manifest["run_id"], manifest["node_id"], manifest["iteration"],
            manifest["attempt"]) == (RUN, NODE, 0, 1)
    assert manifest["owner"]["state"] == "active" and manifest["epoch"] >= 1
    assert manifest["to"] == "hostB"
    cp = manifest["checkpoint"]
    assert cp["commit"] == local_ref(a, ref_of()) and cp["seq"] == 1
    assert cp["tree"] == git(a.store, "rev-parse", f"{cp['commit']}^{{tree}}").strip()
    assert manifest["replication"]["replicated"] is True
    assert manifest["gaps"] == [] and "--handoff FILE" in manifest["next_action"]
    b.start()
    # An edited manifest is refused by its digest before anything happens.
    edited = dict(manifest, checkpoint=dict(cp, tree="0" * 40))
    bad_file = tmp_path / "edited.json"
    bad_file.write_text(json.dumps(edited))
    wt_b = tmp_path / "wtB"
    wt_b.mkdir()
    proc = b.cli("attempt", "begin", "--run", RUN, "--node", NODE, "--cwd", str(wt_b),
                 "--resume", "--handoff", str(bad_file), check=False)
    assert proc.returncode != 0 and "digest" in proc.stderr
    assert list(wt_b.iterdir()) == []
    # A resealed manifest naming a commit that exists nowhere is refused too.
    from snapshotd.features.replication.replication import manifest_digest

    forged = dict(manifest, checkpoint=dict(cp, commit="1" * 40))
    forged["digest"] = manifest_digest(forged)
    bad_file.write_text(json.dumps(forged))
    proc = b.cli("attempt", "begin", "--run", RUN, "--node", NODE, "--cwd", str(wt_b),
                 "--resume", "--handoff", str(bad_file), check=False)
    assert proc.returncode != 0 and "exists nowhere reachable" in proc.stderr
    assert list(wt_b.iterdir()) == []
    # The real one: B verifies, fetches, restores, begins attempt 2.
    began = json.loads(b.cli("attempt", "begin", "--run", RUN, "--node", NODE, "--cwd",
                             str(wt_b), "--resume", "--handoff", str(manifest_file),
                             "--json").stdout)
    assert began["attempt"] == 2 and began["state"] == "active"
    assert began["resumed_from"]["commit"] == cp["commit"]
    assert began["handoff"]["verified"] == {"commit": cp["commit"], "tree": cp["tree"],
                                            "seq": 1, "attempt": 1,
                                            "digest": manifest["digest"]}
    assert tree_state(wt_b) == want
    # B's own captures replicate under B's attempt ref, beside A's.
    (wt_b / "notes.md").write_text("continued on B\n")
    with b.daemon.client() as c:
        assert c.snapshot(str(wt_b), run_id=RUN, node_id=NODE, attempt=2)["seq"] == 0
    wait_replicated(b, remote, ref_of(2))
    assert remote_refs(remote)[ref_of(1)] == cp["commit"]


# -- two hosts sharing only the PostgreSQL ledger and the remote ---------------------------------



def test_host_b_takes_over_from_killed_host_a_and_fences_it(tmp_path: Path, remote: Path,
                                                            pg_url: str) -> None:  # noqa: F811
    from tests.conftest import claude_payload, run_hook

    a = Host(tmp_path / "hostA", remote)
    b = Host(tmp_path / "hostB", remote)
    for h in (a, b):
        h.extra["SNAPSHOTD_LEDGER_URL"] = pg_url
    a.start()
    wt = tmp_path / "wtA"
    wt.mkdir()
    a.cli("attempt", "begin", "--run", RUN, "--node", NODE, "--cwd", str(wt))
    hook_env = {"SNAPSHOTD_RUN_ID": RUN, "SNAPSHOTD_NODE_ID": NODE, "SNAPSHOTD_ATTEMPT": "1"}
    for i in range(2):
        populate(wt, i)
        assert run_hook(a.env, claude_payload(wt, f"toolu_{i}"), **hook_env).returncode == 0
    acknowledged = tree_state(wt)
    wait_replicated(a, remote, ref_of())
    (wt / "notes.md").write_text("written after the last checkpoint\n")
    a.daemon.kill9()
    b.start()
    # B shares only PostgreSQL and the remote: it writes the handoff from the shared
    # ledger and resumes from it (fetching A's checkpoint, verifying it).
    manifest = tmp_path / "handoff.json"
    b.cli("handoff", RUN, "--node", NODE, "--to", "hostB", "--output", str(manifest))
    wt_b = tmp_path / "wtB"
    wt_b.mkdir()
    began = json.loads(b.cli("attempt", "begin", "--run", RUN, "--node", NODE, "--cwd",
                             str(wt_b), "--resume", "--handoff", str(manifest),
                             "--json").stdout)
    assert began["attempt"] == 2 and began["resumed_from"]["seq"] == 1
    assert began["handoff"]["fenced"] == f"{RUN}/{NODE}/0/1"
    assert tree_state(wt_b) == acknowledged
    populate(wt_b, 5)
    with b.daemon.client() as c:
        assert c.snapshot(str(wt_b), run_id=RUN, node_id=NODE, attempt=2)["seq"] == 0
    b_rows = json.loads(b.cli("snapshots", RUN, "--attempt", "2", "--json").stdout)
    # A comes back: its hooks for attempt 1 are fenced, B's seqs untouched.
    a.start()
    assert run_hook(a.env, claude_payload(wt, "toolu_late"), **hook_env).returncode == 0
    assert [g["reason"] for g in a.env.read_gaps() if g.get("tool_use_id") == "toolu_late"] \
        == ["fenced"]
    after = json.loads(b.cli("snapshots", RUN, "--attempt", "2", "--json").stdout)
    assert after["checkpoints"] == b_rows["checkpoints"]
    seqs_1 = [c["seq"] for c in json.loads(a.cli("snapshots", RUN, "--attempt", "1",
                                                  "--json").stdout)["checkpoints"]]
    assert seqs_1 == [0, 1]


def _two_hosts_on(tmp_path: Path, remote: Path, pg_url: str,
                  b_extra: dict[str, str] | None = None) -> tuple[Host, Host]:
    a = Host(tmp_path / "hostA", remote)
    b = Host(tmp_path / "hostB", remote)
    for h, more in ((a, {}), (b, b_extra or {})):
        h.extra.update(SNAPSHOTD_LEDGER_URL=pg_url, **more)
    return a, b


def test_same_tool_id_racing_on_two_hosts_is_one_checkpoint(tmp_path: Path, remote: Path,
                                                            pg_url: str) -> None:
    """Both daemons pass the "already recorded?" check for one tool call; B is held between
    its commit and its row, so A's row lands first. B answers with A's seq (a repeat), its
    own commit is undone, and its next capture continues the attempt normally. Only an
    attempt with no host (a row made before ledger schema 5) is served by both daemons: one
    with a host is refused by the other (tests/service/test_shared_ledger_hosts.py)."""
    import threading

    import psycopg

    a, b = _two_hosts_on(tmp_path, remote, pg_url, {"SNAPSHOTD_DELAY_AT": "before-row:800"})
    a.start()
    b.start()
    wt = tmp_path / "wt"
    populate(wt, 0)
    a.cli("attempt", "begin", "--run", RUN, "--node", NODE, "--cwd", str(wt))
    with psycopg.connect(pg_url) as conn:  # as a row from before schema 5: no host
        conn.execute("UPDATE attempts SET host = NULL")
    replies: dict[str, dict] = {}

    def from_b() -> None:
        replies["b"] = b.snap(wt, "toolu_race", attempt=1)

    t = threading.Thread(target=from_b)
    t.start()
    time.sleep(0.4)  # B is now waiting before its row
    replies["a"] = a.snap(wt, "toolu_race", attempt=1)
    t.join(30)
    assert replies["a"]["seq"] == 0 and not replies["a"].get("repeated")
    assert replies["b"]["seq"] == 0 and replies["b"]["repeated"] is True
    assert replies["b"]["commit"] == replies["a"]["commit"]
    rows = json.loads(a.cli("snapshots", RUN, "--json").stdout)["checkpoints"]
    assert [(r["seq"], r["tool_use_id"]) for r in rows] == [(0, "toolu_race")]
    # B's refused commit is gone from its ref: the attempt has no local tip on B.
    assert git(b.store, "for-each-ref", ref_of()).strip() == ""
    assert [g for g in b.env.read_gaps() if g.get("tool_use_id") == "toolu_race"] == []


def test_concurrent_captures_of_two_attempts_on_two_hosts_never_collide(
        tmp_path: Path, remote: Path, pg_url: str) -> None:
    import threading

    a, b = _two_hosts_on(tmp_path, remote, pg_url)
    a.start()
    b.start()
    wts = {h: tmp_path / f"wt-{name}" for h, name in ((a, "a"), (b, "b"))}
    for i, (h, wt) in enumerate(wts.items()):
        populate(wt, 0)
        h.cli("attempt", "begin", "--run", RUN, "--node", f"{NODE}{i}", "--cwd", str(wt))
    got: dict[Host, list[int]] = {a: [], b: []}
    errors: list[BaseException] = []

    def loop(h: Host, node: str) -> None:
        try:
            with h.daemon.client() as c:
                for n in range(25):
                    populate(wts[h], n + 1)
                    got[h].append(c.snapshot(str(wts[h]), run_id=RUN, node_id=node,
                                             tool_use_id=f"t{n}")["seq"])
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=loop, args=(h, f"{NODE}{i}"))
               for i, h in enumerate((a, b))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert got[a] == list(range(25)) and got[b] == list(range(25))
    rows = json.loads(a.cli("snapshots", RUN, "--all", "--json").stdout)["checkpoints"]
    keys = [(r["node_id"], r["attempt"], r["seq"]) for r in rows]
    assert len(keys) == len(set(keys)) == 50


def test_plain_resume_on_another_host_fences_the_attempt_still_active_there(
        tmp_path: Path, remote: Path, pg_url: str) -> None:
    """No handoff file: B resumes the node from the shared ledger and the remote while A's
    attempt is still active (A is alive). A is superseded first, so its next hook is fenced and
    B started from A's newest checkpoint."""
    from tests.conftest import claude_payload, run_hook

    a, b = _two_hosts_on(tmp_path, remote, pg_url)
    a.start()
    b.start()
    wt = tmp_path / "wtA"
    populate(wt, 0)
    a.cli("attempt", "begin", "--run", RUN, "--node", NODE, "--cwd", str(wt))
    hook_env = {"SNAPSHOTD_RUN_ID": RUN, "SNAPSHOTD_NODE_ID": NODE, "SNAPSHOTD_ATTEMPT": "1"}
    for i in range(2):
        populate(wt, i + 1)
        assert run_hook(a.env, claude_payload(wt, f"toolu_{i}"), **hook_env).returncode == 0
    acknowledged = tree_state(wt)
    wait_replicated(a, remote, ref_of())
    wt_b = tmp_path / "wtB"
    wt_b.mkdir()
    began = json.loads(b.cli("attempt", "begin", "--run", RUN, "--node", NODE, "--cwd",
                             str(wt_b), "--resume", "--json").stdout)
    assert began["attempt"] == 2
    assert began["resumed_from"]["seq"] == 1
    assert began["resumed_from"]["fenced"] == f"{RUN}/{NODE}/0/1"
    assert tree_state(wt_b) == acknowledged
    populate(wt, 9)
    assert run_hook(a.env, claude_payload(wt, "toolu_late"), **hook_env).returncode == 0
    assert [g["reason"] for g in a.env.read_gaps()
            if g.get("tool_use_id") == "toolu_late"] == ["fenced"]
    rows = json.loads(b.cli("snapshots", RUN, "--all", "--json").stdout)["checkpoints"]
    assert [(r["attempt"], r["seq"]) for r in rows if r["attempt"] == 1] == [(1, 0), (1, 1)]
