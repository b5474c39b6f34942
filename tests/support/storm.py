"""Rename storms for the chaos engine (tests/support/chaos.py): a worktree whose files keep
moving between two places while checkpoints are asked for, and the oracle that says whether a
checkpoint holds a state that existed.

A storm tree holds files whose content is unique to each, so a tree shows where each one was:
``r<i>.one`` <-> ``r<i>.two`` (a rename in place), ``dirA/`` <-> ``dirB/`` (a directory renamed
whole, its files moving together) and ``left/m<j>`` <-> ``right/m<j>`` (across directories),
beside still filler files that make a scan take a while. The storm (``storm_process``, its own
process) renames in bursts with short pauses; every rename is atomic, so every instant of the
tree has each file exactly once, in one of its two places, the group's all in one directory.
``torn`` names what a tree breaks of that: a checkpoint holding a state that never existed.
``run_storm`` drives one: captures of the chaos world's worktree and, through explicit ids
(``SNAPSHOTD_RUN_ID``), of a second directory, each under its own storm, beside
``git add -A`` + ``write-tree`` into a private git dir of the same worktree."""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tests.support.chaos import _HOOK, FIXTURE, GIT

if TYPE_CHECKING:
    from tests.support.chaos import Chaos

RENAMED = 6  # r<i>.one <-> r<i>.two
GROUP = 12  # dirA/g<j> <-> dirB/g<j>, the directory renamed
MOVERS = 8  # left/m<j> <-> right/m<j>
FILLER_DIRS, FILLER_FILES = 20, 20
SECOND_RUN = "storm-second"  # the explicit-id run of the second directory

# The storm: ``root stop seed pause_ms burst``. It keeps the places itself, so every rename
# finds its source; it stops when ``stop`` exists or its parent is gone.
_STORM = textwrap.dedent("""
    import os, random, sys, time
    root, stop, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    pause, burst = float(sys.argv[4]) / 1000, int(sys.argv[5])
    rng = random.Random(seed)
    parent = os.getppid()
    where = {i: ".one" for i in range(%(renamed)d)}
    group = "dirA"
    movers = {j: "left" for j in range(%(movers)d)}
    while not os.path.exists(stop) and os.getppid() == parent:
        for _ in range(rng.randint(1, burst)):
            roll = rng.random()
            if roll < 0.4:
                i = rng.randrange(%(renamed)d)
                new = ".two" if where[i] == ".one" else ".one"
                os.rename(f"{root}/r{i}{where[i]}", f"{root}/r{i}{new}")
                where[i] = new
            elif roll < 0.6:
                new = "dirB" if group == "dirA" else "dirA"
                os.rename(f"{root}/{group}", f"{root}/{new}")
                group = new
            else:
                j = rng.randrange(%(movers)d)
                new = "right" if movers[j] == "left" else "left"
                os.rename(f"{root}/{movers[j]}/m{j}", f"{root}/{new}/m{j}")
                movers[j] = new
        time.sleep(rng.uniform(0, pause))
""") % {"renamed": RENAMED, "movers": MOVERS}


def _content(tag: str, name: str) -> bytes:
    return f"storm {tag} {name}\n".encode()


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def make_tree(root: Path, tag: str, owner: int | None = None,
              filler: int = FILLER_DIRS) -> dict[str, tuple[str, ...]]:
    """Write a storm tree into ``root`` (``filler`` directories of still files); returns each
    moving file's blob id -> its two places."""
    places: dict[str, tuple[str, ...]] = {}
    files: dict[str, bytes] = {}
    for i in range(RENAMED):
        files[f"r{i}.one"] = data = _content(tag, f"r{i}")
        places[_blob_id(data)] = (f"r{i}.one", f"r{i}.two")
    for j in range(GROUP):
        files[f"dirA/g{j}"] = data = _content(tag, f"g{j}")
        places[_blob_id(data)] = (f"dirA/g{j}", f"dirB/g{j}")
    for j in range(MOVERS):
        files[f"left/m{j}"] = data = _content(tag, f"m{j}")
        places[_blob_id(data)] = (f"left/m{j}", f"right/m{j}")
    for d in range(filler):
        for f in range(FILLER_FILES):
            files[f"fill{d}/f{f}.txt"] = _content(tag, f"fill {d} {f}") * 20
    (root / "right").mkdir(parents=True, exist_ok=True)
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    if owner is not None:
        for dirpath, dirnames, filenames in os.walk(root):
            os.chown(dirpath, owner, owner)
            for name in dirnames + filenames:
                os.lchown(os.path.join(dirpath, name), owner, owner)
    return places


def torn(entries: list[tuple[str, str]], places: dict[str, tuple[str, ...]]) -> str | None:
    """What makes a tree (``(path, blob id)`` pairs) a state the storm never produced, or None:
    a moving file missing, twice, or out of its places, or the group split."""
    seen: dict[str, list[str]] = {blob: [] for blob in places}
    for path, blob in entries:
        if blob in seen:
            seen[blob].append(path)
    wrong = []
    for blob, paths in seen.items():
        if len(paths) != 1 or paths[0] not in places[blob]:
            wrong.append(f"{places[blob][0]} at {paths or 'nowhere'}")
    groups = {p[0].split("/")[0] for p in seen.values() if len(p) == 1 and p[0].startswith("dir")}
    if len(groups) > 1:
        wrong.append(f"the group split between {sorted(groups)}")
    return "; ".join(wrong[:4]) + (f" (+{len(wrong) - 4})" if len(wrong) > 4 else "") \
        if wrong else None


def tree_entries(git_dir: Path, tree: str, env: dict[str, str]) -> list[tuple[str, str]]:
    """A tree's ``(path, blob id)`` pairs, read by the git CLI."""
    out = subprocess.run([*GIT, "--git-dir", str(git_dir), "ls-tree", "-r", "-z", tree],
                         env=env, capture_output=True, check=True, timeout=120).stdout
    pairs = []
    for entry in filter(None, out.split(b"\0")):
        meta, path = entry.split(b"\t", 1)
        pairs.append((os.fsdecode(path), meta.split()[2].decode()))
    return pairs


def storm_process(root: Path, stop: Path, seed: int, pause_ms: float = 60.0,
                  burst: int = 30) -> subprocess.Popen:
    """Start a storm on ``root`` (a tree ``make_tree`` wrote) until ``stop`` exists."""
    return subprocess.Popen([sys.executable, "-c", _STORM, str(root), str(stop), str(seed),
                             str(pause_ms), str(burst)])


class StormRun:
    """Captures of ``world``'s worktree and of a second directory (explicit ids) under rename
    storms, beside the git CLI's peer; ``judge`` counts the torn ones."""

    def __init__(self, world: Chaos, *, hooks: bool = True, peer: bool = True,
                 filler: int = FILLER_DIRS) -> None:
        self.world = world
        self.hooks = hooks  # the real hook process; else the worker's snapshot request
        self.with_peer = peer
        self.second = world.base / "second"
        self.second.mkdir()
        owner = 65534 if world.drop else None
        self.places = {str(world.wt): make_tree(world.wt, "one", owner, filler),
                       str(self.second): make_tree(self.second, "two", owner, filler)}
        self.peer_dir = world.base / "peer.git"
        env = world._git_env()
        subprocess.run([*GIT, "init", "-q", "--bare", str(self.peer_dir)], env=env, check=True)
        self.stop = world.base / "storm-stop"
        self.peer = {"captures": 0, "torn": 0, "examples": []}
        self.calls = 0
        self.errors: list[dict] = []  # capture requests answered with an error
        self.deduped = 0  # answered with an earlier checkpoint: the tree was unchanged

    def run(self, seconds: float, seed: int, pause_ms: float = 60.0,
            max_calls: int | None = None, spacing_ms: float = 0.0) -> dict:
        """Storms and captures for ``seconds`` or ``max_calls`` per directory, the calls
        ``spacing_ms`` apart at most (random: a fast call then lands in every phase of the
        storm, bursts and pauses); then ``judge``."""
        spacing = random.Random(seed)
        self.stop.unlink(missing_ok=True)
        storms = [storm_process(self.world.wt, self.stop, seed, pause_ms),
                  storm_process(self.second, self.stop, seed + 1, pause_ms)]
        deadline = time.monotonic() + seconds
        try:
            for root in (self.world.wt, self.second):
                _wait_moving(root, deadline)
            while time.monotonic() < deadline and (max_calls is None or self.calls < max_calls):
                self.calls += 1
                self._capture(self.world.wt, explicit=False)
                self._capture(self.second, explicit=True)
                if self.with_peer:
                    self._peer_capture()
                time.sleep(spacing.uniform(0, spacing_ms / 1000))
        finally:
            self.stop.touch()
            for proc in storms:
                proc.wait(timeout=30)
        return self.judge()

    def _capture(self, root: Path, *, explicit: bool) -> None:
        world = self.world
        tool_use_id = f"toolu_storm_{world.seed}_{root.name}_{self.calls}"
        run_id = SECOND_RUN if explicit else "chaos"
        if not self.hooks:
            reply = world.request("snapshot", cwd=str(root), tier=1, source="hook",
                                  run_id=run_id, node_id="agent", tool_use_id=tool_use_id)
            if "ok" not in reply:
                self.errors.append(reply)
            elif reply["ok"].get("deduped"):
                self.deduped += 1
            return
        payload = json.loads(FIXTURE.read_text().splitlines()[0])
        payload.update(session_id=f"storm-{world.seed}", cwd=str(root), tool_use_id=tool_use_id)
        env = dict(world.environ(), SNAPSHOTD_RUN_ID=run_id, SNAPSHOTD_NODE_ID="agent")
        subprocess.run([sys.executable, "-c", _HOOK], input=json.dumps(payload).encode(),
                       env=env, cwd=str(self.second if explicit else world.wt),
                       capture_output=True, timeout=180)

    def _peer_capture(self) -> None:
        """``git add -A`` + ``write-tree`` of the first worktree into a private git dir (its
        index kept between runs, as a user's is)."""
        env = self.world._git_env(GIT_INDEX_FILE=str(self.world.base / "peer-index"))
        base = [*GIT, "--git-dir", str(self.peer_dir), "--work-tree", str(self.world.wt)]
        add = subprocess.run([*base, "add", "-A"], env=env, capture_output=True, timeout=120)
        if add.returncode != 0:
            # A file gone between git's listing and its read: git refuses, nothing is taken.
            self.peer["refused"] = self.peer.get("refused", 0) + 1
            self.peer["refusal"] = add.stderr.decode(errors="replace").strip()[-200:]
            return
        tree = subprocess.run([*base, "write-tree"], env=env, capture_output=True, text=True,
                              check=True, timeout=120).stdout.strip()
        self.peer["captures"] += 1
        why = torn(tree_entries(self.peer_dir, tree, env), self.places[str(self.world.wt)])
        if why:
            self.peer["torn"] += 1
            self.peer["examples"] = (self.peer["examples"] + [why])[:3]

    def judge(self) -> dict:
        """Every checkpoint of both attempts read back with the git CLI: how many hold a
        state that never existed, and how many of those carry no ``unsettled`` mark."""
        rows = self.world.query(
            "SELECT a.worktree, c.seq, c.tree, c.skipped FROM checkpoints c JOIN attempts a "
            "ON a.pk = c.attempt_pk ORDER BY a.worktree, c.seq", ())
        out = {"checkpoints": 0, "torn": 0, "torn_unmarked": 0, "marked": 0, "examples": []}
        store = self.world.home / "store.git"
        for worktree, seq, tree, skipped in rows:
            places = self.places.get(worktree)
            if places is None:
                continue
            out["checkpoints"] += 1
            marked = any(s.get("reason") == "unsettled" for s in json.loads(skipped or "[]"))
            out["marked"] += marked
            why = torn(tree_entries(store, tree, self.world._git_env()), places)
            if why:
                out["torn"] += 1
                out["torn_unmarked"] += not marked
                out["examples"] = (out["examples"] + [f"{worktree} seq {seq}: {why}"])[:3]
        out["errors"] = self.errors[:3]
        out["deduped"] = self.deduped
        return {"daemon": out, "git_add_A": dict(self.peer)}


def _wait_moving(root: Path, deadline: float) -> None:
    """Until the storm on ``root`` has moved a file (its process takes a while to start)."""
    while time.monotonic() < deadline:
        if any(os.path.lexists(root / p) for p in ("dirB", *(f"r{i}.two" for i in
                                                              range(RENAMED)))):
            return
        time.sleep(0.005)
