"""Where a large watched worktree's memory goes: the daemon's parts, one at a time, in this
process, each as the growth of its anonymous RSS (``RssAnon`` in ``/proc/self/status``; the
packs libgit2 maps are file pages the kernel can drop, not counted here).

Rows, on a ``bench.tree`` tree of ``--files`` files (prepared or reused under ``--cache``) or
any git worktree (``--tree``):
- ``libgit2_index_mb``: the repository's index read by libgit2 (what the daemon's stat cache
  holds for the worktree, entry for entry);
- ``object_cache_mb``: libgit2's object cache after every tree of HEAD was read once on one
  repository handle (default cache settings), ``trees`` how many;
- ``seed_parse_mb`` / ``seed_parse_retained_mb``: the first capture's parse of the user's index
  (``user_repo.strip_index``: an object id per entry, in Python), while held and after
  it is dropped (what the allocator does not give back);
- ``path_list_mb``: one Python list of every entry's path (the first capture's list of files to
  scan for secrets);
- ``watches_mb`` and ``bytes_per_watch``: an ``InotifyNotifier`` over ``--watch-dirs``
  top-level directories of the tree (a share of the host's inotify budget; the kernel's own
  memory per watch is not in the process's RSS).

Usage: ``python -m bench.footprint --files 1000000 --cache /tmp/bench-1m [--watch-dirs 1000]``
(or ``--tree PATH``: a git worktree as it is); prints JSON.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
from pathlib import Path

import pygit2

from bench.tree import cached_tree
from snapshotd.core.user_repo import strip_index
from snapshotd.watch.notifier import InotifyNotifier


def run(wt: Path, watch_dirs: int) -> dict:
    index_path = wt / ".git" / "index"
    out: dict = {"bench": "footprint", "anon_start_mb": _anon_mb()}
    base = _anon_mb()
    index = pygit2.Index(str(index_path))
    out["index_entries"] = len(index)
    out["libgit2_index_mb"] = round(_anon_mb() - base, 1)
    base = _anon_mb()
    repo = pygit2.Repository(str(wt))
    out["trees"] = _walk_trees(repo)
    out["object_cache_mb"] = round(_anon_mb() - base, 1)
    del repo
    base = _anon_mb()
    seed = strip_index(index_path.read_bytes())
    out["seed_parse_mb"] = round(_anon_mb() - base, 1)
    del seed
    gc.collect()
    out["seed_parse_retained_mb"] = round(_anon_mb() - base, 1)
    base = _anon_mb()
    paths = [entry.path for entry in index]
    out["path_list_mb"] = round(_anon_mb() - base, 1)
    del paths
    gc.collect()
    out["path_list_retained_mb"] = round(_anon_mb() - base, 1)
    roots = sorted(p for p in wt.iterdir() if p.is_dir() and p.name != ".git")[:watch_dirs]
    base = _anon_mb()
    notifier = InotifyNotifier([str(root) for root in roots])
    grown = _anon_mb() - base
    notifier.close()
    watches = sum(len(list(root.rglob("*/"))) + 1 for root in roots)
    out["watches"] = watches
    out["watches_mb"] = round(grown, 1)
    out["bytes_per_watch"] = round(grown * 2**20 / watches) if watches else None
    out["load_average"] = [round(x, 2) for x in os.getloadavg()]
    return out


def _walk_trees(repo: pygit2.Repository) -> int:
    """Read every tree of HEAD once, as a capture's tree reads do; the repository handle stays
    open so libgit2's object cache keeps what it cached. Returns how many trees."""
    count = 0
    stack = [repo.head.peel(pygit2.Tree)]
    while stack:
        tree = stack.pop()
        count += 1
        stack.extend(repo[entry.id] for entry in tree if entry.type_str == "tree")
    return count


def _anon_mb() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no RssAnon in /proc/self/status")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=1_000_000)
    parser.add_argument("--cache", type=Path, default=None)
    parser.add_argument("--tree", type=Path, default=None,
                        help="Measure this git worktree as it is instead (not reset).")
    parser.add_argument("--watch-dirs", type=int, default=1000)
    args = parser.parse_args()
    if args.tree is None and args.cache is None:
        parser.error("give --cache DIR (a bench.tree tree) or --tree PATH")
    wt = args.tree or cached_tree(args.files, args.cache)
    print(json.dumps(run(wt, args.watch_dirs), indent=2))


if __name__ == "__main__":
    main()
