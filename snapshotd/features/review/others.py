"""Other sessions' changes in a shared folder: which changes a checkpoint holds that another
attempt's tool call (or snapshotd event) made (issue 43, "Other actors are named, not absorbed").

Owns ``OtherSessions``, computed at read time: for checkpoint N of attempt A, each checkpoint C
of another attempt on the same worktree taken after A's previous checkpoint and before N, and
credited to a tool call (its own, its owner's; else an event held at it), claims every path
whose entry C introduced (C's tree has it, the tree before C does not) when N holds that very
entry; when N holds another version of a file C changed too (both edited), the path is
``mixed`` and ``blame`` splits it line by line (``credit_blame``); ``ForeignChanges`` serves a
whole command (show, log, find). Result per path (``foreign``):
``{"path", "run_id", "node_id", "iteration", "attempt", "seq", "tool_call", "mixed"}``.
Promises: bounded: another attempt's rows are read once per command (never one begun after the
checkpoint), indexed by time; each candidate's change is diffed once; it only reads.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import MutableSequence, Sequence

import pygit2

from snapshotd.features.review.base import first_base
from snapshotd.ledger import Attempt, Ledger
from snapshotd.service import annotate

FOREIGN_KEYS = ("run_id", "node_id", "iteration", "attempt", "seq")


class OtherSessions:
    """The credited checkpoints of every attempt on one worktree, by time, for the attempts
    there to ask which of their changes another attempt made."""

    def __init__(self, ledger: Ledger, repo: pygit2.Repository, worktree: str) -> None:
        self.ledger, self.repo = ledger, repo
        self.attempts = [a for a in ledger.attempts() if a.worktree == worktree]
        self._rows: dict[tuple, tuple[list[dict], list[float]]] = {}
        self._changed: dict[tuple, dict[str, str | None]] = {}

    def candidates(self, cp: dict, after: float | None) -> list[dict]:
        """Other attempts' credited checkpoints taken after ``after`` and before ``cp``, oldest
        first (an attempt begun after ``cp`` is never read)."""
        out: list[dict] = []
        for att in self.attempts:
            key = (att.key.run_id, att.key.node_id, att.key.iteration, att.key.attempt)
            if key == _key(cp) or att.started_at > cp["created_at"]:
                continue
            rows, times = self._rows_of(att, key)
            low = 0 if after is None else bisect_right(times, after)
            out += rows[low:bisect_left(times, cp["created_at"])]
        return sorted(out, key=lambda r: (r["created_at"], r["seq"]))

    def _rows_of(self, att: Attempt, key: tuple) -> tuple[list[dict], list[float]]:
        """An attempt's credited checkpoints by time, read once."""
        if key not in self._rows:
            live = [r for r in self.ledger.attempt_checkpoints(att.pk) if not r.get("pruned_at")]
            calls = self.ledger.tool_calls(att.key.run_id, att.key.node_id, att.key.attempt)
            trees = {r["commit"]: r["tree"] for r in live}
            rows = []
            for row in annotate(live, calls):
                credit = row["tool_call"] or next(
                    (t for t in row["tool_calls"] if t.get("kind")), None)
                if credit is not None:
                    rows.append(dict(row, credit=credit, before=self._before(row, trees)))
            rows.sort(key=lambda r: (r["created_at"], r["seq"]))
            self._rows[key] = rows, [r["created_at"] for r in rows]
        return self._rows[key]

    def foreign(self, cp: dict, before: str | None, after: float | None) -> list[dict]:
        """The paths of ``cp``'s change (from tree ``before``, None: empty) that another
        attempt's checkpoint taken after ``after`` (None: any time) and before ``cp`` made."""
        out: dict[str, dict] = {}
        for other in reversed(self.candidates(cp, after)):
            for path, entry in self._changes(other).items():
                if path in out:
                    continue
                now, then = _entry(self.repo, cp["tree"], path), _entry(self.repo, before, path)
                if now == then or entry == then:
                    # Not part of this change; or this attempt held that entry before the
                    # other one did (the other absorbed it: this attempt's, not the other's).
                    continue
                if now == entry or (now is not None and entry is not None):
                    out[path] = dict({k: other[k] for k in FOREIGN_KEYS}, path=path,
                                     tool_call=_call(other), mixed=now != entry)
        return [out[p] for p in sorted(out)]

    def credit_lines(self, cp: dict, before: str | None, after: float | None, path: str,
                     texts: list[str]) -> list[dict | None]:
        """For lines ``texts`` of ``path`` that ``cp``'s change introduced: the credit (a
        ``foreign`` entry) of each line another attempt's tool call wrote, None for the rest."""
        found = next((f for f in self.foreign(cp, before, after) if f["path"] == path), None)
        if found is None:
            return [None] * len(texts)
        if not found["mixed"]:
            return [found] * len(texts)
        other = next(r for r in self.candidates(cp, after)
                     if all(r[k] == found[k] for k in FOREIGN_KEYS))
        added = _added_lines(self.repo, other["before"], other["tree"], path)
        return [found if text in added else None for text in texts]

    def _changes(self, row: dict) -> dict[str, str | None]:
        """path -> the entry id ``row``'s checkpoint left there (None: deleted), diffed once."""
        place = (_key(row), row["seq"])
        if place not in self._changed:
            new = self.repo[row["tree"]].peel(pygit2.Tree)
            if row["before"] is None:
                diff = new.diff_to_tree(swap=True)
            else:
                diff = self.repo.diff(self.repo[row["before"]].peel(pygit2.Tree), new)
            self._changed[place] = {
                d.new_file.path if d.status != pygit2.enums.DeltaStatus.DELETED
                else d.old_file.path: (str(d.new_file.id) if d.status !=
                                       pygit2.enums.DeltaStatus.DELETED else None)
                for d in diff.deltas}
        return self._changed[place]

    def _before(self, row: dict, trees: dict[str, str]) -> str | None:
        """The tree ``row``'s change is measured from: its parent's, or its base's."""
        if row["parent"]:
            if row["parent"] in trees:
                return trees[row["parent"]]
            return str(self.repo[row["parent"]].peel(pygit2.Commit).tree_id)
        return first_base(self.repo, row).tree


class ForeignChanges:
    """One command's view of other sessions: an ``OtherSessions`` per worktree, built when
    first asked, and each checkpoint's ``foreign`` list from its attempt's rows."""

    def __init__(self, ledger: Ledger, repo: pygit2.Repository) -> None:
        self.ledger, self.repo = ledger, repo
        self._sessions: dict[str, OtherSessions] = {}

    def sessions(self, worktree: str) -> OtherSessions:
        if worktree not in self._sessions:
            self._sessions[worktree] = OtherSessions(self.ledger, self.repo, worktree)
        return self._sessions[worktree]

    def window(self, cp: dict, by_commit: dict[str, dict]) -> tuple[str | None, float | None]:
        """The tree ``cp``'s change starts from and when (None: the first checkpoint's base,
        at any time before it; a parent the rows lack is read from the store)."""
        parent = cp.get("parent")
        if not parent:
            return first_base(self.repo, cp).tree, None
        row = by_commit.get(parent)
        if row is not None:
            return row["tree"], row["created_at"]
        return str(self.repo[parent].peel(pygit2.Commit).tree_id), None

    def of(self, cp: dict, by_commit: dict[str, dict]) -> list[dict]:
        """``cp``'s ``foreign`` list (its attempt's rows by commit give its parent)."""
        before, after = self.window(cp, by_commit)
        return self.sessions(cp["worktree"]).foreign(cp, before, after)

    def of_path(self, cp: dict, by_commit: dict[str, dict], path: str) -> dict | None:
        """The ``foreign`` entry of ``path`` in ``cp``'s change, None when it is its own."""
        return next((f for f in self.of(cp, by_commit) if f["path"] == path), None)


def credit_blame(ledger: Ledger, repo: pygit2.Repository, cp: dict, path: str,
                 lines: Sequence[dict], origins: list[dict], who: MutableSequence[int]) -> None:
    """Blamed lines of ``path`` (``BlameLines``: its ``origins`` and per line ``who``) whose
    checkpoint of ``cp``'s attempt holds another session's change of them, credited to that
    session's tool call: the line's ``tool_call`` (with its run, node and seq), ``tool_use_id``
    and ``label`` are the other call's; ``seq`` stays the checkpoint it landed in."""
    rows = [r for r in ledger.checkpoints(cp["run_id"], cp["node_id"], cp["attempt"])
            if r["iteration"] == cp["iteration"]]
    by_seq = {r["seq"]: r for r in rows}
    by_commit = {r["commit"]: r for r in rows}
    changes = ForeignChanges(ledger, repo)
    of_origin: dict[int, list[int]] = {}
    for k, index in enumerate(who):
        of_origin.setdefault(index, []).append(k)
    for index, origin in enumerate(list(origins)):
        row = by_seq.get(origin.get("seq")) if origin.get("source") != "base" else None
        ks = of_origin.get(index)
        if row is None or not ks:
            continue
        before, after = changes.window(row, by_commit)
        credits = changes.sessions(row["worktree"]).credit_lines(
            row, before, after, path, [lines[k]["text"] for k in ks])
        made: dict[tuple, int] = {}
        for k, credit in zip(ks, credits, strict=True):
            if credit is None:
                continue
            place = tuple(credit[f] for f in FOREIGN_KEYS)
            if place not in made:
                made[place] = len(origins)
                call = credit["tool_call"]
                origins.append(dict(origin, tool_call=call, tool_use_id=call["id"],
                                    label=call["label"]))
            who[k] = made[place]


def _call(row: dict) -> dict:
    credit = row["credit"]
    return {"id": credit["id"], "label": credit.get("label"), "how": credit.get("how"),
            "kind": credit.get("kind"), **{k: row[k] for k in FOREIGN_KEYS}}


def _key(row: dict) -> tuple:
    return row["run_id"], row["node_id"], row["iteration"], row["attempt"]


def _entry(repo: pygit2.Repository, tree_id: str | None, path: str) -> str | None:
    if tree_id is None:
        return None
    try:
        return str(repo[tree_id].peel(pygit2.Tree)[path].id)
    except KeyError:
        return None


def _added_lines(repo: pygit2.Repository, before: str | None, after: str, path: str) -> set[str]:
    """The lines (without their newline) the change from ``before`` to ``after`` added to
    ``path``."""
    new = _entry(repo, after, path)
    old = _entry(repo, before, path)
    if new is None:
        return set()
    patch = pygit2.Patch.create_from(repo[old].peel(pygit2.Blob) if old else None,
                                     repo[new].peel(pygit2.Blob), context_lines=0)
    # Decoded as blame's lines are (``BlameLines``): compared text to text.
    return {ln.raw_content.rstrip(b"\n").decode("utf-8", "replace") for h in patch.hunks
            for ln in h.lines if ln.origin == "+"}
