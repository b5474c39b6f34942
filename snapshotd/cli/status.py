"""``snapshotd status``: what the running daemon is doing.

Promises: ``--json`` prints the daemon's status map unchanged plus ``running: true``; the text
form shows every field of it (process, sizes, worktrees, counters, gaps, latencies, policy) in
one screen. With no daemon answering: a sentence naming the socket (or ``{"running": false}``
with ``--json``) and exit 3, so scripts can tell "not running" from "broken".
"""

from __future__ import annotations

import time
from pathlib import Path

import click

from snapshotd.cli.common import (
    daemon_client,
    fail,
    json_option,
    print_json,
    resolve_socket,
    socket_option,
)
from snapshotd.cli.terminal import field
from snapshotd.core import finding_text
from snapshotd_client import DaemonUnavailable, SnapshotdError

NOT_RUNNING = 3


@click.command()
@socket_option
@json_option
def status(socket_: Path | None, as_json: bool) -> None:
    """Show the daemon's pid, uptime, sizes, worktrees, counters and latencies (exit 3 if none
    runs)."""
    try:
        with daemon_client(socket_, timeout=10) as client:
            info = client.status()
    except DaemonUnavailable:
        if as_json:
            print_json({"running": False, "socket": str(resolve_socket(socket_))})
        fail(f"no daemon is running on {resolve_socket(socket_)}; start it with "
             "`snapshotd serve` or `snapshotd install-service`", NOT_RUNNING)
        return
    except SnapshotdError as exc:
        fail(f"{exc.message} ({exc.code})")
        return
    info["running"] = True
    if as_json:
        print_json(info)
        return
    for line in render(info):
        click.echo(line)


def render(info: dict) -> list[str]:
    """The status map as text, one fact per line, missing fields shown as '-'."""
    spool = info.get("gap_spool") or {}
    out = [f"snapshotd {info.get('version', '?')}  pid {info.get('pid', '?')}  "
           f"up {human_duration(info.get('uptime_s'))}  log level {info.get('log_level', '-')}"]
    out.append(f"home      {field(info.get('home', '-'))}")
    out.append(f"socket    {field(info.get('socket', '-'))}  ({info.get('connections', 0)} open "
               f"connections, {info.get('refused_connections', 0)} refused)")
    out.append(f"store     {human_bytes(info.get('store_bytes'))}   stat caches "
               f"{human_bytes(info.get('stat_cache_bytes'))}   ledger "
               f"{human_bytes(info.get('ledger_bytes'))}   gap spool "
               f"{human_bytes(spool.get('bytes'))}")
    out.extend(_process_lines(info))
    out.extend(_worktree_lines(info))
    out.extend(_coverage_line(info.get("coverage")))
    out.extend(_capture_lines(info))
    out.extend(_config_lines(info.get("config") or {}))
    out.extend(_replication_lines(info.get("replication")))
    out.extend(_http_hook_lines(info.get("http_hook")))
    recon = info.get("reconciliation") or {}
    if recon.get("rebuilt_rows"):
        at = recon.get("at")
        when = time.strftime(" (%Y-%m-%d %H:%M:%S)", time.localtime(at)) if at else ""
        out.append(f"recovery  {recon['rebuilt_rows']} checkpoint rows rebuilt from the store at "
                   f"start-up{when}")
    for item in info.get("damaged_attempts") or []:
        out.append(f"DAMAGED   {field(item.get('run_id'))}/{field(item.get('node_id'))}/"
                   f"{item.get('iteration')}/{item.get('attempt')}: {field(item.get('detail'))}")
    return out


def _process_lines(info: dict) -> list[str]:
    out = []
    proc = info.get("process") or {}
    if "error" in proc:
        out.append(f"process   unavailable: {field(proc['error'])}")
    elif proc:
        out.append(f"process   RSS {human_bytes(proc.get('rss_bytes'))}   CPU "
                   f"{proc.get('cpu_percent', '-')}% now, {proc.get('cpu_percent_avg', '-')}% "
                   f"average ({proc.get('cpu_user_s', '-')}s user, "
                   f"{proc.get('cpu_system_s', '-')}s system)   {proc.get('threads', '-')} "
                   f"threads   {proc.get('open_fds', '-')} fds")
    checkpoints = info.get("checkpoints") or {}
    if checkpoints:
        out.append(f"stored    {checkpoints.get('checkpoints', 0)} checkpoints "
                   f"(tier 1: {checkpoints.get('tier1', 0)}, tier 2: {checkpoints.get('tier2', 0)})")
    return out


def _worktree_lines(info: dict) -> list[str]:
    worktrees = info.get("worktrees")
    if worktrees is None:  # an older daemon without the metrics part: active attempts only
        worktrees = [{"path": a.get("worktree"), "state": a.get("state"),
                      "attempt": f"{a.get('run_id')}/{a.get('node_id')}/{a.get('iteration')}/"
                                 f"{a.get('attempt')}"}
                     for a in info.get("active_attempts", [])]
    out = [f"worktrees ({len(worktrees)})" + ("" if worktrees else "  none active")]
    for row in worktrees:
        age = row.get("last_checkpoint_age_s")
        last = (f"last checkpoint seq {row.get('last_seq')} {human_duration(age)} ago"
                if age is not None else "no checkpoint yet")
        degraded = row.get("degraded_reason")
        watch = row.get("watch") if isinstance(row.get("watch"), dict) else {}
        watch_state = watch.get("state") or watch.get("mode")
        extra = f"  watch {field(watch_state)}" if watch_state else ""
        extra += f"  DEGRADED: {field(degraded)}" if degraded else ""
        out.append(f"  {field(row.get('path'))}")
        out.append(f"      {field(row.get('attempt') or '-')}  {field(row.get('state') or '-')}  "
                   f"{last}{extra}")
    return out


def _coverage_line(coverage: object) -> list[str]:
    """The active attempts' coverage, added up, in one line (issue 43)."""
    total = coverage.get("total") if isinstance(coverage, dict) else None
    if not isinstance(total, dict):
        return []
    count = total.get("attempts", 0)
    text = str(total.get("summary", "-")).removeprefix("coverage: ")
    return [f"coverage  {field(text)}  ({count} active attempt{'' if count == 1 else 's'})"]


def _capture_lines(info: dict) -> list[str]:
    counters = info.get("counters") or {}
    out = ["captures  " + (f"tier 1: {counters.get('captures_tier1', 0)}  tier 2: "
                           f"{counters.get('captures_tier2', 0)}  dedups: "
                           f"{counters.get('dedups', 0)}  repeats: "
                           f"{counters.get('repeats', 0)}  errors: {counters.get('errors', 0)}"
                           "  (since start)")]
    latency = info.get("latency_ms") or {}
    for tier in sorted(latency):
        lat = latency[tier] or {}
        if lat.get("count"):
            out.append(f"latency   {tier}: p50 {lat.get('p50')} ms  p99 {lat.get('p99')} ms  "
                       f"(last {lat.get('count')} captures)")
        else:
            out.append(f"latency   {tier}: no captures yet")
    gaps = info.get("gaps_by_reason") or {}
    out.append("gaps      " + (_counts(gaps) or "none") + "  (since start)")
    spool = info.get("gap_spool") or {}
    if spool.get("by_reason"):
        out.append(f"gap spool {_counts(spool['by_reason'])}  (all {spool.get('records', 0)} "
                   f"records in {spool.get('path')}; `snapshotd snapshots RUN` shows them)")
    return out


def _config_lines(config: dict) -> list[str]:
    if not config:
        return []
    sources = config.get("sources") or {}
    non_default = [f"{k}={config[k]!r} ({sources[k]})" for k in sorted(config)
                   if k != "sources" and sources.get(k, "default") != "default"]
    out = [f"policy    settle {config.get('settle_ms')} ms, max wait "
           f"{config.get('max_wait_ms')} ms, max file {human_bytes(config.get('max_file_bytes'))}"
           f", durability {config.get('durability')}, hook timeout "
           f"{config.get('hook_timeout_ms')} ms"]
    if non_default:
        out.append("          set: " + ", ".join(non_default))
    return out


def _replication_lines(rep: object) -> list[str]:
    """Replication: off, or the remote with lag, backlog, the last error and the worst attempts."""
    if not isinstance(rep, dict):
        return []
    if not rep.get("enabled"):
        return ["replicate off (no remote configured)"]
    unpushed = rep.get("unpushed_checkpoints", 0)
    state = (f"lag {human_duration(rep.get('lag_s'))}, {unpushed} checkpoint(s) not pushed"
             if unpushed else "up to date")
    last_push = rep.get("last_push_at")
    pushed = (time.strftime("%H:%M:%S", time.localtime(last_push))
              if isinstance(last_push, (int, float)) else "never")
    out = [f"replicate {field(rep.get('remote') or '-')}  {state}  last push {pushed}  "
           f"({rep.get('pushes', 0)} pushes, {rep.get('refs_pushed', 0)} refs)"]
    if rep.get("last_error") and rep.get("consecutive_failures"):
        retry = rep.get("next_retry_in_s")
        out.append(f"          FAILING x{rep['consecutive_failures']}: {field(rep['last_error'])}"
                   + (f"  (retry in {human_duration(retry)})" if retry is not None else ""))
    for a in (rep.get("attempts") or [])[:5]:
        out.append(f"          {field(a.get('run_id'))}/{field(a.get('node_id'))}/{a.get('iteration')}/"
                   f"{a.get('attempt')}: {a.get('unpushed')} unpushed, lag "
                   f"{human_duration(a.get('lag_s'))}")
    for d in (rep.get("diverged") or [])[:5]:
        if isinstance(d, dict):
            out.append(f"          DIVERGED {d.get('run_id')}/{d.get('node_id')}/"
                       f"{d.get('iteration')}/{d.get('attempt')}: local "
                       f"{str(d.get('local'))[:12]}, remote {str(d.get('remote'))[:12]}")
    for w in (rep.get("withheld") or [])[:5]:
        if isinstance(w, dict):
            where = ", ".join(finding_text(f) for f in (w.get("findings") or [])[:3]
                              if isinstance(f, dict))
            out.append(f"          WITHHELD {w.get('run_id')}/{w.get('node_id')}/"
                       f"{w.get('iteration')}/{w.get('attempt')} seq {w.get('seq')} "
                       f"(secret: {where}); release: snapshotd push {w.get('run_id')} "
                       f"--release {w.get('commit')}")
    return out


def _http_hook_lines(hook: object) -> list[str]:
    """The HTTP hook endpoint: where it listens and its counts, or OFF with the reason."""
    if not isinstance(hook, dict):
        return []
    if not hook.get("enabled"):
        return [f"http hook OFF ({field(hook.get('reason', '-'))}, port {hook.get('port', '-')}): "
                f"{field(hook.get('error', '-'))}"]
    return [f"http hook {hook.get('url', '-')}  accepted {hook.get('accepted', 0)}, refused "
            f"{hook.get('refused_token', 0)} token / {hook.get('refused_host', 0)} host, "
            f"late {hook.get('late', 0)}, gaps {hook.get('gaps', 0)}"]


def human_bytes(value: object) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TiB"  # pragma: no cover


def human_duration(seconds: object) -> str:
    if not isinstance(seconds, (int, float)):
        return "-"
    s = float(seconds)
    if s < 60:
        return f"{s:.1f}s" if s < 10 else f"{s:.0f}s"
    if s < 3600:
        return f"{int(s // 60)}m{int(s % 60):02d}s"
    if s < 86400:
        return f"{int(s // 3600)}h{int(s % 3600 // 60):02d}m"
    return f"{int(s // 86400)}d{int(s % 86400 // 3600):02d}h"


def _counts(counts: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items()))
