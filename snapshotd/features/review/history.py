"""Review history: what one checkpoint changed (``show``), a run's checkpoints newest first
(``log``), and which checkpoints of which runs changed a path of a worktree (``find``).

Every function reads a home opened for reading (``view.HomeView``), so it answers beside a running
daemon or without one, and writes nothing but a few unreferenced trees gc collects (``pruned_pair``,
git's empty tree). Result shapes and promises in full: docs/review.md. Promises:
- A checkpoint's change is its tree against its parent checkpoint's (the ledger row's ``parent``,
  re-pointed by retention; a first one against its base, ``review.base``), diffed by libgit2 on
  ``pruned_pair`` (only the entries that differ), so the cost follows the change; a path filter
  compares the one entry at that path.
- ``show`` lists the checkpoint's secret findings (path, line, kind: never a value).
- ``log`` and ``find`` are newest first (by capture time, then seq); pruned checkpoints (their
  commits are gone) are left out and counted in ``pruned_skipped``.
- Every refusal is a ``ServiceError``: ``bad-id``/``bad-request`` for malformed fields,
  ``not-found`` naming what does exist (``checkpoints.find_checkpoint``'s sentences).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

import pygit2
from pygit2.enums import DiffOption

from snapshotd.core import (
    BAD_REQUEST,
    NOT_FOUND,
    ServiceError,
    id_field,
    int_value,
    parse_duration,
    parse_trailers,
)
from snapshotd.features.review.base import EMPTY_NOTE, Base, first_base
from snapshotd.features.review.diff import render_trees
from snapshotd.features.review.others import ForeignChanges
from snapshotd.features.review.view import HomeView
from snapshotd.ledger import Attempt
from snapshotd.service import (
    ToolCallIndex,
    annotate,
    find_checkpoint,
    selection,
    unknown_run,
    with_tool_calls,
)
from snapshotd.store import empty_tree, pruned_pair

# Trees whose entry records a log keeps at once (each is a top directory's worth at most).
TREE_CACHE_ENTRIES = 256
# The fields of a ledger row that say which tool call a checkpoint was.
CALL_FIELDS = ("run_id", "node_id", "iteration", "attempt", "seq", "commit", "tree", "parent",
               "label", "tool_use_id", "tier", "source", "worktree", "created_at", "failed",
               "exit_code", "error", "tool_call", "tool_calls")
# What a checkpoint's secret finding says: where, and what kind of token; never its value.
FINDING_FIELDS = ("path", "line", "kind")


def show_checkpoint(view: HomeView, *, run_id: object, node_id: object, seq: object = None,
                    iteration: object = None, attempt: object = None,
                    patch: bool = True) -> dict:
    """What checkpoint ``seq`` (default: the newest of the newest attempt) changed against the
    previous one, with its tool call and the gaps of its attempt around it."""
    started = time.perf_counter()
    run, node, s, i, a = selection(run_id, node_id, seq, iteration, attempt)
    cp = find_checkpoint(view.ledger, run, node, seq=s, iteration=i, attempt=a)
    rows = [r for r in view.ledger.checkpoints(run, node, cp["attempt"])
            if r["iteration"] == cp["iteration"] and not r.get("pruned_at")]
    by_commit = {r["commit"]: r for r in rows}
    # Its tool call: its own, the one that owns it, the ones whose state it holds (issue 43).
    cp = ToolCallIndex(rows, view.ledger.tool_calls(run, node, cp["attempt"])).annotate(cp)
    parent_tree, parent_seq = _parent_side(view.repo, cp, by_commit)
    base = change_base(view.repo, cp, {cp["parent"]: parent_tree} if cp["parent"] else {})
    out = {key: cp[key] for key in ("run_id", "node_id", "iteration", "attempt", "seq")}
    out["checkpoint"] = call_of(cp)
    out["from"] = {"seq": parent_seq, "commit": base.commit,
                   "tree": parent_tree or empty_tree(view.repo)}
    out["to"] = {"seq": cp["seq"], "commit": cp["commit"], "tree": cp["tree"]}
    out["base"] = base.kind
    if base.kind == "empty-tree":
        out["base_note"] = EMPTY_NOTE
    out["gaps"] = _gaps_around(view, cp, rows)
    # What other sessions' tool calls made, in this change (review.others).
    out["foreign"] = ForeignChanges(view.ledger, view.repo).of(cp, by_commit)
    out["secrets"] = findings(cp)
    out.update(render_trees(view.repo, *pruned_pair(view.repo, parent_tree, cp["tree"]),
                            patch=patch))
    out["elapsed_ms"] = _ms(started)
    return out


def log_run(view: HomeView, *, run_id: object, node_id: object = None, iteration: object = None,
            attempt: object = None, path: object = None, since: object = None,
            pickaxe: object = None, patch: bool = False, limit: object = None,
            root: bool = False) -> dict:
    """The run's checkpoints newest first across nodes and attempts, each with its tool call and
    its diffstat (and patch), kept when it changed ``path``, was taken after ``since`` and, with
    ``pickaxe``, changed the number of occurrences of that text in some file.

    The first checkpoint of an attempt holds the whole worktree against the empty tree: its
    diff is rendered only with ``root`` (else ``diff_omitted`` says so), so a log costs what
    the tool calls changed, not the size of the worktree. Filters still apply to it."""
    started = time.perf_counter()
    run = id_field("run_id", run_id)
    node = None if node_id is None else id_field("node_id", node_id)
    it = None if iteration is None else int_value("iteration", iteration, 0)
    att = None if attempt is None else int_value("attempt", attempt, 1)
    rel = None if path is None else relative_path(path)
    after = None if since is None else parse_since(since)
    needle = _pickaxe_bytes(pickaxe)
    most = None if limit is None else int_value("limit", limit, 1)
    rows = view.ledger.checkpoints(run, node, att)
    if not rows and run not in view.ledger.run_ids():
        raise unknown_run(run, view.ledger)
    if not rows and node is not None:
        # Refused with the sentence that names the run's nodes and attempts.
        find_checkpoint(view.ledger, run, node, iteration=it, attempt=att)
    rows = with_tool_calls(view.ledger, [r for r in rows if it is None or r["iteration"] == it])
    pruned = sum(1 for r in rows if r.get("pruned_at"))
    trees = {r["commit"]: r["tree"] for r in rows}
    entries: list[dict] = []
    # Each checkpoint's tree is the next one's parent tree: read once for both.
    cache: dict = {}
    others, by_commit = ForeignChanges(view.ledger, view.repo), {r["commit"]: r for r in rows}
    for cp in newest_first(r for r in rows if not r.get("pruned_at")):
        if after is not None and cp["created_at"] < after:
            continue
        if len(cache) > TREE_CACHE_ENTRIES:
            cache.clear()
        entry = _log_entry(view.repo, cp, trees, (rel, needle, patch, root), cache)
        if entry is None:
            continue
        entry["foreign"] = others.of(cp, by_commit)
        entries.append(entry)
        if most is not None and len(entries) >= most:
            break
    return {"run_id": run, "node_id": node, "iteration": it, "attempt": att,
            "filters": {"path": rel, "since": after, "pickaxe": pickaxe, "limit": most,
                        "root": root},
            "entries": entries, "total": len(entries), "pruned_skipped": pruned,
            "store": str(view.home / "store.git"), "elapsed_ms": _ms(started)}


def find_path(view: HomeView, *, path: object, cwd: object = None, since: object = None,
              limit: object = None) -> dict:
    """The checkpoints of every run that changed ``path`` (resolved against ``cwd``) in the
    worktree the ledger knows it to be in, newest first, with the runs they belong to."""
    started = time.perf_counter()
    target = _absolute(path, cwd)
    after = None if since is None else parse_since(since)
    most = None if limit is None else int_value("limit", limit, 1)
    attempts = view.ledger.attempts()
    worktree = _worktree_of(target, {a.worktree for a in attempts})
    rel = PurePosixPath(os.path.relpath(target, worktree)).as_posix()
    if rel == ".":
        rel = ""
    found: list[dict] = []
    pruned = 0
    others = ForeignChanges(view.ledger, view.repo)
    for att in (a for a in attempts if a.worktree == worktree):
        rows, skipped = _attempt_rows(view, att)
        pruned += skipped
        trees = {r["commit"]: r["tree"] for r in rows}
        by_commit = {r["commit"]: r for r in rows}
        for cp in rows:
            if after is not None and cp["created_at"] < after:
                continue
            status = _path_status(view.repo, cp, trees, rel)
            if status is not None:  # ``foreign``: another session's tool call made it
                found.append(dict(call_of(cp), status=status,
                                  foreign=others.of_path(cp, by_commit, rel)))
    found = newest_first(found)
    if most is not None:
        found = found[:most]
    runs = list(dict.fromkeys(cp["run_id"] for cp in found))
    return {"path": str(target), "worktree": worktree, "relative": rel, "since": after,
            "checkpoints": found, "runs": runs, "total": len(found), "pruned_skipped": pruned,
            "elapsed_ms": _ms(started)}


def compare(view: HomeView, sel: dict, against: dict | None, *, patch: bool = True) -> dict:
    """What checkpoint ``sel`` changed against checkpoint ``against`` (any of the store, across
    attempts too) or, when None, against its parent checkpoint (the empty tree for a first one):
    the web app's diffs. Selections are dicts of ``run_id``, ``node_id``, ``seq``,
    ``iteration``, ``attempt``; safety checkpoints can be named. ``render_trees`` (on
    ``pruned_pair``) plus ``to`` and ``from`` (None for the parent), each the checkpoint's ids,
    ``checkpoint`` (the ledger row of ``sel``) and ``trailers`` (its commit's)."""
    cp = _find_any(view, sel)
    cp = ToolCallIndex([cp], view.ledger.tool_calls(cp["run_id"], cp["node_id"],
                                                    cp["attempt"])).annotate(cp)
    if against is None:
        base_tree, base = _parent_side(view.repo, cp, {})[0], None
    else:
        other = _find_any(view, against)
        base_tree, base = other["tree"], _ident(other)
    out = render_trees(view.repo, *pruned_pair(view.repo, base_tree, cp["tree"]), patch=patch)
    trailers = parse_trailers(view.repo[cp["commit"]].peel(pygit2.Commit).message)
    out.update({"to": _ident(cp), "from": base, "checkpoint": cp, "trailers": trailers})
    return out


def findings(cp: dict) -> list[dict]:
    """The tokens the capture found in the files a checkpoint changed: ``path``, ``line`` and
    ``kind`` of each, never the value (the ledger row holds nothing else either)."""
    return [{key: f.get(key) for key in FINDING_FIELDS}
            | ({"in": f["in"]} if f.get("in") else {})  # a name's, a link's, the worktree's
            for f in cp.get("secrets") or []]


def call_of(cp: dict) -> dict:
    """The tool call a checkpoint row records, with its time also as ISO 8601 UTC."""
    out = {key: cp.get(key) for key in CALL_FIELDS}
    out["time"] = iso_time(cp["created_at"])
    return out


def newest_first(rows: Iterable[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (r["created_at"], r["seq"]), reverse=True)


def relative_path(value: object) -> str:
    """A path inside a worktree as a store path (``a/b``); ``""`` is the whole worktree."""
    if not isinstance(value, str) or "\0" in value:
        raise ServiceError(BAD_REQUEST, f"path must be a string, not {value!r}")
    parts = [p for p in PurePosixPath(value.replace(os.sep, "/")).parts if p not in (".", "")]
    if value.startswith("/") or ".." in parts:
        raise ServiceError(BAD_REQUEST, f"path {value!r} must be relative to the worktree "
                                               "and stay inside it (no `..`, not absolute)")
    return "/".join(parts)


def parse_since(value: object, now: float | None = None) -> float:
    """``since`` as epoch seconds: a duration back from now (``90s``, ``2h``, ``7d``) or an ISO
    8601 time (UTC unless it names a zone)."""
    text = str(value).strip() if isinstance(value, str | int | float) else ""
    try:
        return (time.time() if now is None else now) - parse_duration(text)
    except ValueError:
        pass
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        raise ServiceError(BAD_REQUEST, f"since {value!r} is neither a duration (90s, "
                                               "30m, 2h, 7d, 2w) nor an ISO time") from None
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


def iso_time(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, timezone.utc).isoformat(timespec="milliseconds")


# -- helpers -------------------------------------------------------------------------------------


def _log_entry(repo: pygit2.Repository, cp: dict, trees: dict[str, str],
               options: tuple[str | None, bytes | None, bool, bool], cache: dict) -> dict | None:
    """One log entry, or None when a filter leaves the checkpoint out. ``options``: the path
    filter, the pickaxe, whether to render the patch, whether to render a first checkpoint."""
    rel, needle, patch, root = options
    base = change_base(repo, cp, trees)
    parent_tree = base.tree
    if rel is not None and _entry_id(repo, parent_tree, rel) == _entry_id(repo, cp["tree"], rel):
        return None
    if needle is not None and not _pickaxe_hit(repo, parent_tree, cp["tree"], needle, cache):
        return None
    entry = call_of(cp)
    entry["base"] = base.kind
    entry["base_commit"] = base.commit if base.kind == "commit" else None
    if base.kind != "empty-tree" or root:
        entry.update(render_trees(repo, *pruned_pair(repo, parent_tree, cp["tree"], cache),
                                  patch=patch))
        if base.kind == "empty-tree":
            entry["base_note"] = EMPTY_NOTE
    else:
        entry.update(files=None, stats=None, stat="", patch=None,
                     diff_omitted="the first checkpoint of its attempt, no earlier state known: "
                                  "the whole worktree compared with an empty tree (see it with "
                                  "show, or log --root)")
    return entry


def change_base(repo: pygit2.Repository, cp: dict, trees: dict[str, str]) -> Base:
    """What ``cp``'s change is measured against: its parent checkpoint, or for a first
    checkpoint its base (``review.base.first_base``)."""
    if cp["parent"]:
        return Base("parent", _parent_tree(repo, cp, trees), cp["parent"])
    return first_base(repo, cp)


def _parent_side(repo: pygit2.Repository, cp: dict,
                 by_commit: dict[str, dict]) -> tuple[str | None, int | None]:
    """The parent checkpoint's tree and seq (for a first checkpoint: its base's tree, None
    for the empty tree, and no seq)."""
    parent = cp["parent"]
    if not parent:
        return first_base(repo, cp).tree, None
    row = by_commit.get(parent)
    if row is not None:
        return row["tree"], row["seq"]
    tree = _parent_tree(repo, cp, {})
    return tree, None


def _parent_tree(repo: pygit2.Repository, cp: dict, trees: dict[str, str]) -> str | None:
    """The tree of ``cp``'s parent commit: from the ledger rows when listed there, else read
    from the store; for a first checkpoint its base's (None: the empty tree)."""
    parent = cp["parent"]
    if not parent:
        return first_base(repo, cp).tree
    if parent in trees:
        return trees[parent]
    try:
        return str(repo[parent].peel(pygit2.Commit).tree_id)
    except (KeyError, ValueError, pygit2.GitError) as exc:
        raise ServiceError(NOT_FOUND, f"checkpoint seq {cp['seq']} of {cp['run_id']}/"
                           f"{cp['node_id']} names parent {parent[:12]}, which the store no "
                           f"longer holds: {exc}") from exc


def _entry_id(repo: pygit2.Repository, tree_id: str | None, rel: str) -> str | None:
    """The id of the entry at ``rel`` (a blob or a subtree) in a tree (None: the empty tree),
    None when absent."""
    if tree_id is None:
        return None
    tree = repo[tree_id].peel(pygit2.Tree)
    if not rel:
        return str(tree.id)
    try:
        return str(tree[rel].id)
    except KeyError:
        return None


def _path_status(repo: pygit2.Repository, cp: dict, trees: dict[str, str],
                 rel: str) -> str | None:
    """``A``/``M``/``D`` for what ``cp`` did to the entry at ``rel``, None when nothing."""
    before = _entry_id(repo, _parent_tree(repo, cp, trees), rel)
    after = _entry_id(repo, cp["tree"], rel)
    if before == after:
        return None
    return "A" if before is None else "D" if after is None else "M"


def _pickaxe_bytes(value: object) -> bytes | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value:
        raise ServiceError(BAD_REQUEST, "the pickaxe text (-S) must be a non-empty string")
    return value.encode("utf-8", "surrogateescape")


def _pickaxe_hit(repo: pygit2.Repository, tree_a: str | None, tree_b: str, needle: bytes,
                 cache: dict) -> bool:
    """Whether some changed file holds ``needle`` a different number of times before and after
    (git's ``-S``; binary files are skipped, as git does without ``--text``). ``tree_a`` None is
    the empty tree."""
    flags = DiffOption.INCLUDE_TYPECHANGE | DiffOption.SKIP_BINARY_CHECK
    if tree_a is None:
        diff = repo[tree_b].peel(pygit2.Tree).diff_to_tree(flags=flags, swap=True)
    else:
        a, b = (repo[t].peel(pygit2.Tree) for t in pruned_pair(repo, tree_a, tree_b, cache))
        diff = repo.diff(a, b, flags=flags)
    # Renames paired, as git log does: a file that only moved keeps its count.
    diff.find_similar()
    for delta in diff.deltas:
        if _occurrences(repo, delta.old_file, needle) != _occurrences(repo, delta.new_file,
                                                                      needle):
            return True
    return False


def _occurrences(repo: pygit2.Repository, side: pygit2.DiffFile, needle: bytes) -> int:
    # A zero id is the absent side of an added or deleted file.
    if not side.id or side.mode == pygit2.enums.FileMode.COMMIT:
        return 0
    data = repo[side.id].peel(pygit2.Blob).data
    # A NUL in the first 8000 bytes is how git tells a binary file.
    if b"\0" in data[:8000]:
        return 0
    return data.count(needle)



def _find_any(view: HomeView, sel: dict) -> dict:
    run, node, seq, iteration, attempt = selection(
        sel.get("run_id"), sel.get("node_id"), sel.get("seq"), sel.get("iteration"),
        sel.get("attempt"))
    return find_checkpoint(view.ledger, run, node, seq=seq, iteration=iteration,
                           attempt=attempt, skip_safety=False)


def _ident(cp: dict) -> dict:
    """The ids that name a checkpoint in a reply."""
    return {k: cp[k] for k in ("run_id", "node_id", "iteration", "attempt", "seq", "commit",
                               "tree")}


def _gaps_around(view: HomeView, cp: dict, rows: list[dict]) -> dict:
    """The attempt's gaps since the previous checkpoint (``before``), until the next one
    (``after``; until now for the newest) and those without a readable time (``undated``), each
    marked resolved when a checkpoint covers its tool call."""
    earlier = [r["created_at"] for r in rows if r["seq"] < cp["seq"]]
    later = [r["created_at"] for r in rows if r["seq"] > cp["seq"]]
    low = max(earlier) if earlier else float("-inf")
    high = min(later) if later else float("inf")
    covered: set[str] | None = None
    out: dict[str, list[dict]] = {"before": [], "after": [], "undated": []}
    for gap in view.gaps.for_run(cp["run_id"]):
        if gap.get("node_id") != cp["node_id"] or not _same_attempt(gap, cp):
            continue
        at = _gap_time(gap)
        if at is not None and not low < at <= high:
            continue
        if covered is None:
            covered = view.ledger.tool_use_ids(cp["run_id"])
        row = dict(gap, resolved=bool(gap.get("tool_use_id")) and gap["tool_use_id"] in covered)
        # A record whose time cannot be read is shown, not dropped: it may be this call's.
        side = "undated" if at is None else "before" if at <= cp["created_at"] else "after"
        out[side].append(row)
    return out


def _same_attempt(gap: dict, cp: dict) -> bool:
    # A gap the hook recorded before it knew the attempt carries None: it may be this one's.
    return (gap.get("iteration") in (None, cp["iteration"])
            and gap.get("attempt") in (None, cp["attempt"]))


def _gap_time(gap: dict) -> float | None:
    try:
        return datetime.fromisoformat(str(gap.get("ts"))).timestamp()
    except ValueError:
        return None


def _attempt_rows(view: HomeView, att: Attempt) -> tuple[list[dict], int]:
    """An attempt's live checkpoint rows and how many of its rows were pruned."""
    rows = view.ledger.attempt_checkpoints(att.pk)
    live = [r for r in rows if not r.get("pruned_at")]
    calls = view.ledger.tool_calls(att.key.run_id, att.key.node_id, att.key.attempt)
    return annotate(live, calls), len(rows) - len(live)


def _absolute(path: object, cwd: object) -> Path:
    if not isinstance(path, str) or not path or "\0" in path:
        raise ServiceError(BAD_REQUEST, f"path must be a non-empty string, not {path!r}")
    if cwd is not None and (not isinstance(cwd, str) or not os.path.isabs(cwd)):
        raise ServiceError(BAD_REQUEST, f"cwd must be an absolute path, not {cwd!r}")
    base = Path(cwd) if isinstance(cwd, str) else Path.cwd()
    joined = base / os.path.expanduser(path)
    try:
        # Worktree paths are stored resolved: resolve what exists (a deleted file need not).
        return joined.resolve(strict=False)
    except (OSError, RuntimeError):
        return Path(os.path.normpath(joined))


def _worktree_of(target: Path, worktrees: set[str]) -> str:
    """The innermost worktree the ledger knows that holds ``target``."""
    holding = [w for w in worktrees if target == Path(w) or Path(w) in target.parents]
    if not holding:
        known = ", ".join(sorted(worktrees)[:20]) or "none"
        raise ServiceError(NOT_FOUND, f"{target} is in no worktree snapshotd has "
                                             f"captured; known worktrees: {known}")
    return max(holding, key=len)


def _ms(started: float) -> float:
    return round((time.perf_counter() - started) * 1000, 3)
