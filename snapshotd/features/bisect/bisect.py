"""``snapshotd bisect``: the first checkpoint of an attempt on which a command fails.

Owns ``plan_bisect`` (the attempt, its good and bad ends, the live checkpoints between) and
``bisect_attempt`` (the search: ``search.Search`` picks, ``scratch.ScratchTree`` moves one
scratch directory by diff, ``runner.run_command`` runs the command there). Promises:
- Read only: the ledger and the store are read through a ``HomeView``; the user's worktree,
  the store (objects and refs) and the ledger are never written.
- The scratch directory is one new 0700 directory under ``scratch_parent`` (``$TMPDIR``),
  refused inside the worktree or the home, and removed when the search ends, fails or is
  interrupted (any exception, Ctrl-C included, is re-raised after the removal).
- Pruned checkpoints are never candidates (``pruned_skipped`` counts them); at most
  ``max_steps`` runs, then ``incomplete``. Result shape and exit codes: docs/bisect.md.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from snapshotd.core import BAD_REQUEST, ServiceError
from snapshotd.features.bisect.runner import Outcome, run_command
from snapshotd.features.bisect.scratch import ScratchTree, remove_tree
from snapshotd.features.bisect.search import Search
from snapshotd.features.bisect.treediff import diff_stat
from snapshotd.service import find_checkpoint, selection

if TYPE_CHECKING:
    from snapshotd.features.review import HomeView

# step number, about how many steps in all, the checkpoint row about to be tried.
Progress = Callable[[int, int, dict], None]
ROW_FIELDS = ("seq", "commit", "tree", "label", "tool_use_id", "source", "tier", "created_at")


@dataclass
class Plan:
    """The attempt's live checkpoints from good to bad (inclusive), and what was left out."""

    run_id: str
    node_id: str
    iteration: int
    attempt: int
    worktree: str
    rows: list[dict]
    pruned_skipped: int


def plan_bisect(view: HomeView, *, run_id: object, node_id: object, good: object = None,
                bad: object = None, iteration: object = None, attempt: object = None) -> Plan:
    """The candidates: bad defaults to the attempt's newest checkpoint (not counting safety
    checkpoints), good to its first live one; refusals name what exists."""
    run, node, bad_seq, it, att = selection(run_id, node_id, bad, iteration, attempt)
    good_seq = selection(run, node, good)[2]
    bad_row = find_checkpoint(view.ledger, run, node, seq=bad_seq, iteration=it, attempt=att)
    rows = [r for r in view.ledger.checkpoints(run, node, bad_row["attempt"])
            if r["iteration"] == bad_row["iteration"]]
    rows.sort(key=lambda r: r["seq"])
    live = [r for r in rows if not r.get("pruned_at")]
    if good_seq is None:
        good_row = live[0]
    else:
        good_row = find_checkpoint(view.ledger, run, node, seq=good_seq,
                                   iteration=bad_row["iteration"], attempt=bad_row["attempt"])
    if good_row["seq"] >= bad_row["seq"]:
        raise ServiceError(BAD_REQUEST, f"the good checkpoint (seq {good_row['seq']}) must come "
                           f"before the bad one (seq {bad_row['seq']}); pass --good and --bad")
    between = [r for r in rows if good_row["seq"] <= r["seq"] <= bad_row["seq"]]
    return Plan(run, node, bad_row["iteration"], bad_row["attempt"], bad_row["worktree"],
                [r for r in between if not r.get("pruned_at")],
                sum(1 for r in between if r.get("pruned_at")))


def bisect_attempt(view: HomeView, plan: Plan, argv: list[str], *, timeout: float | None,
                   max_steps: int | None = None, progress: Progress | None = None,
                   output: int | None = None, scratch_parent: Path | None = None) -> dict:
    """Search ``plan`` with ``argv``; ``output`` None keeps each run's output tail in the
    result (else it goes to that descriptor)."""
    if not argv:
        raise ServiceError(BAD_REQUEST, "no command to run: give it after `--`")
    container = _scratch_dir(scratch_parent, [Path(plan.worktree), view.home])
    started = time.monotonic()
    try:
        tree_dir = container / "tree"
        tree_dir.mkdir(mode=0o700)
        scratch = ScratchTree(view.repo, tree_dir)
        try:
            search, steps = _search(plan, scratch, argv, timeout=timeout, max_steps=max_steps,
                                    progress=progress,
                                    output=container / "output" if output is None else output)
        finally:
            scratch.close()
        skipped = dict(scratch.skipped)
    finally:
        remove_tree(container)
    result = _result(view, plan, search, steps, max_steps)
    result.update(command=list(argv), timeout_s=timeout, elapsed_s=round(
        time.monotonic() - started, 3), not_written=sorted(os.fsdecode(p) for p in skipped))
    return result


def _search(plan: Plan, scratch: ScratchTree, argv: list[str], *, timeout: float | None,
            max_steps: int | None, progress: Progress | None,
            output: int | Path) -> tuple[Search, list[dict]]:
    rows = plan.rows
    search = Search(len(rows)) if len(rows) >= 2 else None
    steps: list[dict] = []
    if search is None:
        raise ServiceError(BAD_REQUEST, "every checkpoint between the good and the bad one was "
                           "pruned: there is nothing to bisect")
    while (index := search.next()) is not None:
        if max_steps is not None and len(steps) >= max_steps:
            break
        row = rows[index]
        if progress is not None:
            progress(len(steps) + 1, len(steps) + search.steps_left(), row)
        t0 = time.monotonic()
        moved = dict(scratch.sweep(), **scratch.move_to(row["tree"]))
        move_s = time.monotonic() - t0
        env = dict(os.environ, SNAPSHOTD_BISECT_SEQ=str(row["seq"]),
                   SNAPSHOTD_BISECT_COMMIT=row["commit"])
        try:
            outcome = run_command(argv, scratch.root, env=env, timeout=timeout, output=output)
        except OSError as exc:
            raise ServiceError(BAD_REQUEST, f"cannot run {argv[0]!r}: {exc.strerror or exc}"
                               ) from None
        steps.append(_step(len(steps) + 1, row, outcome, moved, move_s))
        if outcome.verdict == "abort":
            how = f"signal {outcome.signal}" if outcome.signal else f"exit {outcome.exit_code}"
            raise ServiceError(BAD_REQUEST, f"the command ended with {how} on seq {row['seq']} "
                               "(128 or more, or a signal: the command itself failed, as "
                               "`git bisect run` reads it); the bisection stopped after "
                               f"{len(steps)} run(s)")
        search.mark(index, outcome.verdict)
    return search, steps


def _step(number: int, row: dict, outcome: Outcome, moved: dict, move_s: float) -> dict:
    return dict({"step": number, "seq": row["seq"], "label": row.get("label"),
                 "tool_use_id": row.get("tool_use_id"), "move": moved,
                 "move_s": round(move_s, 3)}, **outcome.as_dict())


def _result(view: HomeView, plan: Plan, search: Search, steps: list[dict],
            max_steps: int | None) -> dict:
    rows = plan.rows
    left = search.open()
    unresolved = search.unresolved()
    status = "incomplete" if left else "ambiguous" if unresolved else "found"
    first = rows[search.bad]
    before = rows[search.bad - 1]
    tested = {s["seq"] for s in steps}
    return {
        "run_id": plan.run_id, "node_id": plan.node_id, "iteration": plan.iteration,
        "attempt": plan.attempt, "status": status,
        "good": _ident(rows[0]), "bad": _ident(rows[-1]),
        "last_good": _ident(rows[search.good]),
        "first_bad": dict(_ident(first), tested=first["seq"] in tested,
                          # The turn and prompt of the tool call: filled once turns are
                          # recorded (issue 44); None until then.
                          turn=None, prompt=None,
                          diff_stat=diff_stat(view.repo, before["tree"], first["tree"]),
                          diff_from_seq=before["seq"]),
        "could_be": [rows[i]["seq"] for i in sorted(set(unresolved) | set(left))],
        "candidates": len(rows), "pruned_skipped": plan.pruned_skipped,
        "runs": len(steps), "max_steps": max_steps, "steps": steps,
    }


def _ident(row: dict) -> dict:
    return {key: row.get(key) for key in ROW_FIELDS}


def _scratch_dir(parent: Path | None, forbidden: list[Path]) -> Path:
    """A new 0700 directory for the scratch tree, outside every ``forbidden`` directory."""
    made = Path(tempfile.mkdtemp(prefix="snapshotd-bisect-",
                                 dir=str(parent) if parent is not None else None))
    real = Path(os.path.realpath(made))
    for place in forbidden:
        inside = Path(os.path.realpath(place))
        if real == inside or inside in real.parents:
            os.rmdir(made)
            raise ServiceError(BAD_REQUEST, f"the scratch directory {real} would be inside "
                               f"{inside}; set TMPDIR to a directory outside the worktree and "
                               "the snapshotd home")
    return made
