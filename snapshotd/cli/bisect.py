"""``snapshotd bisect RUN --node X -- CMD``: which tool call's checkpoint first fails CMD.

Owns the command line of bisect: its options, the progress lines, the report, and Ctrl-C.
The search is ``snapshotd.ops.Operations.bisect``, the call the MCP tool makes: it runs here
(the command runs as you, never in the daemon) in one scratch directory under ``$TMPDIR``.

Promises: CMD's output goes to stderr; progress lines (``step k of ~n: seq S``) go to stderr on
a terminal, never with ``--json`` or when stderr is not one. Exit 0 when the first bad
checkpoint is found, 4 when skips (or ``--max-steps``) leave it ambiguous (the candidates are
named), 1 on an error, 130 on SIGINT and 143 on SIGTERM, after the scratch directory and
CMD's process group are gone.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from types import FrameType

import click

from snapshotd.cli.common import (
    attempt_options,
    home_option,
    json_option,
    node_or_only,
    operations,
    print_json,
    run_call,
)
from snapshotd.cli.terminal import field

AMBIGUOUS_EXIT = 4


class Interrupted(BaseException):
    """SIGINT or SIGTERM arrived: unwinds through every cleanup, then exits 128 + signal."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


@click.command()
@click.argument("run_id")
@click.option("--node", "node_id", default=None,
              help="The node whose attempt to bisect (default: the run's only node).")
@click.option("--good", type=click.IntRange(min=0), default=None,
              help="A seq known good (default: the attempt's first checkpoint).")
@click.option("--bad", type=click.IntRange(min=0), default=None,
              help="A seq known bad (default: the attempt's newest checkpoint).")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds one run of CMD may take; a run past it is killed and counts bad.")
@click.option("--max-steps", type=click.IntRange(min=1), default=None,
              help="Stop after this many runs of CMD (the result names what is left).")
@attempt_options
@home_option
@json_option
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def bisect(run_id: str, node_id: str | None, good: int | None, bad: int | None,
           timeout: float | None, max_steps: int | None, iteration: int | None,
           attempt: int | None, home: Path | None, as_json: bool,
           command: tuple[str, ...]) -> None:
    """Find the first checkpoint of RUN on which CMD fails, as `git bisect run` does.

    Give CMD after `--`. It runs in a scratch copy of each checkpoint tried (outside the
    worktree and the home; your worktree, the store and the ledger are never written): exit 0
    good, 125 skip, 1-127 bad, 128 or more aborts.
    """
    node_id = node_or_only(home, run_id, node_id)
    fields = {"run_id": run_id, "node_id": node_id, "good": good, "bad": bad,
              "iteration": iteration, "attempt": attempt}
    show = not as_json and os.isatty(2)
    previous = {sig: signal.signal(sig, _on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        result = run_call(operations(home, None).bisect, fields, list(command),
                          timeout=timeout, max_steps=max_steps,
                          progress=_progress if show else None, output=_stderr_fd())
    except Interrupted as stop:
        click.echo("snapshotd: bisect interrupted; the scratch directory was removed",
                   err=True)
        sys.exit(128 + stop.signum)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if as_json:
        print_json(result)
    else:
        _report(result)
    if result["status"] != "found":
        sys.exit(AMBIGUOUS_EXIT)


def _on_signal(signum: int, _frame: FrameType | None) -> None:
    # A second Ctrl-C must not cut the cleanup short.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Interrupted(signum)


def _stderr_fd() -> int:
    """CMD writes to our stderr: what we wrote there before it comes first."""
    sys.stderr.flush()
    return 2


def _progress(step: int, total: int, row: dict) -> None:
    label = f" ({field(row['label'])})" if row.get("label") else ""
    click.echo(f"step {step} of ~{total}: seq {row['seq']}{label}", err=True)
    sys.stderr.flush()


def _report(r: dict) -> None:
    first = r["first_bad"]
    where = (f"{field(r['run_id'])}/{field(r['node_id'])} iteration {r['iteration']} "
             f"attempt {r['attempt']}")
    if r["status"] == "found":
        click.echo(f"first bad checkpoint: seq {first['seq']} of {where} "
                   f"({first['commit'][:10]})")
    else:
        others = ", ".join(str(s) for s in r["could_be"])
        why = "skipped" if r["status"] == "ambiguous" else "not tested (--max-steps)"
        click.echo(f"first bad checkpoint: seq {first['seq']} of {where} "
                   f"({first['commit'][:10]}), or one of seqs {others} ({why})")
    click.echo(f"  tool call: {field(first.get('label') or '-')} "
               f"(id {field(first.get('tool_use_id') or '-')})")
    stat = first["diff_stat"]
    click.echo(f"  changed since seq {first['diff_from_seq']}: {stat['files']} file(s), "
               f"+{stat['insertions']} -{stat['deletions']}")
    for row in stat["paths"]:
        click.echo(f"    {row['status']} {field(row['path'])} "
                   f"(+{row['insertions']} -{row['deletions']})")
    if stat["paths_total"] > len(stat["paths"]):
        click.echo(f"    ... and {stat['paths_total'] - len(stat['paths'])} more")
    if not first["tested"]:
        click.echo("  (the --bad checkpoint itself, assumed bad and not run: every checkpoint "
                   "tried after the good one passed)")
    click.echo(f"last good: seq {r['last_good']['seq']}; {r['runs']} run(s) of the command "
               f"over {r['candidates']} checkpoint(s)"
               + (f", {r['pruned_skipped']} pruned left out" if r["pruned_skipped"] else ""))
