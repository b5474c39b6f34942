"""The checkpoint, snapshotd's central noun, as one type: ``Checkpoint``, with its commit message
(``to_message``/``from_commit``), its ledger row (``to_row``/``from_row``), its reply on the
wire (``to_reply``) and the message of its commit exported to a user's repository.

Promises:
- The only module of snapshotd that spells a trailer name (tests/test_boundaries.py): the
  trailers name the attempt, seq, tier, source and worktree (and the tool call, label, base and
  secret findings when there are any), one line each, so the ledger can be rebuilt from the
  store alone (docs/durability.md, "A damaged ledger"). Messages are byte for byte as before.
- Trailers are read by one rule (``Trailers``): an absent trailer reads as None, and the caller
  says what that means; one that is present but malformed raises ``TrailerError`` (a
  ``ValueError``). ``from_commit`` needs the seq trailer: without it a commit is no checkpoint.
- ``to_row`` is the one builder of a ledger row: a capture's (``Recorder``) and a row rebuilt
  from its commit (``reconcile``) differ only in what the commit cannot know (see there).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from snapshotd.core.keys import AttemptKey
from snapshotd.core.secrets import redacted_line

if TYPE_CHECKING:
    import pygit2

# The trailer names, spelled here only (grep finds their one home).
PREFIX = "Snapshotd-"
RUN, NODE = "Snapshotd-Run", "Snapshotd-Node"
ITERATION, ATTEMPT = "Snapshotd-Iteration", "Snapshotd-Attempt"
SEQ, SEQS = "Snapshotd-Seq", "Snapshotd-Seqs"  # Seqs: an exported squash's
TIER, SOURCE = "Snapshotd-Tier", "Snapshotd-Source"
TOOL_USE_ID, LABEL = "Snapshotd-Tool-Use-Id", "Snapshotd-Label"
WORKTREE, BASE, SECRETS = "Snapshotd-Worktree", "Snapshotd-Base", "Snapshotd-Secrets"
BASE_TREE = "Snapshotd-Base-Tree"  # the base commit's tree, kept in the store (review's base)
# A tier-2 checkpoint taken while a tool call ran: "HOW ID" (how: "in-flight"). An owner
# inferred later is the ledger's alone (the commit is written before it is known).
OWNER = "Snapshotd-Owner"
# Defaults of the trailers a commit may lack when its row is rebuilt (``from_commit``): those of
# the oldest checkpoints, written before tiers and sources were recorded.
DEFAULT_TIER = 1
DEFAULT_SOURCE = "hook"
# Longest one-line text in a trailer: the store's own commits, and those export writes.
_STORE_LINE = 300
_EXPORT_LINE = 200


class TrailerError(ValueError):
    """A trailer that is present but cannot be read (``name``, its ``value`` as written)."""

    def __init__(self, name: str, value: str, why: str) -> None:
        super().__init__(f"the {name} trailer {value!r} {why}")
        self.name = name
        self.value = value


class Trailers:
    """The trailers of one commit message, each read by the one rule: absent is None,
    malformed raises ``TrailerError``. Integers are parsed when asked for, so a bad trailer
    fails only the caller that reads it."""

    def __init__(self, message: str) -> None:
        self.raw = parse_trailers(message)

    def _int(self, name: str) -> int | None:
        value = self.raw.get(name)
        if value is None:
            return None
        try:
            return int(value)
        except ValueError:
            raise TrailerError(name, value, "is not an integer") from None

    @property
    def seq(self) -> int | None:
        return self._int(SEQ)

    @property
    def tier(self) -> int | None:
        return self._int(TIER)

    @property
    def source(self) -> str | None:
        return self.raw.get(SOURCE)

    @property
    def label(self) -> str | None:
        return self.raw.get(LABEL)

    @property
    def tool_use_id(self) -> str | None:
        return self.raw.get(TOOL_USE_ID)

    @property
    def worktree(self) -> str | None:
        return self.raw.get(WORKTREE)

    @property
    def base(self) -> str | None:
        return self.raw.get(BASE)

    @property
    def base_tree(self) -> str | None:
        return self.raw.get(BASE_TREE)

    @property
    def owner(self) -> tuple[str, str] | None:
        """``(how, tool_use_id)`` of the owner trailer, None when absent."""
        value = self.raw.get(OWNER)
        if value is None:
            return None
        how, _, owner = value.partition(" ")
        if not how or not owner:
            raise TrailerError(OWNER, value, "is not 'HOW TOOL_USE_ID'")
        return how, owner

    @property
    def secrets_text(self) -> str | None:
        """The secret findings' mark as written (JSON): readers decide how to treat one they
        cannot parse (``withhold`` holds the commit back)."""
        return self.raw.get(SECRETS)

    def key_mismatch(self, key: AttemptKey) -> str | None:
        """The first attempt trailer that does not spell ``key`` exactly, as ``NAME 'found',
        not 'expected'``; None when all four do."""
        expected = {RUN: key.run_id, NODE: key.node_id, ITERATION: str(key.iteration),
                    ATTEMPT: str(key.attempt)}
        for name, value in expected.items():
            if self.raw.get(name) != value:
                return f"{name} {self.raw.get(name)!r}, not {value!r}"
        return None


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of an attempt: what its commit's trailers carry, and what its ledger row
    adds (the commit, tree and parent ids, when it was taken, the change counts, the paths the
    capture skipped)."""

    key: AttemptKey
    seq: int
    tier: int = DEFAULT_TIER
    source: str = DEFAULT_SOURCE
    worktree: str = ""
    label: str | None = None
    tool_use_id: str | None = None
    # The user's HEAD commit when the attempt began (its first checkpoint only): export's base.
    base: str | None = None
    # That commit's tree, brought into the store for review (``show``/``log``/``blame`` of the
    # first checkpoint compare with it); None when it could not be.
    base_tree: str | None = None
    # Tokens found in the files this checkpoint changed: [{"path", "line", "kind"}]. A commit
    # holding any is withheld from replication until released (``withhold``).
    secrets: list[dict] | None = None
    # The tool call a tier-2 checkpoint belongs to although it is not its capture (issue 43):
    # its id, and how ("in-flight": taken between its start and end; "inferred").
    owner: str | None = None
    owner_how: str | None = None
    commit: str | None = None
    tree: str | None = None
    parent: str | None = None
    created_at: float | None = None  # None: now, when the row is built
    added: int = 0
    modified: int = 0
    deleted: int = 0
    skipped: list | None = None
    # The secrets trailer as the commit carries it (``from_commit``): a rebuilt row keeps the
    # mark verbatim, so one that cannot be parsed still marks the row (``withhold``).
    secrets_text: str | None = field(default=None, compare=False, repr=False)

    # -- the commit message ----------------------------------------------------------------

    def to_message(self) -> str:
        """The checkpoint commit's message: a subject, then the trailers."""
        label = redacted_line(self.label, _STORE_LINE, "") if self.label else ""
        subject = f"snapshotd: {self.source} seq {self.seq}" + (f" {label}" if label else "")
        trailers = [(RUN, self.key.run_id), (NODE, self.key.node_id),
                    (ITERATION, str(self.key.iteration)), (ATTEMPT, str(self.key.attempt)),
                    (SEQ, str(self.seq)), (TIER, str(self.tier)), (SOURCE, self.source)]
        if self.tool_use_id:
            trailers.append((TOOL_USE_ID, redacted_line(self.tool_use_id, _STORE_LINE, "")))
        if label:
            trailers.append((LABEL, label))
        trailers.append((WORKTREE, _one_line(self.worktree, _STORE_LINE)))
        if self.base:
            trailers.append((BASE, self.base))
        if self.base and self.base_tree:
            trailers.append((BASE_TREE, self.base_tree))
        if self.owner and self.owner_how:
            trailers.append((OWNER, f"{self.owner_how} "
                             + redacted_line(self.owner, _STORE_LINE, "")))
        if self.secrets:
            trailers.append((SECRETS, json.dumps(self.secrets, ensure_ascii=True,
                                                 separators=(",", ":"))))
        return subject + "\n\n" + _lines(trailers)

    @classmethod
    def from_commit(cls, commit: pygit2.Commit, key: AttemptKey, *,
                    worktree: str) -> Checkpoint:
        """The checkpoint ``commit`` of attempt ``key`` records (the ref names the attempt; its
        trailers are not checked against it). Absent trailers take the defaults of the oldest
        checkpoints (tier 1, source ``hook``, ``worktree``: the attempt's); created when the
        commit was. ``TrailerError`` when the seq is absent or a trailer is malformed."""
        t = Trailers(commit.message)
        seq = t.seq
        if seq is None:
            raise TrailerError(SEQ, "", "is absent: not a checkpoint commit")
        tier = t.tier
        owner = t.owner
        return cls(key=key, seq=seq, tier=DEFAULT_TIER if tier is None else tier,
                   source=t.raw.get(SOURCE, DEFAULT_SOURCE), worktree=t.raw.get(WORKTREE, worktree),
                   label=t.label, tool_use_id=t.tool_use_id, base=t.base,
                   base_tree=t.base_tree,
                   owner=owner[1] if owner else None, owner_how=owner[0] if owner else None,
                   commit=str(commit.id), tree=str(commit.tree_id),
                   parent=str(commit.parents[0].id) if commit.parents else None,
                   created_at=float(commit.commit_time), secrets_text=t.secrets_text)

    # -- the ledger row ----------------------------------------------------------------------

    def to_row(self) -> dict:
        """The row ``Ledger.record_checkpoint`` inserts. JSON columns are ``json_text``; a
        checkpoint read from its commit keeps the secrets trailer's text as it is. The only
        differences between a capture's row and a rebuilt one are what a commit cannot tell:
        the change counts (0) and skipped paths (None), and the time (the commit's, whole
        seconds, instead of the capture's)."""
        if self.secrets_text is not None:
            secrets: str | None = self.secrets_text
        else:
            secrets = json_text(self.secrets) if self.secrets else None
        return {"seq": self.seq, "commit": self.commit, "tree": self.tree,
                "parent": self.parent, "source": self.source, "tier": self.tier,
                "label": self.label, "tool_use_id": self.tool_use_id,
                "worktree": self.worktree, "added": self.added, "modified": self.modified,
                "deleted": self.deleted,
                "created_at": time.time() if self.created_at is None else self.created_at,
                "skipped": json_text(self.skipped) if self.skipped else None,
                "secrets": secrets, "owner": self.owner, "owner_how": self.owner_how}

    @classmethod
    def from_row(cls, row: dict) -> Checkpoint:
        """The checkpoint a ledger row (as ``Ledger`` reads it back: with its attempt's key and
        its JSON columns parsed) describes."""
        return cls(key=AttemptKey(row["run_id"], row["node_id"], row["iteration"],
                                  row["attempt"]),
                   seq=row["seq"], tier=row.get("tier", DEFAULT_TIER),
                   source=row.get("source", DEFAULT_SOURCE), worktree=row.get("worktree", ""),
                   label=row.get("label"), tool_use_id=row.get("tool_use_id"),
                   secrets=row.get("secrets") or None, owner=row.get("owner"),
                   owner_how=row.get("owner_how"), commit=row.get("commit"),
                   tree=row.get("tree"), parent=row.get("parent"),
                   created_at=row.get("created_at"), added=row.get("added", 0),
                   modified=row.get("modified", 0), deleted=row.get("deleted", 0),
                   skipped=row.get("skipped") or None)

    # -- the reply -------------------------------------------------------------------------

    def to_reply(self, *, deduped: bool, elapsed_ms: float, repeated: bool = False,
                 skipped: list | None = None, changes: dict | None = None,
                 scan: str | None = None) -> dict:
        """The reply to the capture this checkpoint answers: the attempt's key, ``seq``,
        ``commit``, ``tree``, ``deduped``, ``elapsed_ms``, ``worktree``, ``skipped``,
        ``changes``, then ``repeated`` (only when true) and ``scan`` (when known)."""
        out: dict = self.key.as_dict()
        out.update(seq=self.seq, commit=self.commit, tree=self.tree, deduped=deduped,
                   elapsed_ms=elapsed_ms, worktree=self.worktree, skipped=skipped or [],
                   changes=changes or {"added": 0, "modified": 0, "deleted": 0})
        if repeated:
            out["repeated"] = True
        if scan is not None:
            out["scan"] = scan  # "fast" (the watcher's changed paths) or "full" (a stat scan)
        return out

    # -- export to the user's repository ------------------------------------------------------

    def export_message(self, owner: dict | None = None) -> str:
        """The message of this checkpoint's commit in the user's repository: the tool call's
        label (else ``snapshotd: SOURCE seq N``), then the attempt, seq and tool call. A tier-2
        checkpoint a tool call owns (``owner``: its ``id`` and ``label``, the read model's
        ``tool_call``) is named by that call, as its own capture would be."""
        label, _tool = self.named_by(owner)
        subject = (redacted_line(label or "", _EXPORT_LINE, "")
                   or f"snapshotd: {self.source} seq {self.seq}")
        return subject + "\n\n" + self._export_trailers([(SEQ, str(self.seq))], tool=True,
                                                        owner=owner)

    def named_by(self, owner: dict | None) -> tuple[str | None, str | None]:
        """The label and tool call id an export names this checkpoint by: its own, else those
        of the tool call that owns it."""
        if self.tool_use_id or not owner or not owner.get("id"):
            return self.label, self.tool_use_id
        return owner.get("label") or self.label, str(owner["id"])

    def _export_trailers(self, seq: list[tuple[str, str]], *, tool: bool,
                         owner: dict | None = None) -> str:
        pairs = [(RUN, self.key.run_id), (NODE, self.key.node_id),
                 (ITERATION, str(self.key.iteration)), (ATTEMPT, str(self.key.attempt)), *seq]
        tool_id = self.named_by(owner)[1]
        if tool and tool_id:
            pairs.append((TOOL_USE_ID, redacted_line(tool_id, _EXPORT_LINE, "")))
        return _lines(pairs)


def squash_message(checkpoints: list[Checkpoint], seqs: str,
                   owners: list[dict | None] | None = None) -> str:
    """The message of one exported commit squashing ``checkpoints`` (oldest first; ``seqs``:
    their seqs as ``format_seqs`` prints them): one body line per checkpoint, named by its tool
    call (``owners``: the tool call owning each tier-2 one, ``Checkpoint.named_by``)."""
    last = checkpoints[-1]
    subject = f"snapshotd: {last.key.run_id}/{last.key.node_id} checkpoints {seqs}"
    named = [c.named_by(o) for c, o in zip(checkpoints, owners or [None] * len(checkpoints),
                                           strict=True)]
    body = "".join(f"- seq {c.seq}: {redacted_line(label or '', _EXPORT_LINE, '') or c.source}"
                   + (f" [{redacted_line(tool, _EXPORT_LINE, '')}]" if tool else "") + "\n"
                   for c, (label, tool) in zip(checkpoints, named, strict=True))
    return subject + "\n\n" + body + "\n" + last._export_trailers([(SEQS, seqs)], tool=False)


def parse_trailers(message: str) -> dict[str, str]:
    """The trailers of a checkpoint commit message, by name, as written (the UI shows them)."""
    out: dict[str, str] = {}
    for line in message.splitlines():
        if line.startswith(PREFIX) and ": " in line:
            key, value = line.split(": ", 1)
            out[key] = value
    return out


def without_findings(message: str, path: str) -> str:
    """``message`` with the secrets trailer's findings at ``path`` or under it (a directory)
    left out, the trailer gone when none remain: after a purge the finding goes with the
    content. A trailer that cannot be read stays as it is (``withhold`` holds it back)."""
    out = []
    for line in message.splitlines(keepends=True):
        if line.startswith(f"{SECRETS}: "):
            try:
                found = json.loads(line.split(": ", 1)[1])
            except ValueError:
                found = None
            if isinstance(found, list):
                kept = [f for f in found if not (isinstance(f, dict) and _under(f.get("path"),
                                                                                 path))]
                if not kept:
                    continue
                line = f"{SECRETS}: {json.dumps(kept, ensure_ascii=True, separators=(',', ':'))}\n"
        out.append(line)
    return "".join(out)


def _under(found: object, path: str) -> bool:
    return isinstance(found, str) and (found == path or found.startswith(path.rstrip("/") + "/"))


def json_text(value: object) -> str:
    """``value`` as JSON text a ledger TEXT column can store: a name's bytes that are not UTF-8
    (the lone surrogates ``os.fsdecode`` makes) become ``\\udcNN`` escapes, which ``json.loads``
    turns back into the same string."""
    return json.dumps(value, ensure_ascii=False).encode("utf-8", "backslashreplace").decode()


def _lines(pairs: list[tuple[str, str]]) -> str:
    return "".join(f"{k}: {v}\n" for k, v in pairs)


def _one_line(text: str, limit: int) -> str:
    return " ".join(str(text).split())[:limit]
