"""``snapshotd show RUN --node X --seq N``: what one checkpoint changed, with its tool call.

Owns the command line of show, and what the review commands share: ``read_only`` (run a
``snapshotd.features.review.history`` function on the home opened for reading, failures printed as a sentence)
and ``describe_call`` (one line for a tool call). It reads the ledger and the store directly
(``snapshotd.ops.backend.read_home``), with or without a daemon. A checkpoint's secret findings are
shown as ``SECRET path:line kind`` lines (never the value).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from snapshotd.cli.common import (
    attempt_options,
    call_or_fail,
    fail,
    home_option,
    json_option,
    node_or_only,
    print_json,
)
from snapshotd.cli.terminal import field
from snapshotd.cli.texts import HOW_TEXT, call_text, relative
from snapshotd.core import finding_text
from snapshotd.ops import read_home


@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", default=None,
              help="The node of the checkpoint (required unless --tool-call).")
@click.option("--seq", type=click.IntRange(min=0), default=None,
              help="The checkpoint (default: the newest of the attempt).")
@click.option("--tool-call", "tool_call", default=None, metavar="ID",
              help="Show this tool call's whole change instead (any id it carries): from the "
                   "checkpoint before its first to its last, as one diff.")
@attempt_options
@click.option("--patch", "fmt", flag_value="patch", default=True, help="The patch (default).")
@click.option("--stat", "fmt", flag_value="stat", help="A diffstat instead of the patch.")
@click.option("--name-status", "fmt", flag_value="name-status",
              help="One 'STATUS<TAB>path' line per file.")
@home_option
@json_option
def show(run_id: str, node_id: str | None, seq: int | None, tool_call: str | None,
         iteration: int | None, attempt: int | None, fmt: str, home: Path | None,
         as_json: bool) -> None:
    """Show what checkpoint --seq changed against the previous checkpoint of its attempt (the
    first one against the commit the worktree was at, else the empty tree), with its tool call
    and the gaps around it; or, with --tool-call ID, everything that tool call changed."""
    from snapshotd.features.review import show_checkpoint

    if tool_call is not None:
        if seq is not None:
            raise click.UsageError("--tool-call selects the checkpoints itself; drop --seq")
        _show_tool_call(run_id, node_id, tool_call, fmt, home, as_json)
        return
    node_id = node_or_only(home, run_id, node_id)

    def call(view: Any) -> dict:
        from snapshotd.service import set_turns

        result = show_checkpoint(view, run_id=run_id, node_id=node_id, seq=seq,
                                 iteration=iteration, attempt=attempt,
                                 patch=fmt == "patch" or as_json)
        set_turns(view.ledger, [result["checkpoint"]])  # issue 44: it names its turn
        return result

    result = read_only(home, call)
    if as_json:
        print_json(result)
        return
    cp = result["checkpoint"]
    click.echo(f"checkpoint {cp['seq']} of {field(cp['run_id'])}/{field(cp['node_id'])} iteration "
               f"{cp['iteration']} attempt {cp['attempt']} (commit {cp['commit'][:12]})")
    click.echo(f"tool call  {describe_call(cp)}")
    for held in cp.get("tool_calls") or []:
        click.echo(f"           = {held_text(held, cp)}")
    click.echo("against    " + against(result))
    for other in result.get("foreign") or []:
        click.echo(f"other session  {foreign_text(other)}")
    for side in ("before", "after", "undated"):
        for gap in result["gaps"][side]:
            state = "resolved" if gap["resolved"] else "unresolved"
            click.echo(f"gap {side:<6} {field(gap.get('ts'))} {field(gap.get('reason'))}: "
                       f"{field(gap.get('detail'))} ({state})")
    for finding in result["secrets"]:
        click.echo(f"SECRET     {field(finding_text(finding))}"
                   " (kept here, not replicated unless released)")
    click.echo("")
    echo_change(result, fmt)


def foreign_text(other: dict) -> str:
    """``PATH  by RUN/NODE seq N [ID] label`` for a change another session's tool call made
    (``review.others``), ``(mixed)`` when this session changed the file too."""
    call = other["tool_call"]
    label = f" {field(call['label'])}" if call.get("label") else ""
    kind = f"{field(call['kind'])} " if call.get("kind") else ""
    return (f"{field(other['path'])}  by {field(other['run_id'])}/{field(other['node_id'])} "
            f"seq {other['seq']} {kind}[{field(call['id'])}]{label}"
            + (" (mixed: this session changed it too)" if other.get("mixed") else ""))


def _show_tool_call(run_id: str, node_id: str | None, tool_call: str, fmt: str,
                    home: Path | None, as_json: bool) -> None:
    from snapshotd.features.review import show_tool_call

    result = read_only(home, lambda view: show_tool_call(
        view, run_id=run_id, node_id=node_id, tool_call=tool_call,
        patch=fmt == "patch" or as_json))
    if as_json:
        print_json(result)
        return
    call = result["tool_call"]
    how = f" ({HOW_TEXT[call['how']]})" if call.get("how") in HOW_TEXT else ""
    click.echo(f"tool call  {call_text(call)}{how}"
               + (f"  {failed_mark(call)}" if call.get("failed") else ""))
    where = (f"{field(result['run_id'])}/{field(result['node_id'])} iteration "
             f"{result['iteration']} attempt {result['attempt']}")
    if result["no_change"]:
        click.echo(f"no change of its own: its capture found the state of seq "
                   f"{result['held_at']} of {where}")
    else:
        held = (f"; its end deduplicated onto seq {result['held_at']}"
                if result["held_at"] is not None else "")
        click.echo(f"checkpoints {format_list(result['seqs'])} of {where}{held}")
        click.echo("against    " + against(result))
    click.echo("")
    echo_change(result, fmt)


def format_list(seqs: list[int]) -> str:
    return ", ".join(str(s) for s in seqs)


def held_text(call: dict, cp: dict) -> str:
    """A deduplicated call held at checkpoint ``cp``, on one line."""
    text = call_text(call, cp.get("worktree") or "") + f" (its capture found seq {cp['seq']}'s state)"
    return text + (f"  {failed_mark(call)}" if call.get("failed") else "")


def against(result: dict) -> str:
    """What ``show`` compared the checkpoint with, as a phrase (``review.base``'s kinds)."""
    side, kind = result["from"], result.get("base")
    if kind == "commit":
        return (f"commit {side['commit'][:12]}, where the worktree's HEAD was when the attempt "
                "began (first checkpoint)")
    if kind == "session-start":
        return "itself: the session's start baseline (first checkpoint)"
    if side["commit"]:
        return f"seq {side['seq']} (commit {side['commit'][:12]})"
    return "nothing earlier known (first checkpoint): compared with an empty tree"


def read_only(home: Path | None, call: Callable[[Any], dict]) -> dict:
    """``call(view)`` on the home opened for reading (``snapshotd.ops.backend.read_home``), its
    failures printed as a sentence: a bad config exits 2, anything else 1."""
    import pygit2

    from snapshotd.ledger import LedgerError
    pass

    try:
        return call_or_fail(read_home, call, home=home)
    except LedgerError as exc:
        fail(f"the ledger could not be read: {exc} (ledger-error)")
    except (OSError, pygit2.GitError) as exc:
        fail(f"the store could not be read: {exc} (io-error)")
    raise AssertionError("unreachable")


def describe_call(cp: dict) -> str:
    """``label [tool id]  tier N source  time`` for a checkpoint's tool call: its own, or the
    one that owns a tier-2 checkpoint (``(in flight)``, ``(inferred)``); the calls whose
    capture deduplicated onto it follow (``+ [id] label``)."""
    call = cp.get("tool_call")
    if call is not None:
        tool = f"[{field(call['id'])}]  "
        label = field(relative(call.get("label") or "(no label)", cp.get("worktree") or ""))
        if call.get("how") in HOW_TEXT:
            label += f" ({HOW_TEXT[call['how']]})"
    else:
        tool = f"[{field(cp['tool_use_id'])}]  " if cp.get("tool_use_id") else ""
        label = field(cp.get("label") or "(no label)")
    outcome = call if call is not None else cp
    failed = f"{failed_mark(outcome)}  " if outcome.get("failed") else ""
    held = "".join(f"  + {call_text(c, cp.get('worktree') or '')}"
                   for c in cp.get("tool_calls") or [])
    turn = f"  turn {cp['turn']}" if cp.get("turn") is not None else ""
    return (f"{label}  {tool}{failed}tier {cp['tier']} {field(cp['source'])}  {cp['time']}"
            + turn + held)


def failed_mark(cp: dict) -> str:
    """``FAILED (exit 3): <error>`` for a checkpoint of a failed tool call ("" otherwise); the
    error text was redacted and cut by the daemon, and is escaped here."""
    if not cp.get("failed"):
        return ""
    code = cp.get("exit_code")
    mark = f"FAILED (exit {code})" if code is not None else "FAILED"
    return mark + (f": {field(cp['error'])}" if cp.get("error") else "")


def echo_change(result: dict, fmt: str) -> None:
    """A change (``snapshotd.features.review.diff.render_trees``'s fields) as a patch, stat or name-status."""
    if fmt == "stat":
        click.echo(result["stat"], nl=False)
    elif fmt == "name-status":
        for f in result["files"]:
            if f["old_path"]:
                click.echo(f"{f['status']}\t{field(f['old_path'])}\t{field(f['path'])}")
            else:
                click.echo(f"{f['status']}\t{field(f['path'])}")
    else:
        click.echo(result["patch"] or "", nl=False)
