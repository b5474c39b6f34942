"""Rebuilding a damaged ledger from the store: the core of ``snapshotd repair``.

Owns ``repair_ledger``: diagnose the ledger, rebuild it from the store's attempt refs and their
commits' trailers (``reconcile.reconcile_attempt``, as start-up does) into a new
file, keep the damaged file (and its ``-wal``, ``-shm``) beside it as ``<name>.damaged-<UTC
time>``, and put the rebuilt one in place. What a rebuild recovers and what it cannot (pruned
rows, change counts, deduplicated tool calls): docs/durability.md, "A damaged ledger";
attempts it could not read are listed (``problems``) and recorded damaged at the next start.
Promises:
- Refused while a daemon holds the home (its lock): the ledger is the daemon's while it runs.
- Nothing is deleted: the damaged files are renamed, never removed; ``dry_run`` changes nothing
  (it rebuilds into a scratch file beside the ledger, reports, and removes only that file).
- SQLite only: a PostgreSQL ledger is not a file to set aside. ``repair`` rebuilds into a
  PostgreSQL database only when it holds no attempts (a new, empty database named by
  ``ledger_url``); otherwise it refuses and says why (docs/durability.md).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING

from snapshotd.core import (
    CONFLICT,
    AttemptKey,
    DaemonLockError,
    HomeLock,
    ServiceError,
    Trailers,
    worktree_id,
)
from snapshotd.ledger import ACTIVE, POSTGRES_SCHEMES, SQLITE_FILE, Ledger, LedgerError, ledger_url
from snapshotd.service import reconcile_attempt
from snapshotd.store import Store

if TYPE_CHECKING:
    from snapshotd.core import Config

log = logging.getLogger("snapshotd.ledger_repair")

_SIDE_FILES = ("", "-wal", "-shm")


def repair_ledger(home: Path, config: Config, *, dry_run: bool = False) -> dict:
    """Diagnose and (unless ``dry_run``) rebuild the ledger of ``home``; a report."""
    lock = HomeLock(home)
    try:
        lock.acquire()
    except DaemonLockError as exc:
        raise ServiceError(CONFLICT, f"{exc}: `snapshotd repair` rebuilds the ledger "
                                            "only while no daemon runs") from None
    try:
        url = ledger_url(home, config)
        if url.split(":", 1)[0].lower() in POSTGRES_SCHEMES:
            return _repair_postgres(home, url, dry_run=dry_run)
        return _repair_sqlite(home, Path(url.split(":", 1)[1].removeprefix("//")),
                              dry_run=dry_run)
    finally:
        lock.release()


def diagnose_sqlite(path: Path) -> str | None:
    """What is wrong with the SQLite ledger at ``path``, or None when it reads whole."""
    if not path.exists():
        return "the file is missing"
    if path.stat().st_size == 0:
        return "the file is empty"
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            rows = db.execute("PRAGMA integrity_check").fetchall()
            db.execute("SELECT COUNT(*) FROM checkpoints").fetchone()
        finally:
            db.close()
    except sqlite3.Error as exc:
        return f"{type(exc).__name__}: {exc}"
    if rows != [("ok",)]:
        return "integrity check: " + "; ".join(str(r[0]) for r in rows[:5])
    return None


def rebuild(store: Store, ledger: Ledger, salvaged: dict[AttemptKey, dict] | None) -> dict:
    """Attempts and checkpoint rows in ``ledger`` (empty) from every attempt ref of ``store``."""
    tips: dict[AttemptKey, tuple[str, str, int]] = {}
    problems: list[dict] = []
    for key, tip in store.attempt_refs():
        try:
            commit = store.read_commit(tip)
            worktree = Trailers(commit.message).worktree or ""
            tips[key] = (tip, worktree, commit.commit_time)
        except (KeyError, ValueError, LedgerError, OSError) as exc:
            problems.append({**key.as_dict(), "detail": f"{type(exc).__name__}: {exc}"})
    newest: dict[str, AttemptKey] = {}
    for key, (_tip, worktree, when) in tips.items():
        if worktree not in newest or when > tips[newest[worktree]][2]:
            newest[worktree] = key
    rows = 0
    for key, (tip, worktree, _when) in sorted(tips.items(), key=lambda kv: kv[1][2]):
        _create_attempt(ledger, key, worktree, salvaged, newest.get(worktree) == key)
        try:
            rows += reconcile_attempt(store, ledger, key, tip)
        except Exception as exc:  # noqa: BLE001 - one attempt's damage stays its own
            problems.append({**key.as_dict(), "detail": f"{type(exc).__name__}: {exc}"})
    return {"attempts": len(tips), "checkpoints": rows, "problems": problems,
            "states_from": "damaged ledger" if salvaged is not None else "store"}


# -- helpers ---------------------------------------------------------------------------------


def _repair_sqlite(home: Path, path: Path, *, dry_run: bool) -> dict:
    damage = diagnose_sqlite(path)
    report: dict = {"ledger": str(path), "dialect": "sqlite", "damage": damage,
                    "dry_run": dry_run, "kept": [], "rebuilt": None}
    if damage is None:
        return report
    store = Store(home)
    scratch = path.with_name(f"{SQLITE_FILE}.rebuild-{os.getpid()}")
    _unlink_all(scratch)
    salvaged = _salvage_attempts(path)
    ledger = Ledger(scratch)
    try:
        report["rebuilt"] = rebuild(store, ledger, salvaged)
    finally:
        ledger.close()
    _fold_wal(scratch)
    if dry_run:
        _unlink_all(scratch)
        return report
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for suffix in _SIDE_FILES:
        old = Path(f"{path}{suffix}")
        if old.exists():
            aside = Path(f"{path}.damaged-{stamp}{suffix}")
            os.replace(old, aside)
            report["kept"].append(str(aside))
    os.replace(scratch, path)
    for suffix in _SIDE_FILES[1:]:
        Path(f"{scratch}{suffix}").unlink(missing_ok=True)
    log.warning("rebuilt the ledger %s from the store (%s); the damaged file is kept as %s",
                path, damage, ", ".join(report["kept"]) or "nothing (it was missing)")
    return report


def _repair_postgres(home: Path, url: str, *, dry_run: bool) -> dict:
    ledger = Ledger(url=url)
    try:
        report: dict = {"ledger": ledger.location, "dialect": "postgresql", "damage": None,
                        "dry_run": dry_run, "kept": [], "rebuilt": None}
        if ledger.attempts():
            raise ServiceError(CONFLICT, (
                f"the PostgreSQL ledger {ledger.location} holds attempts: `snapshotd repair` "
                "rebuilds only into an empty database (PostgreSQL's own recovery and backups "
                "cover damage to a live one); point ledger_url at a new database to rebuild "
                "there from the store"))
        if not dry_run:
            report["rebuilt"] = rebuild(Store(home), ledger, None)
        return report
    finally:
        ledger.close()


def _create_attempt(ledger: Ledger, key: AttemptKey, worktree: str,
                    salvaged: dict[AttemptKey, dict] | None, newest: bool) -> None:
    if worktree:
        ledger.ensure_worktree(worktree_id(Path(worktree)), worktree)
    if salvaged is None:
        ledger.create_attempt(key, worktree, state=ACTIVE if newest else "interrupted")
        return
    old = salvaged.get(key)
    if old is None:
        ledger.create_attempt(key, worktree, state="interrupted")
        return
    ledger.create_attempt(key, old["worktree"] or worktree, state=old["state"],
                          owner_pid=old["owner_pid"], zero_setup=bool(old["zero_setup"]),
                          settle_ms=old["settle_ms"], max_wait_ms=old["max_wait_ms"])
    if old["state"] != ACTIVE:
        ledger.set_attempt_state(key, old["state"], final_commit=old["final_commit"],
                                 ended=True)


def _salvage_attempts(path: Path) -> dict[AttemptKey, dict] | None:
    """The attempts table of the damaged file, when it still reads whole; else None."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        try:
            db.row_factory = sqlite3.Row
            rows = db.execute("SELECT run_id, node_id, iteration, attempt, worktree, state,"
                              " owner_pid, zero_setup, settle_ms, max_wait_ms, final_commit"
                              " FROM attempts").fetchall()
        finally:
            db.close()
    except sqlite3.Error as exc:
        log.warning("the attempts of %s cannot be read back (%s): states come from the store",
                    path, exc)
        return None
    if not rows:
        return None
    return {AttemptKey(r["run_id"], r["node_id"], r["iteration"], r["attempt"]): dict(r)
            for r in rows}


def _fold_wal(path: Path) -> None:
    """Write the rebuilt file's WAL into it, so the file alone is the whole ledger."""
    db = sqlite3.connect(str(path))
    try:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        db.close()


def _unlink_all(path: Path) -> None:
    for suffix in _SIDE_FILES:
        Path(f"{path}{suffix}").unlink(missing_ok=True)
