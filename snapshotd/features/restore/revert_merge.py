"""Revert's three-way merge of one path: ``git revert`` semantics, decided in memory.

Owns ``Entry``, ``Blobs`` and ``revert_path``: undoing one checkpoint's change of a path against
what the path holds now is a merge with ours = the current state, base = the change's "after"
and theirs = the change's "before" (as ``git revert`` does). Promises:
- ours == base (nobody changed it since): theirs, exactly (content, mode, link, absence);
  ours == theirs or base == theirs: ours, untouched.
- Two regular files: their contents merged line by line by ``git merge-file`` (the real git,
  on private temporary files), their exec bits three-way; a file holding a NUL byte in any
  version, a link, a deletion against an edit: a conflict (``merge-file`` is never asked).
- A conflict carries both sides (``ours``/``theirs`` short descriptions) and, for text, the
  merged text with git-style markers (written only when asked: ``--conflicts=markers``).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from dataclasses import dataclass

import pygit2

from snapshotd.features.restore.plan import MODE_BLOB, MODE_EXEC, MODE_LINK

# An entry: (git mode, blob id hex); None: the path is absent.
Entry = tuple[int, str] | None
MERGE_TIMEOUT_S = 120.0
LABELS = ("current", "after the reverted change", "before the reverted change")


class Blobs:
    """Blob contents: the store's, and merge results not in the store (by their git id)."""

    def __init__(self, repo: pygit2.Repository) -> None:
        self.repo = repo
        self.extra: dict[str, bytes] = {}

    def read(self, entry: Entry) -> bytes:
        assert entry is not None
        oid = entry[1]
        if oid in self.extra:
            return self.extra[oid]
        return self.repo.odb.read(pygit2.Oid(hex=oid))[1]

    def add(self, data: bytes) -> str:
        oid = str(pygit2.hash(data))
        self.extra[oid] = data
        return oid


@dataclass
class Outcome:
    """What reverting one change of a path gives: ``entry`` (the new state), ``status``
    (``reverted``, ``merged``, ``untouched``, ``conflict``), and for a conflict ``reason``
    and ``marked`` (the text with markers, None when not text)."""

    entry: Entry
    status: str
    reason: str = ""
    marked: bytes | None = None


def revert_path(blobs: Blobs, ours: Entry, base: Entry, theirs: Entry) -> Outcome:
    """Undo the change ``theirs`` -> ``base`` of one path whose state is now ``ours``."""
    if ours == theirs or base == theirs:
        return Outcome(ours, "untouched")
    if ours == base:
        return Outcome(theirs, "reverted")
    kinds = {e[0] if e else None for e in (ours, base, theirs)}
    if None in kinds:
        return Outcome(ours, "conflict", "deleted on one side, changed on the other")
    if not kinds <= {MODE_BLOB, MODE_EXEC}:
        return Outcome(ours, "conflict", "a symbolic link changed on both sides")
    mode = _merge_mode(ours[0], base[0], theirs[0])  # type: ignore[index]
    texts = [blobs.read(e) for e in (ours, base, theirs)]
    if any(b"\0" in t for t in texts):
        return Outcome(ours, "conflict", "a binary file changed on both sides")
    merged, clean = merge_text(*texts)
    if mode is None:
        return Outcome(ours, "conflict", "its exec bit changed on both sides", merged)
    if not clean:
        return Outcome(ours, "conflict", "the same lines changed on both sides", merged)
    return Outcome((mode, blobs.add(merged)), "merged")


def merge_text(ours: bytes, base: bytes, theirs: bytes) -> tuple[bytes, bool]:
    """``git merge-file -p`` of the three texts: the merged text (with markers where they
    conflict) and whether it merged cleanly. Raises ``OSError`` when git cannot run."""
    with tempfile.TemporaryDirectory(prefix="snapshotd-revert-") as tmp:
        names = []
        for name, data in (("ours", ours), ("base", base), ("theirs", theirs)):
            path = os.path.join(tmp, name)
            with open(path, "wb") as fh:
                fh.write(data)
            names.append(path)
        argv = ["git", "merge-file", "-p"]
        for label in LABELS:
            argv += ["-L", label]
        done = subprocess.run(argv + names, capture_output=True, timeout=MERGE_TIMEOUT_S,
                              check=False, env=_git_env())
    if done.returncode < 0 or done.returncode > 127:
        raise OSError(f"git merge-file failed ({done.returncode}): "
                      f"{done.stderr.decode(errors='replace')[:200]}")
    return done.stdout, done.returncode == 0


def describe(blobs: Blobs, entry: Entry, limit: int = 2048) -> str:
    """One side of a conflict for a person: absent, a link and its target, or the text."""
    if entry is None:
        return "(absent)"
    data = blobs.read(entry)
    if entry[0] == MODE_LINK:
        return "symlink -> " + data.decode("utf-8", "replace")
    if b"\0" in data:
        return f"(binary, {len(data)} bytes, blob {entry[1][:12]})"
    text = data.decode("utf-8", "replace")
    return text if len(text) <= limit else text[:limit] + f"… ({len(data)} bytes)"


def _merge_mode(ours: int, base: int, theirs: int) -> int | None:
    if ours == base:
        return theirs
    if theirs == base or ours == theirs:
        return ours
    return None


def _git_env() -> dict[str, str]:
    # No user or system config: merge-file's result must not depend on the machine.
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, LC_ALL="C")
    return env
