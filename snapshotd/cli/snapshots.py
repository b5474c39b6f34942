"""``snapshotd snapshots RUN``: a run's checkpoints with its gaps in line.

Owns the human listing of a run: one row per checkpoint (seq, node, iteration, attempt,
tier/source, age, short commit, files changed against the previous checkpoint, its tool call:
its own, or the one that owns a tier-2 checkpoint, "(in flight)"/"(inferred)"), a line under it
per tool call whose capture deduplicated onto it ("= [ID] label"), and one row per gap at its
place in time (reason, tool call id, and whether a checkpoint covered it), then one coverage
line per attempt shown (``service.coverage``).
Reads the ledger and the gap spool directly (safe beside a running daemon).

Promises: ``--json`` prints the complete listing of the filters given (``--node``, ``--attempt``)
in the ``list`` op's shape, whatever ``--all`` says; the table shows, unless ``--all``, the newest
attempt of each node and its last ``DEFAULT_ROWS`` rows, and says what it left out. An unknown
run exits 1 naming the known runs.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

import click

from snapshotd.cli.common import (
    fail,
    home_option,
    json_option,
    print_json,
    read_ledger_or_fail,
    resolve_home,
)
from snapshotd.cli.terminal import field
from snapshotd.cli.texts import HOW_TEXT, age, call_text
from snapshotd.core import finding_text
from snapshotd.service import gap_time

if TYPE_CHECKING:
    from snapshotd.ledger import Ledger

DEFAULT_ROWS = 200
# How a tier-2 checkpoint came to be a tool call's, as the listing says it.



@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", default=None, help="Only this node.")
@click.option("--attempt", type=click.IntRange(min=1), default=None,
              help="Only this attempt number.")
@click.option("--all", "show_all", is_flag=True,
              help="Every attempt of every node and every row (default: the newest attempt "
                   f"of each node, its last {DEFAULT_ROWS} rows).")
@click.option("--flat", is_flag=True, help="One table, not grouped under each turn's prompt.")
@home_option
@json_option
def snapshots(run_id: str, node_id: str | None, attempt: int | None, show_all: bool,
              flat: bool, home: Path | None, as_json: bool) -> None:
    """List the checkpoints and gaps of RUN."""
    home_path = resolve_home(home)
    ledger = read_ledger_or_fail(_open, home_path)
    try:
        listing = read_ledger_or_fail(_listing, ledger, home_path, run_id, node_id, attempt)
    finally:
        ledger.close()
    if as_json:
        print_json(listing)
        return
    print_listing(listing, show_all=show_all, attempt_given=attempt is not None, flat=flat)


def _open(home_path: Path) -> Ledger:
    """The home's ledger, or a failure saying nothing has been captured with this home."""
    from snapshotd.ledger import describe_ledger, ledger_exists, open_ledger

    if not ledger_exists(home_path):
        fail(f"no ledger at {describe_ledger(home_path)}: nothing has been captured with "
             "this home yet (pass --home, or set SNAPSHOTD_HOME)")
    return open_ledger(home_path)


def _listing(ledger: Ledger, home_path: Path, run_id: str, node_id: str | None,
             attempt: int | None) -> dict:
    """The run's listing, or a failure naming the known runs."""
    from snapshotd.ledger import describe_ledger
    from snapshotd.service import GapSpool, list_run
    from snapshotd_client import gaps_path

    known = ledger.run_ids()
    if not known:
        fail(f"unknown run {run_id!r}: nothing has been captured in the ledger at "
             f"{describe_ledger(home_path)} yet (pass --home, or set SNAPSHOTD_HOME or "
             "SNAPSHOTD_LEDGER_URL)")
    if run_id not in known:
        names = ", ".join(known[-20:])
        more = f" (and {len(known) - 20} older; see `snapshotd runs`)" if len(known) > 20 else ""
        fail(f"unknown run {run_id!r}; known runs: {names}{more}")
    from snapshotd.service import with_turns

    listing = list_run(ledger, GapSpool(gaps_path(home_path)), run_id, node_id, attempt)
    return with_turns(listing, ledger.turns(run_id, node_id, attempt))  # issue 44: additive


def print_listing(listing: dict, *, show_all: bool, attempt_given: bool = False,
                  flat: bool = True) -> None:
    checkpoints = listing["checkpoints"]
    gaps = listing["gaps"]
    notes: list[str] = []
    newest: dict[str, tuple[int, int]] = {}
    if not show_all and not attempt_given:
        for cp in checkpoints:
            k = (cp["iteration"], cp["attempt"])
            newest[cp["node_id"]] = max(newest.get(cp["node_id"], k), k)
        kept = [cp for cp in checkpoints if (cp["iteration"], cp["attempt"]) == newest[cp["node_id"]]]
        hidden = len(checkpoints) - len(kept)
        if hidden:
            notes.append(f"{hidden} checkpoint(s) of earlier attempts hidden")
        checkpoints = kept
        gaps = [g for g in gaps if g.get("node_id") not in newest or g.get("attempt") is None
                or (g.get("iteration") or 0, g.get("attempt")) == newest[g["node_id"]]]
    events = [(cp["created_at"], 0, cp) for cp in checkpoints]
    events += [(_gap_time(g), 1, g) for g in gaps]
    events.sort(key=lambda e: (e[0], e[1]))
    if not show_all and len(events) > DEFAULT_ROWS:
        notes.append(f"{len(events) - DEFAULT_ROWS} older row(s) hidden")
        events = events[-DEFAULT_ROWS:]
    now = time.time()
    header = ("SEQ", "NODE", "IT", "ATT", "TIER/SOURCE", "AGE", "COMMIT", "FILES", "LABEL")
    rows: list[tuple[str, ...]] = [header]
    turn_lines = {} if flat else _turn_lines(listing)
    shown_turn: object = None
    for when, kind, item in events:
        turn = (item.get("node_id"), item.get("iteration") or 0, item.get("attempt") or 1,
                item.get("turn"))
        if turn_lines and turn != shown_turn and turn in turn_lines:
            rows.append((turn_lines[turn],))  # a heading: the turn's prompt, then its rows
        shown_turn = turn
        if kind == 0:
            rows.append(_checkpoint_row(item, now))
            rows.extend(_held_rows(item))
        else:
            rows.append(_gap_row(item, when, now, listing["checkpoints"]))
    total_gaps = len(listing["gaps"])
    open_gaps = sum(1 for g in listing["gaps"] if not g.get("resolved"))
    click.echo(f"run {field(listing['run_id'])}: {len(listing['checkpoints'])} checkpoint(s), "
               f"{total_gaps} gap(s)" + (f", {open_gaps} unresolved" if open_gaps else ""))
    if len(rows) == 1:
        click.echo("(no checkpoints or gaps match)")
    else:
        widths = [max(len(r[i]) for r in rows if len(r) > 1) for i in range(len(header) - 1)]
        for r in rows:
            if len(r) == 1:  # a deduplicated tool call's line, under its checkpoint
                click.echo(r[0])
                continue
            line = "  ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=True))
            click.echo((line + "  " + r[-1]).rstrip())
    for cov in listing.get("coverage") or []:  # one line per attempt shown (issue 43)
        if newest.get(cov["node_id"]) in (None, (cov["iteration"], cov["attempt"])):
            click.echo(f"{field(cov['node_id'])}/{cov['iteration']}/{cov['attempt']} "
                       f"{field(cov['summary'])}")
    if notes:
        click.echo("(" + "; ".join(notes) + "; --all shows everything)")


def _turn_lines(listing: dict) -> dict[tuple, str]:
    """The heading of each turn of the listing (docs/review.md, "Turns"), by attempt and turn."""
    out = {}
    for t in listing.get("turns") or []:
        first = field(t["first_line"]) if t.get("first_line") else "(prompt not recorded)"
        out[(t["node_id"], t["iteration"], t["attempt"], t["turn"])] = \
            f"-- turn {t['turn']}: {first}"
    return out


def _checkpoint_row(cp: dict, now: float) -> tuple[str, ...]:
    label = cp.get("label") or ""
    worktree = cp.get("worktree") or ""
    if worktree and label:
        label = label.replace(worktree.rstrip("/") + "/", "")  # paths relative to the worktree
    call = cp.get("tool_call")
    if call is not None and call.get("how") != "own":  # a tier-2 checkpoint a call owns
        label = call_text(call, worktree) + f" ({HOW_TEXT.get(call['how'], field(call['how']))})"
    else:
        label = field(label)
        if cp.get("tool_use_id"):
            label = (label + "  " if label else "") + f"[{field(cp['tool_use_id'])}]"
    outcome = call if call is not None else cp
    if outcome.get("failed"):  # the text listing keeps one line: the mark, not the error text
        code = outcome.get("exit_code")
        label += "  FAILED" + (f" (exit {code})" if code is not None else "")
    if cp.get("skipped"):
        label += f"  (skipped: {_skipped_text(cp['skipped'])})"
    if cp.get("secrets"):
        first = cp["secrets"][0]
        label += (f"  (SECRET {field(finding_text(first))}"
                  + (f" +{len(cp['secrets']) - 1}" if len(cp["secrets"]) > 1 else "")
                  + ": kept here, not replicated)")
    commit = "pruned" if cp.get("pruned_at") else cp["commit"][:10]
    if cp.get("pruned_at"):
        label += (f"  (pruned {age(now - cp['pruned_at'])} ago: "
                  f"{field(cp.get('pruned_reason') or 'retention')})")
    return (str(cp["seq"]), field(cp["node_id"]), str(cp["iteration"]), str(cp["attempt"]),
            f"{cp['tier']}/{cp['source']}", age(now - cp["created_at"]), commit,
            f"+{cp['added']} ~{cp['modified']} -{cp['deleted']}", label)






def _held_rows(cp: dict) -> list[tuple[str, ...]]:
    """One line under a checkpoint per tool call (or event) whose capture deduplicated onto
    it: the call is listed by its id and label at the seq that holds its state."""
    out = []
    owner = (cp.get("tool_call") or {}).get("id")
    for call in cp.get("tool_calls") or []:
        ids = {call["id"], *call.get("aliases", [])}
        why = (f"its end changed nothing more: state of seq {cp['seq']}" if owner in ids
               else f"no change of its own: same state as seq {cp['seq']}")
        text = f"  = {call_text(call, cp.get('worktree') or '')} ({why})"
        if call.get("failed"):
            code = call.get("exit_code")
            text += "  FAILED" + (f" (exit {code})" if code is not None else "")
        out.append((text,))
    return out


def _skipped_text(skipped: list[dict], shown: int = 3) -> str:
    """``a.txt unreadable, fifo special, and 4 more``: what a checkpoint left out, and why."""
    parts = [f"{field(s.get('path'))} {field(s.get('reason'))}" for s in skipped[:shown]]
    if len(skipped) > shown:
        parts.append(f"and {len(skipped) - shown} more")
    return ", ".join(parts)


def _gap_row(gap: dict, when: float, now: float, checkpoints: list[dict]) -> tuple[str, ...]:
    tool = gap.get("tool_use_id")
    covered = None
    if tool:
        covered = next((c for c in checkpoints if c.get("tool_use_id") == tool), None)
    if covered is not None:
        state = f"resolved: seq {covered['seq']} captured this tool call"
    elif gap.get("resolved"):
        state = "resolved: a later capture holds this tool call"
    else:
        later = next((c for c in checkpoints if c["created_at"] >= when
                      and c["node_id"] == gap.get("node_id")
                      and (gap.get("attempt") is None or c["attempt"] == gap.get("attempt"))),
                     None)
        state = ("UNRESOLVED" if later is None
                 else f"UNRESOLVED (later seq {later['seq']} captured the tree after it)")
    label = f"GAP {field(gap.get('reason'))}" + (f" [{field(tool)}]" if tool else "") \
        + f"  {state}"
    if gap.get("detail"):
        label += f": {field(gap['detail'])}"
    tier = gap.get("tier")
    source = gap.get("source")
    return ("gap", field(gap.get("node_id") or "-"), field(_dash(gap.get("iteration"))),
            field(_dash(gap.get("attempt"))), field(f"{_dash(tier)}/{source or '-'}"),
            age(now - when), "-",
            "-", label)


def _gap_time(gap: dict) -> float:
    return gap_time(gap) or 0.0


def _dash(value: object) -> str:
    return "-" if value is None else str(value)
