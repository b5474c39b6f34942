"""The web app's diff of two store trees, walking only the subtrees that differ.

Owns ``diff_trees``: the same shape as ``snapshotd.features.review.diff.render_trees`` (``files``, ``stats``,
``patch``) at a cost that follows the difference. libgit2's tree-to-tree diff reads every entry
of both trees (about 0.3 s for a 100,000-file worktree on a small machine, whatever changed);
here a subtree whose id is the same on both sides is skipped unread, and each changed file's
patch is made from its two blobs.

Promises: every changed path is listed once, sorted, with git's status letters (``A``, ``D``,
``M``, and ``R`` for a file moved unchanged: same blob under another name, "similarity index
100%"); a file edited and moved shows as ``D`` + ``A`` (no similarity search). The patch is
git's text format; binary files are named, not dumped; bytes that are not UTF-8 stay surrogate
escapes. A submodule entry (gitlink) is listed with no patch.
"""

from __future__ import annotations

import os

import pygit2

_TREE = pygit2.enums.FileMode.TREE
_GITLINK = 0o160000

Change = tuple[str, "pygit2.Object | None", "pygit2.Object | None"]


def diff_trees(repo: pygit2.Repository, tree_a: str, tree_b: str, *, patch: bool = True) -> dict:
    """What changed from ``tree_a`` to ``tree_b`` (ids of trees, or of commits)."""
    a = repo[tree_a].peel(pygit2.Tree)
    b = repo[tree_b].peel(pygit2.Tree)
    changes: list[Change] = []
    _walk(repo, a, b, "", changes)
    changes.sort(key=lambda c: c[0])
    files, chunks = [], []
    for old_path, new_path, old, new in _pair_renames(changes):
        entry, text = _one_file(repo, old_path, new_path, old, new)
        files.append(entry)
        chunks.append(text)
    return {"files": files,
            "stats": {"files_changed": len(files),
                      "insertions": sum(f["additions"] for f in files),
                      "deletions": sum(f["deletions"] for f in files)},
            "patch": "".join(chunks) if patch else None}


def _walk(repo: pygit2.Repository, a: pygit2.Tree | None, b: pygit2.Tree | None, prefix: str,
          out: list[Change]) -> None:
    # Raw names, so one that is not UTF-8 keeps its bytes (as os.fsdecode does).
    old = {os.fsdecode(e.raw_name): e for e in a} if a is not None else {}
    new = {os.fsdecode(e.raw_name): e for e in b} if b is not None else {}
    for name in old.keys() | new.keys():
        ea, eb = old.get(name), new.get(name)
        if ea is not None and eb is not None and ea.id == eb.id and ea.filemode == eb.filemode:
            continue
        path = prefix + name
        a_tree = ea is not None and ea.filemode == _TREE
        b_tree = eb is not None and eb.filemode == _TREE
        if a_tree or b_tree:
            _walk(repo, repo[ea.id] if a_tree else None, repo[eb.id] if b_tree else None,
                  path + "/", out)
        if (ea is not None and not a_tree) or (eb is not None and not b_tree):
            out.append((path, ea if ea is not None and not a_tree else None,
                        eb if eb is not None and not b_tree else None))


def _pair_renames(changes: list[Change]) -> list[tuple[str, str, object, object]]:
    """(old path, new path, old entry, new entry); a deleted and an added path holding the same
    blob become one rename."""
    deleted = {}
    for path, old, new in changes:
        if new is None and old is not None:
            deleted.setdefault(old.id, path)
    renamed_from: dict[str, str] = {}
    for path, old, new in changes:
        if old is None and new is not None and new.id in deleted:
            source = deleted.pop(new.id)
            renamed_from[path] = source
    gone = set(renamed_from.values())
    by_path = {path: old for path, old, _new in changes}
    out = []
    for path, old, new in changes:
        if path in gone and new is None:
            continue
        if path in renamed_from:
            source = renamed_from[path]
            out.append((source, path, by_path[source], new))
        else:
            out.append((path, path, old, new))
    return out


def _one_file(repo: pygit2.Repository, old_path: str, new_path: str, old: object,
              new: object) -> tuple[dict, str]:
    status = "A" if old is None else "D" if new is None else "R" if old_path != new_path else "M"
    entry = {"status": status, "path": new_path if status != "D" else old_path,
             "old_path": old_path if status == "R" else None,
             "additions": 0, "deletions": 0, "binary": False}
    if status == "R" and old.id == new.id:  # type: ignore[attr-defined]
        return entry, (f"diff --git a/{old_path} b/{new_path}\nsimilarity index 100%\n"
                       f"rename from {old_path}\nrename to {new_path}\n")
    if _GITLINK in (getattr(old, "filemode", 0), getattr(new, "filemode", 0)):
        return entry, f"diff --git a/{old_path} b/{new_path}\nSubmodule {new_path} changed\n"
    blob_a = repo[old.id] if old is not None else None  # type: ignore[attr-defined]
    blob_b = repo[new.id] if new is not None else None  # type: ignore[attr-defined]
    p = pygit2.Patch.create_from(blob_a, blob_b, old_as_path=old_path, new_as_path=new_path)
    _context, entry["additions"], entry["deletions"] = p.line_stats
    entry["binary"] = bool(p.delta.is_binary)
    data = p.data
    return entry, data.decode("utf-8", "surrogateescape") if isinstance(data, bytes) else data

