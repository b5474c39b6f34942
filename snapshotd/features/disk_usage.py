"""``snapshotd du``: where the store's bytes are, and what ``gc`` would reclaim.

Owns the ``du`` op. Promises: ``store`` is ``git count-objects -v`` of the store in bytes
(loose and packed); each run's ``bytes`` is the disk usage git reports for the objects its
attempt refs reach (``git rev-list --objects --disk-usage``), ``unique_bytes`` those no other
ref reaches (what deleting the run frees); each worktree's the same over its attempts;
``largest_paths`` the biggest files of the runs' newest checkpoints; ``unreachable_bytes`` what
``gc --prune-grace 0s`` would reclaim now (the store's objects minus what any ref reaches).
Read-only: every figure comes from git on the store, nothing is written.
"""

from __future__ import annotations

from snapshotd.core import BAD_REQUEST, NOT_FOUND, ServiceError, opt_id_field, run_git
from snapshotd.service import Service
from snapshotd.store import object_counts

LARGEST = 10


def du_report(service: Service, run_id: str | None = None) -> dict:
    """The ``du`` report, for every run or only ``run_id``."""
    store = service.store.path
    counts = object_counts(store)
    total = counts.get("size", 0) + counts.get("size-pack", 0) + counts.get("size-garbage", 0)
    attempts = service.ledger.attempts(run_id)
    if run_id is not None and not attempts:
        raise ServiceError(NOT_FOUND, f"unknown run {run_id!r}")
    by_run: dict[str, list[str]] = {}
    by_worktree: dict[str, list[str]] = {}
    for attempt in attempts:
        by_run.setdefault(attempt.key.run_id, []).append(attempt.key.ref)
        by_worktree.setdefault(attempt.worktree, []).append(attempt.key.ref)
    runs = [{"run_id": run, "checkpoints": len(service.ledger.checkpoints(run)),
             "bytes": _usage(store, refs), "unique_bytes": _usage(store, refs, exclusive=True)}
            for run, refs in sorted(by_run.items())]
    worktrees = [{"worktree": wt, "attempts": len(refs), "bytes": _usage(store, refs)}
                 for wt, refs in sorted(by_worktree.items())]
    reachable = _usage(store, ["--all"])
    return {"store": {"bytes": total, "loose_objects": counts.get("count", 0),
                      "loose_bytes": counts.get("size", 0),
                      "packed_objects": counts.get("in-pack", 0),
                      "packs": counts.get("packs", 0), "packed_bytes": counts.get("size-pack", 0),
                      "garbage_bytes": counts.get("size-garbage", 0)},
            "run_id": run_id, "runs": runs, "worktrees": worktrees,
            "largest_paths": _largest(store, [r for refs in by_run.values() for r in refs]),
            "reachable_bytes": reachable,
            "unreachable_bytes": max(0, total - reachable) if run_id is None else None}


def _git(store: object, args: list[str], stdin: bytes | None = None) -> str:
    proc = run_git(["-C", str(store), *args], timeout=600.0, stdin=stdin)
    if proc.returncode != 0:
        raise ServiceError(BAD_REQUEST, f"git {args[0]} failed on the store: "
                           f"{proc.stderr.decode(errors='replace').strip()[:300]}")
    return proc.stdout.decode("utf-8", "surrogateescape")


def _usage(store: object, refs: list[str], *, exclusive: bool = False) -> int:
    """Disk usage of the objects ``refs`` reach (``exclusive``: and no other ref reaches)."""
    if not refs:
        return 0
    if refs == ["--all"]:
        return int(_git(store, ["rev-list", "--objects", "--disk-usage", "--all"]).strip() or 0)
    lines = list(refs)
    if exclusive:
        others = [r for r in _git(store, ["for-each-ref", "--format=%(refname)"]).split()
                  if r not in set(refs)]
        lines += [f"^{r}" for r in others]
    out = _git(store, ["rev-list", "--objects", "--disk-usage", "--stdin"],
               ("\n".join(lines) + "\n").encode())
    return int(out.strip() or 0)


def _largest(store: object, refs: list[str]) -> list[dict]:
    """The biggest files of the newest checkpoint of each attempt, largest first."""
    sizes: dict[str, int] = {}
    for ref in refs:
        listing = _git(store, ["ls-tree", "-r", "-l", "-z", ref])
        for entry in listing.split("\0"):
            meta, _, path = entry.partition("\t")
            parts = meta.split()
            if len(parts) == 4 and parts[3].isdigit():
                sizes[path] = max(sizes.get(path, 0), int(parts[3]))
    top = sorted(sizes.items(), key=lambda kv: (-kv[1], kv[0]))[:LARGEST]
    return [{"path": path, "bytes": size} for path, size in top]


def du_op(service: Service, fields: dict) -> dict:
    """The ``du`` op's handler: ``run_id`` optional."""
    return du_report(service, opt_id_field(fields, "run_id"))
