"""Blame: which checkpoint (so which tool call) introduced each line of a file.

Owns ``blame_checkpoint`` (the ``blame`` op, CLI, MCP), ``blame_commit`` (store only: libgit2's
blame of one attempt's chain, hunks mapped to checkpoints by trailers; ``ops`` completes a reply
too large for a frame with it), ``BlameLines`` and ``attach``. Promises:
- Every line of PATH at checkpoint N (default: the attempt's newest) carries the checkpoint that
  introduced it (``seq``, ``tool_use_id``, ``label``, ``tier``, ``source``) and the tool call
  credited with it (``tool_call``: the checkpoint's own, a tier-2 one's owner, another session's
  that wrote it: ``review.others``), unless the base held it (``seq`` None); ``outside_tool_call``.
- The chain is linear: this is ``git blame --first-parent`` on the store; it writes nothing.
- Result (``public_shape``): ``{"path", "seq", "total_lines", "first_line", "last_line", "lines":
  [{"line", "text", "seq", "tool_use_id", "label", "tier", "source", "tool_call"}]}``.
- Bounded: past ``blame_max_lines`` lines or ``blame_max_bytes`` bytes of text (the range asked,
  else the file) it is refused before any work (``bad-request``, naming the limit and
  ``--lines A,B``); lines are kept compact (``BlameLines``), a dict made only when read.
"""

from __future__ import annotations

import time
from array import array
from collections.abc import Iterator, Sequence
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
from snapshotd.features.review.others import credit_blame
from snapshotd.service import ToolCallIndex, TurnIndex, find_checkpoint, selection

if TYPE_CHECKING:
    from snapshotd.core import Config, Registry
    from snapshotd.ledger import Ledger
    from snapshotd.service import Service

# A reply over this many bytes of line text leaves the lines out; the client blames from the
# store itself (the frame limit is 1 MiB).
WIRE_TEXT_LIMIT = 512 * 1024
LINE_KEYS = ("line", "text", "seq", "tool_use_id", "label", "tier", "source", "tool_call")


# -- public entry --------------------------------------------------------------------------------


def blame_checkpoint(service: Service, *, run_id: object, node_id: object, path: object,
                     seq: object = None, iteration: object = None, attempt: object = None,
                     first_line: object = None, last_line: object = None,
                     wire: bool = False) -> dict:
    """Blame ``path`` at checkpoint ``seq`` (default the newest) of the selected attempt, lines
    ``first_line``..``last_line`` (default all), within the configured limits."""
    started = time.perf_counter()
    run, node, s, i, a = selection(run_id, node_id, seq, iteration, attempt)
    first, last = _line_number("first_line", first_line), _line_number("last_line", last_line)
    if first is not None and last is not None and last < first:
        raise ServiceError(BAD_REQUEST, f"last_line {last} is before first_line {first}")
    cp = find_checkpoint(service.ledger, run, node, seq=s, iteration=i, attempt=a)
    rel = _relative(path, cp["worktree"])
    repo = service.store.reader()
    config = service.config
    lines = _measure(repo, cp["commit"], rel, first or 1, last, config.blame_max_lines,
                     config.blame_max_bytes)
    # Too large for a frame: the client blames it from the store, so the daemon does not.
    omit = wire and lines.text_bytes > WIRE_TEXT_LIMIT
    by_seq = calls_by_seq(service.ledger, cp, rel)
    if not omit:
        _fill(repo, cp["commit"], rel, lines)
        attribute(lines, by_seq)
        # Lines another session's tool call wrote, credited to it (review.others).
        credit_blame(service.ledger, repo, cp, rel, lines, lines.origins, lines.who)
    out: dict[str, Any] = {
        "path": rel, "seq": cp["seq"], "lines": lines, "total_lines": lines.total,
        "first_line": lines.first, "last_line": lines.first + len(lines) - 1, "run_id": run,
        "node_id": node, "iteration": cp["iteration"], "attempt": cp["attempt"],
        "commit": cp["commit"], "store": str(service.store.path),
        # The blamed checkpoint's turn (issue 44), from the daemon's own ledger.
        "turn": TurnIndex(service.ledger.turns(run, node)).of_checkpoint(cp)}
    if omit:
        out["lines"] = []
        out["lines_omitted"] = True
        # The client blames from the store; the tool calls are the ledger's: sent along.
        out["tool_calls_by_seq"] = [[seq, call] for seq, call in by_seq.items()]
    elif wire:
        out["lines"] = list(lines)
    out["elapsed_ms"] = round((time.perf_counter() - started) * 1000, 3)
    return out


class BlameLines(Sequence[dict]):
    """Blamed lines, compact: the file's bytes, where each line starts, and per line an index
    into the distinct origins (one per checkpoint); a line's dict is made only when it is read
    (200,000 dicts took 80 MiB; this takes a few bytes a line besides the file itself)."""

    def __init__(self, data: bytes, starts: array, first: int, total: int) -> None:
        self._data, self._starts = data, starts  # starts[k]: offset of line first + k; + end
        self.first, self.total = first, total
        self.who = array("I", bytes(4 * (len(starts) - 1)))
        self.origins: list[dict] = []

    def __len__(self) -> int:
        return len(self._starts) - 1

    @property
    def text_bytes(self) -> int:
        return self._starts[-1] - self._starts[0] if len(self) else 0

    def __getitem__(self, k: Any) -> Any:
        if isinstance(k, slice):
            return [self[j] for j in range(*k.indices(len(self)))]
        if k < 0:
            k += len(self)
        if not 0 <= k < len(self):
            raise IndexError(k)
        text = self._data[self._starts[k]:self._starts[k + 1]]
        if text.endswith(b"\n"):
            text = text[:-1]
        return {"line": self.first + k, "text": text.decode("utf-8", "replace"),
                **self.origins[self.who[k]]}

    def __iter__(self) -> Iterator[dict]:
        return (self[k] for k in range(len(self)))


def blame_commit(repo: pygit2.Repository, commit: str, path: str, *, first: int = 1,
                 last: int | None = None, max_lines: int | None = None,
                 max_bytes: int | None = None) -> BlameLines:
    """Lines ``first``..``last`` (default: to the end) of ``path`` in ``commit``, each with the
    checkpoint (by its trailers) that introduced it; ``not-found`` when the commit has no such
    file, ``bad-request`` past ``max_lines``/``max_bytes`` or for a range outside the file."""
    lines = _measure(repo, commit, path, first, last, max_lines, max_bytes)
    _fill(repo, commit, path, lines)
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
              "tier": None, "source": "base", "tool_call": None}
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
    data = new.data
    count = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    return set(range(1, count + 1)) - added, origin


def outside_tool_call(line: dict) -> bool:
    """Whether a blamed line came in outside the agent's tool calls (tier 2 that no tool call
    owns, a before-tool capture or guard checkpoint, a restore's safety checkpoint)."""
    if line.get("tool_call"):
        return False
    return line.get("tier") == 2 or line.get("source") in ("outside", "guard", "watch",
                                                           "restore")


def calls_by_seq(ledger: Ledger, cp: dict, path: str) -> dict[int, dict | None]:
    """The tool call each checkpoint of ``cp``'s attempt is credited with for a change of
    ``path`` (``service.tool_calls``: its own, its owner's), by seq."""
    rows = [r for r in ledger.checkpoints(cp["run_id"], cp["node_id"], cp["attempt"])
            if r["iteration"] == cp["iteration"]]
    index = ToolCallIndex(rows, ledger.tool_calls(cp["run_id"], cp["node_id"], cp["attempt"]))
    return {r["seq"]: index.of_change(r, path) for r in rows}


def attribute(lines: BlameLines, by_seq: dict[int, dict | None]) -> None:
    """Each blamed line's ``tool_call``: the one its checkpoint (``seq``) is credited with,
    None for a line its base held or a change no tool call made."""
    for origin in lines.origins:
        seq = origin.get("seq")
        origin["tool_call"] = by_seq.get(seq) if seq is not None else None


def public_shape(result: dict) -> dict:
    """The documented JSON of a blame: ``path``, ``seq``, the range and ``lines`` with their
    seven keys (``BlameLines`` as they are: they make exactly those, when read)."""
    lines = result["lines"]
    if not isinstance(lines, BlameLines):
        lines = [{k: x.get(k) for k in LINE_KEYS} for x in lines]
    return {"path": result["path"], "seq": result["seq"],
            "total_lines": result.get("total_lines"), "first_line": result.get("first_line"),
            "last_line": result.get("last_line"), "lines": lines}


def attach(service: Service, server: Registry, config: Config) -> None:
    """Register the ``blame`` op on the daemon's server."""

    def blame_op(fields: dict) -> dict:
        return blame_checkpoint(service, run_id=fields.get("run_id"),
                                node_id=fields.get("node_id"), path=fields.get("path"),
                                seq=fields.get("seq"), iteration=fields.get("iteration"),
                                attempt=fields.get("attempt"),
                                first_line=fields.get("first_line"),
                                last_line=fields.get("last_line"), wire=True)

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
            "tier": tier, "source": trailers.source, "tool_call": None}


def _measure(repo: pygit2.Repository, commit: str, path: str, first: int, last: int | None,
             max_lines: int | None, max_bytes: int | None) -> BlameLines:
    """The range's lines, not yet blamed, after the limits are checked (no blame done yet)."""
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
    data = repo[entry.id].peel(pygit2.Blob).data
    total = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    last = total if last is None else min(last, total)
    if total and first > total:
        raise ServiceError(BAD_REQUEST, f"{path} has {total} lines; line {first} is past its end")
    if last < first:
        return BlameLines(data, array("Q", [0]), first, total)
    _check_limits(path, first, last, total, max_lines, None)  # before the line offsets
    lines = BlameLines(data, _line_starts(data, first, last), first, total)
    _check_limits(path, first, last, total, max_bytes, lines.text_bytes)
    return lines


def _fill(repo: pygit2.Repository, commit: str, path: str, lines: BlameLines) -> None:
    """libgit2's blame of ``lines``' range only, each line pointed at its origin."""
    if not len(lines):
        return
    first, last = lines.first, lines.first + len(lines) - 1
    tip = repo[commit].peel(pygit2.Commit)
    blame = repo.blame(path, flags=BlameFlag.FIRST_PARENT, newest_commit=tip.id,
                       min_line=first, max_line=last)
    index: dict[pygit2.Oid, int] = {}
    bases: dict[tuple[pygit2.Oid, str], tuple[set[int], int] | None] = {}
    for hunk in blame:
        oid = hunk.final_commit_id
        if oid not in index:
            index[oid] = len(lines.origins)
            lines.origins.append(_origin(repo, oid))
        orig_path = hunk.orig_path or path
        if (oid, orig_path) not in bases:
            found = _base_lines(repo, oid, orig_path)
            bases[oid, orig_path] = None if found is None else (found[0], len(lines.origins))
            if found is not None:
                lines.origins.append(found[1])
        kept = bases[oid, orig_path]
        start = hunk.final_start_line_number
        for n in range(max(start, first), min(start + hunk.lines_in_hunk, last + 1)):
            orig = hunk.orig_start_line_number + n - start
            lines.who[n - first] = kept[1] if kept is not None and orig in kept[0] else index[oid]


def _line_starts(data: bytes, first: int, last: int) -> array:
    """Offsets of lines ``first``..``last`` (from 1) in ``data``, and where the last one ends."""
    starts = array("Q")
    at, n = 0, 1
    while n <= last:
        if n >= first:
            starts.append(at)
        nl = data.find(b"\n", at)
        at = len(data) if nl < 0 else nl + 1
        n += 1
    starts.append(at)
    return starts


def _check_limits(path: str, first: int, last: int, total: int, limit: int | None,
                  text_bytes: int | None) -> None:
    """Refuse past ``limit`` lines (``text_bytes`` None) or ``limit`` bytes of text."""
    count = last - first + 1
    if limit is None or (count if text_bytes is None else text_bytes) <= limit:
        return
    what = f"lines {first}-{last} of {path}" if count < total else f"{path}"
    over = (f"{count} lines, over blame_max_lines = {limit}" if text_bytes is None
            else f"{text_bytes} bytes of text, over blame_max_bytes = {limit}")
    raise ServiceError(BAD_REQUEST, f"refused to blame {what}: {over}; blame a range of it "
                       "(snapshotd blame --lines A,B; first_line/last_line) or raise the limit "
                       "in the daemon's config")


def _line_number(name: str, value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ServiceError(BAD_REQUEST, f"{name} must be a line number from 1, not {value!r}")
    return value


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
