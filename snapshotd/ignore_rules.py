"""What a capture ignores: the exclude file of each stat cache, made from its sources.

Owns the daemon's default excludes for plain directories and the exclude file and
``config.worktree`` written into each stat-cache git dir (libgit2 honours them there as
``core.excludesFile`` for that worktree alone).

Promises: the exclude list is the user's global excludes file, the worktree repository's
``info/exclude``, the daemon's configured excludes, and, in a plain directory with no root
``.gitignore``, ``DEFAULT_PLAIN_EXCLUDES``; ``exclude_sources`` changes whenever any of those
would (a file's mtime, or whether ``.git``/``.gitignore`` exist), so a cache knows to rewrite it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pygit2

from snapshotd.user_repo import repo_info_exclude

DEFAULT_PLAIN_EXCLUDES = (
    "node_modules/",
    ".venv/",
    "venv/",
    "__pycache__/",
    ".tox/",
    ".mypy_cache/",
    ".pytest_cache/",
    ".DS_Store",
)

_GLOBAL_EXCLUDES: tuple[float, str | None] = (0.0, None)


def exclude_sources(root: Path) -> tuple:
    """What a worktree's exclude list is made of: the files with their mtimes, and the markers
    that decide whether the plain-directory defaults apply."""
    files = []
    for p in (_global_excludes_file(), repo_info_exclude(root)):
        try:
            files.append((p, os.stat(p).st_mtime_ns) if p else (None, None))
        except OSError:
            files.append((None, None))
    markers = ((root / ".gitignore").exists(), (root / ".git").exists())
    return tuple(files), markers


def write_excludes(gitdir: Path, root: Path, sources: tuple, extra: tuple[str, ...]) -> None:
    """Write the exclude file of the stat-cache git dir ``gitdir`` of worktree ``root`` from
    ``sources`` (as ``exclude_sources`` returned them) and the daemon's ``extra`` patterns, and
    point that git dir's ``core.excludesFile`` at it."""
    lines: list[str] = ["# written by snapshotd; regenerated when its sources change"]
    for path, _mtime in sources[0]:
        if path is None:
            continue
        try:
            lines.append(Path(path).read_text(errors="replace"))
        except OSError:
            continue
    lines.extend(extra)
    if not (root / ".git").exists() and not (root / ".gitignore").exists():
        lines.extend(DEFAULT_PLAIN_EXCLUDES)
    exclude_file = gitdir / "exclude"
    tmp = gitdir / "exclude.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, exclude_file)
    config = (
        "[core]\n"
        f"\texcludesFile = {_config_quote(str(exclude_file))}\n"
        "\tfilemode = true\n"
        "\tsymlinks = true\n"
    )
    (gitdir / "config.worktree").write_text(config)


def _global_excludes_file() -> str | None:
    """The user's global excludes file (looked up at most once a second: it is on every
    capture's path and reading the global git config is not free)."""
    global _GLOBAL_EXCLUDES
    now = time.monotonic()
    if now - _GLOBAL_EXCLUDES[0] < 1.0:
        return _GLOBAL_EXCLUDES[1]
    found = _lookup_global_excludes()
    _GLOBAL_EXCLUDES = (now, found)
    return found


def _lookup_global_excludes() -> str | None:
    try:
        value = pygit2.Config.get_global_config()["core.excludesFile"]
        return os.path.expanduser(value)
    except (KeyError, OSError, pygit2.GitError):
        pass  # no global config, or no such key in it: git's own default below applies
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    candidate = os.path.join(base, "git", "ignore")
    return candidate if os.path.isfile(candidate) else None


def _config_quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
