"""Replication's hold on checkpoints that hold a secret, and their explicit release.

Owns the release file (``<home>/secrets-released.json``: checkpoint commits and worktree paths a
person released after review), ``release`` (adding to it), ``Withholder``: for an attempt
ref about to be pushed, the newest commit that may leave the host, and ``chain_findings``: the
unreleased findings of an attempt's chain (export refuses what would carry one). Held by ref,
not commit: pushing a ref pushes its history, so the ref is pushed at the parent of its oldest
held checkpoint (not at all when that is the first) and the rest waits.

Promises: a commit whose secrets trailer (``Checkpoint.secrets``) names a finding that is
neither released by commit nor by path is never in what ``Withholder.target`` returns, nor
behind it; the walk down an attempt's chain is done once per new checkpoint (each ref's last
answer is kept, and dropped when the release file changes); ``chain_findings`` omits exactly
what the release file releases (by commit or by path), so export and replication agree on what
is released.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pygit2

from snapshotd.core import TrailerError, Trailers

log = logging.getLogger("snapshotd.replication")

RELEASES_FILE = "secrets-released.json"


def findings_of(commit: pygit2.Commit) -> list[dict]:
    """The findings a checkpoint commit was marked with (``[]`` for none)."""
    raw = Trailers(commit.message).secrets_text
    if not raw:
        return []
    try:
        found = json.loads(raw)
    except ValueError:
        # A trailer we cannot read still marks the commit: hold it rather than guess.
        return [{"path": "?", "line": 0, "kind": "unreadable-mark"}]
    return found if isinstance(found, list) else []


def chain_findings(repo: pygit2.Repository, tip: str, home: Path) -> list[dict]:
    """Every finding on the first-parent chain ending at ``tip`` that the release file does not
    release, oldest first: ``{"path", "line", "kind", "seq", "commit", "blob"}`` (``blob``: the
    file's blob id in that checkpoint, None when its tree has no such path), and ``in`` for a
    finding outside a file's content (``name``, ``link-target``, ``worktree-path``)."""
    data = _read(home / RELEASES_FILE)
    commits, paths = set(data["commits"]), set(data["paths"])
    found: list[dict] = []
    commit: pygit2.Commit | None = repo[tip].peel(pygit2.Commit)
    while commit is not None:
        oid = str(commit.id)
        if oid not in commits:
            seq = _listed_seq(commit)
            for f in reversed(findings_of(commit)):
                if f.get("path") in paths:
                    continue
                found.append({"path": f.get("path"), "line": f.get("line"), "kind": f.get("kind"),
                              "seq": seq, "commit": oid,
                              "blob": blob_at(commit.tree, f.get("path")),
                              **({"in": f["in"]} if f.get("in") else {})})
        commit = commit.parents[0] if commit.parents else None
    found.reverse()
    return found


def _listed_seq(commit: pygit2.Commit) -> int | None:
    """The seq a finding is listed with: None when the commit has none it can read."""
    try:
        seq = Trailers(commit.message).seq
    except TrailerError:
        return None
    return seq if seq is not None and seq >= 0 else None


def blob_at(tree: pygit2.Tree, path: object) -> str | None:
    """The id of the file at ``path`` in ``tree``, or None when there is none."""
    if not isinstance(path, str) or not path:
        return None
    try:
        entry = tree[path]
    except (KeyError, ValueError):
        return None
    return str(entry.id) if entry.type_str == "blob" else None


def release(home: Path, *, commits: tuple[str, ...] = (), paths: tuple[str, ...] = ()) -> dict:
    """Release checkpoints (by commit id) and worktree paths for replication; the file as it
    now stands. Written atomically, readable by its owner only."""
    current = _read(home / RELEASES_FILE)
    current["commits"] = sorted(set(current["commits"]) | set(commits))
    current["paths"] = sorted(set(current["paths"]) | set(paths))
    tmp = home / (RELEASES_FILE + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(current, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, home / RELEASES_FILE)
    return current


class Withholder:
    """Decides, for each attempt ref, the commit replication may push. One per pusher."""

    def __init__(self, home: Path) -> None:
        self.path = home / RELEASES_FILE
        self._stamp: tuple[int, int] | None = None
        self._commits: set[str] = set()
        self._paths: set[str] = set()
        # ref -> (tip walked to, oldest held commit in its chain or None, its held findings)
        self._seen: dict[str, tuple[str, str | None, list[dict]]] = {}

    def target(self, repo: pygit2.Repository, ref: str, tip: str) -> tuple[str | None, dict | None]:
        """The commit to push ``ref`` at (None: nothing yet), and the withheld record when a
        checkpoint is held back (``{"commit", "seq", "findings"}``)."""
        self._refresh()
        seen = self._seen.get(ref)
        held, findings, reached = self._walk(repo, tip, seen)
        if seen is not None and not reached:
            # The chain was rewritten (gc, purge) since the last walk: what was remembered
            # names commits it no longer holds.
            held, findings, _ = self._walk(repo, tip, None)
        self._seen[ref] = (tip, held, findings)
        if held is None:
            return tip, None
        held_commit = repo.get(held)
        record = {"commit": held, "seq": Trailers(held_commit.message).seq,
                  "findings": findings}
        parent = str(held_commit.parents[0].id) if held_commit.parents else None
        return parent, record

    def _walk(self, repo: pygit2.Repository, tip: str,
              seen: tuple[str, str | None, list[dict]] | None
              ) -> tuple[str | None, list[dict], bool]:
        """The oldest held commit from ``tip`` down to the last walk's tip (``seen``), its
        findings, and whether that tip was met on the way."""
        stop = seen[0] if seen else None
        held, findings = (seen[1], seen[2]) if seen else (None, [])
        commit = repo.get(tip)
        while commit is not None:
            if str(commit.id) == stop:
                return held, findings, True
            found = self._held(commit)
            # Walking down the chain: the last one found is the oldest of the new commits,
            # and an older one held before stays the one that counts.
            if found and (seen is None or seen[1] is None):
                held, findings = str(commit.id), found
            commit = commit.parents[0] if commit.parents else None
        return held, findings, stop is None

    def _held(self, commit: pygit2.Commit) -> list[dict]:
        if str(commit.id) in self._commits:
            return []
        return [f for f in findings_of(commit) if f.get("path") not in self._paths]

    def _refresh(self) -> None:
        """Reread the release file when it changed; a change voids every remembered walk."""
        try:
            st = os.stat(self.path)
            stamp: tuple[int, int] | None = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            stamp = None
        if stamp == self._stamp:
            return
        data = _read(self.path)
        self._stamp = stamp
        self._commits, self._paths = set(data["commits"]), set(data["paths"])
        self._seen.clear()


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return {"commits": [], "paths": []}
    except (OSError, ValueError) as exc:
        # An unreadable release file releases nothing: holding back is the safe side.
        log.warning("cannot read %s (%s): nothing is released", path, exc)
        return {"commits": [], "paths": []}
    return {"commits": [str(c) for c in data.get("commits", [])],
            "paths": [str(p) for p in data.get("paths", [])]}
