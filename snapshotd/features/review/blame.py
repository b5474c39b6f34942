"""Blame: which checkpoint (so which tool call) introduced each line of a file.

Owns ``blame_checkpoint`` (behind the ``blame`` op, ``snapshotd blame`` and the MCP tool),
``blame_commit`` (the store-only part: libgit2's blame over one attempt's commit chain, each hunk
mapped to its checkpoint through the commit trailers) and ``attach`` (the ``blame`` op); front
ends reach it through ``ops`` (a reply too large for a frame completed with ``blame_commit``).
Promises:
- Every line of PATH at checkpoint N (default: the attempt's newest) carries the checkpoint that
  introduced it (``seq``, ``tool_use_id``, ``label``, ``tier``, ``source``): since the first
  (oldest kept) checkpoint, that one, unless its base held it (``review.base``: ``seq`` None,
  ``source`` ``base``); from a tier-2, ``outside`` or ``restore`` capture: ``outside_tool_call``.
- The chain is linear, so this is ``git blame --first-parent`` on the store: it reads only the
  store's objects and one ledger lookup, and writes nothing.
- Result (``public_shape``): ``{"path", "seq", "lines": [{"line", "text", "seq", "tool_use_id",
  "label", "tier", "source"}]}`` (lines numbered from 1, text without its newline).
"""

from __future__ import annotations

import time
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

import pygit2
from pygit2.enums import BlameFlag

from snapshotd.core import (
    BAD_REQUEST,
    DEFAULT_TIER,
    NOT_FOUND,
    SEQ,
    ServiceError,
    TrailerError,
    Trailers,
)
from snapshotd.features.review.base import base_tree_of_root
from snapshotd.service import find_checkpoint, selection

if TYPE_CHECKING:
    from snapshotd.core import Config, Registry
    from snapshotd.service import Service

# A reply over this many bytes of line text leaves the lines out; the client blames from the
# store itself (the frame limit is 1 MiB).
WIRE_TEXT_LIMIT = 512 * 1024
LINE_KEYS = ("line", "text", "seq", "tool_use_id", "label", "tier", "source")


# -- public entry --------------------------------------------------------------------------------


def blame_checkpoint(service: Service, *, run_id: object, node_id: object, path: object,
                     seq: object = None, iteration: object = None, attempt: object = None,
                     wire: bool = False) -> dict:
    """Blame ``path`` at checkpoint ``seq`` (default the newest) of the selected attempt."""
    started = time.perf_counter()
    run, node, s, i, a = selection(run_id, node_id, seq, iteration, attempt)
    cp = find_checkpoint(service.ledger, run, node, seq=s, iteration=i, attempt=a)
    rel = _relative(path, cp["worktree"])
    repo = service.store.reader()
    lines = blame_commit(repo, cp["commit"], rel)
    out: dict[str, Any] = {
        "path": rel, "seq": cp["seq"], "lines": lines, "run_id": run, "node_id": node,
        "iteration": cp["iteration"], "attempt": cp["attempt"], "commit": cp["commit"],
        "store": str(service.store.path)}
    if wire and sum(len(x["text"]) for x in lines) > WIRE_TEXT_LIMIT:
        out["lines"] = []
        out["lines_omitted"] = True
    out["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return out


def blame_commit(repo: pygit2.Repository, commit: str, path: str) -> list[dict]:
    """Every line of ``path`` in ``commit`` with the checkpoint (by its trailers) that
    introduced it; ``not-found`` when the commit has no such file."""
    tip = repo[commit].peel(pygit2.Commit)
    try:
        entry = tip.tree[path]
    except KeyError:
        raise ServiceError(NOT_FOUND, f"{path} is not in checkpoint "
                           f"{_seq_text(tip.message)} "
                           f"({commit[:12]})") from None
    if entry.type_str != "blob":
        raise ServiceError(BAD_REQUEST, f"{path} is a directory in that checkpoint; "
                           "name a file")
    texts = split_lines(repo[entry.id].peel(pygit2.Blob).data)
    if not texts:
        return []
    blame = repo.blame(path, flags=BlameFlag.FIRST_PARENT, newest_commit=tip.id)
    origins: dict[pygit2.Oid, dict] = {}
    lines: list[dict] = []
    for hunk in blame:
        oid = hunk.final_commit_id
        origin = origins.get(oid)
        if origin is None:
            origin = origins[oid] = _origin(repo, oid)
        start = hunk.final_start_line_number
        kept = _base_lines(repo, oid, hunk.orig_path or path)
        for n in range(start, start + hunk.lines_in_hunk):
            orig = hunk.orig_start_line_number + n - start
            who = kept[1] if kept is not None and orig in kept[0] else origin
            lines.append(dict(who, line=n, text=texts[n - 1]))
    return lines


def _base_lines(repo: pygit2.Repository, oid: pygit2.Oid,
                path: str) -> tuple[set[int], dict] | None:
    """For the chain's root commit with a kept base: the line numbers of ``path`` in it that the
    base's file already held (git's boundary lines), and the base's origin; else None."""
    commit = repo[oid].peel(pygit2.Commit)
    found = base_tree_of_root(repo, commit)
    if found is None:
        return None
    tree, base = found
    origin = {"seq": None, "tool_use_id": None, "label": f"before the session ({base[:8]})",
              "tier": None, "source": "base"}
    try:
        new = repo[commit.tree[path].id].peel(pygit2.Blob)
    except KeyError:
        return None
    try:
        old: pygit2.Blob | None = repo[repo[tree].peel(pygit2.Tree)[path].id].peel(pygit2.Blob)
    except (KeyError, ValueError):
        old = None
    if old is None:
        return set(), origin
    patch = pygit2.Patch.create_from(old, new, context_lines=0)
    added = {ln.new_lineno for h in patch.hunks for ln in h.lines if ln.origin == "+"}
    return set(range(1, len(split_lines(new.data)) + 1)) - added, origin


def split_lines(data: bytes) -> list[str]:
    """A file's lines as git blame counts them (a last line without newline counts)."""
    if not data:
        return []
    parts = data.split(b"\n")
    if parts[-1] == b"":
        parts.pop()
    return [p.decode("utf-8", "replace") for p in parts]


def outside_tool_call(line: dict) -> bool:
    """Whether a blamed line came in outside the agent's tool calls (tier 2, a before-tool
    capture, a restore's safety checkpoint)."""
    return line.get("tier") == 2 or line.get("source") in ("outside", "watch", "restore")


def public_shape(result: dict) -> dict:
    """The documented JSON of a blame: ``path``, ``seq`` and ``lines`` with their seven keys."""
    return {"path": result["path"], "seq": result["seq"],
            "lines": [{k: x.get(k) for k in LINE_KEYS} for x in result["lines"]]}


def attach(service: Service, server: Registry, config: Config) -> None:
    """Register the ``blame`` op on the daemon's server."""

    def blame_op(fields: dict) -> dict:
        return blame_checkpoint(service, run_id=fields.get("run_id"),
                                node_id=fields.get("node_id"), path=fields.get("path"),
                                seq=fields.get("seq"), iteration=fields.get("iteration"),
                                attempt=fields.get("attempt"), wire=True)

    server.register("blame", blame_op)


# -- helpers -------------------------------------------------------------------------------------


def _origin(repo: pygit2.Repository, oid: pygit2.Oid) -> dict:
    trailers = Trailers(repo[oid].peel(pygit2.Commit).message)
    try:
        seq, tier = trailers.seq, trailers.tier
    except TrailerError:
        seq = tier = None
    if seq is None:
        tier = None  # not a checkpoint commit: a store written by something else
    elif tier is None:
        tier = DEFAULT_TIER
    return {"seq": seq, "tool_use_id": trailers.tool_use_id, "label": trailers.label,
            "tier": tier, "source": trailers.source}


def _seq_text(message: str) -> str:
    """A checkpoint's seq as its trailer spells it, for a message: ``?`` when it has none."""
    return Trailers(message).raw.get(SEQ, "?")


def _relative(path: object, worktree: str) -> str:
    """``path`` as a store path: relative to the worktree (an absolute path must lie in it),
    normalized, never leaving it."""
    if not isinstance(path, str) or not path or "\0" in path:
        raise ServiceError(BAD_REQUEST, "path must be a non-empty file path")
    p = PurePosixPath(path)
    if p.is_absolute():
        try:
            p = p.relative_to(PurePosixPath(worktree))
        except ValueError:
            raise ServiceError(BAD_REQUEST, f"{path} is not inside the attempt's "
                               f"worktree {worktree}") from None
    parts = [x for x in p.parts if x not in ("", ".")]
    if not parts or ".." in parts:
        raise ServiceError(BAD_REQUEST, f"path {path!r} must name a file inside the "
                           "worktree")
    return "/".join(parts)
