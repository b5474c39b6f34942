"""Generated bench trees kept between runs: ``cached_tree(files, cache)`` prepares a
``make_tree`` worktree of ``files`` files once under ``cache/tree-<files>`` and hands the same
tree to every later run, put back to its commit first.

A million-file tree takes minutes to write (inode creation dominates); its commit is a single
pack written by ``git fast-import`` (``bench.common.make_tree``), so nothing is left for
``git gc`` to pack or prune. The preparation runs as a child process under ``nice -n 10`` so
the engineers sharing the machine keep their CPU; the measurements that follow are not niced.

``cached_copies`` does the same for many worktrees of one size (``bench.many``): copies of that
tree, each kept.

Usage: ``python -m bench.tree --files 1000000 --cache /tmp/bench-1m [--copies N]`` prepares
(or resets) the tree, or N worktrees of it, and prints their paths.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from bench.common import git_env, make_tree

NICE = ["nice", "-n", "10"]


def cached_tree(files: int, cache: Path) -> Path:
    """The worktree of ``files`` files under ``cache``: reused when a previous run finished
    preparing it (reset to its commit, untracked files removed), else prepared now, niced."""
    home = cache / f"tree-{files}"
    wt, ready = home / "wt", home / "ready"
    # A tree whose .git went (a cleanup cut short) cannot be reset: prepare it again.
    if ready.exists() and (wt / ".git").is_dir():
        _reset(wt)
        return wt
    shutil.rmtree(home, ignore_errors=True)
    subprocess.run([*NICE, sys.executable, "-m", "bench.tree", "--files", str(files),
                    "--cache", str(cache), "--prepare"], check=True, stdout=subprocess.DEVNULL)
    return wt


def cached_copies(count: int, files: int, cache: Path) -> list[Path]:
    """``count`` worktrees of ``files`` files: ``cached_tree``'s tree and ``count - 1`` copies
    of it (``cp -a``, niced) under ``cache/copies-<files>``, each kept for the next run and
    put back to its commit when reused."""
    roots = [cached_tree(files, cache)]
    home = cache / f"copies-{files}"
    home.mkdir(parents=True, exist_ok=True)
    for i in range(1, count):
        dest, ready = home / f"wt{i}", home / f"wt{i}.ready"
        if ready.exists():
            _reset(dest)
        else:
            shutil.rmtree(dest, ignore_errors=True)
            subprocess.run([*NICE, "cp", "-a", str(roots[0]), str(dest)], check=True)
            ready.write_text(f"{files}\n")
        roots.append(dest)
    return roots


def _reset(wt: Path) -> None:
    env = git_env()
    # The stat cache of the tree's index makes this a stat pass, not a rewrite.
    subprocess.run([*NICE, "git", "reset", "-q", "--hard", "HEAD"], cwd=wt, check=True, env=env)
    subprocess.run([*NICE, "git", "clean", "-fdxq"], cwd=wt, check=True, env=env)


def _prepare(files: int, cache: Path) -> Path:
    home = cache / f"tree-{files}"
    wt = make_tree(home / "wt", files)
    (home / "ready").write_text(f"{files}\n")
    return wt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, required=True)
    parser.add_argument("--cache", type=Path, required=True)
    parser.add_argument("--copies", type=int, default=1,
                        help="Also keep this many worktrees in all (cached_copies).")
    parser.add_argument("--prepare", action="store_true",
                        help="Write the tree in this process (what cached_tree runs niced).")
    args = parser.parse_args()
    if args.prepare:
        print(_prepare(args.files, args.cache))
    else:
        print("\n".join(map(str, cached_copies(args.copies, args.files, args.cache))))


if __name__ == "__main__":
    main()
