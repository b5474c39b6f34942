"""What one checkpoint changed against another, as a diff stat, writing nothing to the store.

Owns ``diff_stat``: the files that differ between two trees (a subtree whose id is unchanged is
never entered, so the cost follows the change) with their lines added and deleted, counted by
libgit2 on the two blobs (a binary file counts no lines). Review's diffs write helper trees
(``store.pruned_pair``); bisect promises the store is never written, so it walks the trees here.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pygit2

# At most this many paths are listed; ``paths_total`` tells the rest.
MAX_PATHS = 50
DIR_MODE = 0o040000


def diff_stat(repo: pygit2.Repository, old_tree: str | None, new_tree: str) -> dict:
    """``{files, insertions, deletions, paths: [{path, status, insertions, deletions}],
    paths_total}`` of ``old_tree`` (None: the empty tree) -> ``new_tree``."""
    old = repo[old_tree].peel(pygit2.Tree) if old_tree else None
    new = repo[new_tree].peel(pygit2.Tree)
    rows: list[dict] = []
    added = deleted = 0
    for path, a, b in _changes(repo, old, new, b""):
        plus, minus = _lines(repo, a, b)
        added += plus
        deleted += minus
        status = "A" if a is None else "D" if b is None else "M"
        rows.append({"path": os.fsdecode(path), "status": status, "insertions": plus,
                     "deletions": minus})
    return {"files": len(rows), "insertions": added, "deletions": deleted,
            "paths": rows[:MAX_PATHS], "paths_total": len(rows)}


def _changes(repo: pygit2.Repository, old: pygit2.Tree | None, new: pygit2.Tree | None,
             prefix: bytes) -> Iterator[tuple[bytes, pygit2.Object | None, pygit2.Object | None]]:
    """``(path, old entry, new entry)`` of each non-directory entry that differs."""
    olds = {e.raw_name: e for e in old} if old is not None else {}
    news = {e.raw_name: e for e in new} if new is not None else {}
    for name in sorted(olds.keys() | news.keys()):
        a, b = olds.get(name), news.get(name)
        if a is not None and b is not None and a.id == b.id and a.filemode == b.filemode:
            continue
        path = prefix + name
        a_dir = a is not None and a.filemode == DIR_MODE
        b_dir = b is not None and b.filemode == DIR_MODE
        if a_dir or b_dir:
            yield from _changes(repo, repo[a.id] if a_dir else None,
                                repo[b.id] if b_dir else None, path + b"/")
            # A file replaced by a directory, or the other way round: the file's side.
            if a is not None and not a_dir:
                yield path, a, None
            if b is not None and not b_dir:
                yield path, None, b
            continue
        yield path, a, b


def _lines(repo: pygit2.Repository, a: pygit2.Object | None,
           b: pygit2.Object | None) -> tuple[int, int]:
    def blob(entry: pygit2.Object | None) -> pygit2.Blob | None:
        if entry is None or entry.filemode == 0o160000:
            return None
        return repo[entry.id]

    try:
        patch = pygit2.Patch.create_from(blob(a), blob(b))
    except (pygit2.GitError, ValueError):
        return 0, 0
    if patch.delta.is_binary:
        return 0, 0
    _context, plus, minus = patch.line_stats
    return plus, minus
