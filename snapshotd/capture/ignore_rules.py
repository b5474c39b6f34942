"""What a capture ignores: the exclude file of each stat cache, made from its sources.

Owns the daemon's default excludes for plain directories and the exclude file and
``config.worktree`` written into each stat-cache git dir (libgit2 honours them there as
``core.excludesFile`` for that worktree alone; git run under ``store.lending.cache_git_env``
sees the same rules).

Promises: the exclude list is the user's global excludes file, the worktree repository's
``info/exclude`` (for a nested repository or a submodule, the one of the git dir its ``.git``
points at; each read only if safe, see ``read_rules``), the daemon's configured excludes, and,
in a plain directory (no ``.git``), ``DEFAULT_PLAIN_EXCLUDES``; ``exclude_sources`` changes
whenever any of those would (a file's mtime, or whether ``.git`` exists), so a cache knows to
rewrite it. The defaults stay when a plain directory gains a root ``.gitignore``; a negation
there (``!node_modules/``) turns that one off, since libgit2 lets no ``.gitignore`` negation
override the exclude file (why: docs/durability.md, "What a capture holds").
"""

from __future__ import annotations

import logging
import os
import stat
import time
from pathlib import Path

import pygit2

from snapshotd.core import read_regular, repo_info_exclude

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

# An exclude file larger than this is not a list of rules anyone wrote by hand.
MAX_RULES_BYTES = 1 << 20

log = logging.getLogger("snapshotd.store")

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
    try:
        gitignore = os.stat(os.path.join(root, ".gitignore")).st_mtime_ns
    except OSError:
        gitignore = None
    markers = (os.path.exists(os.path.join(root, ".git")), gitignore)
    return tuple(files), markers


def write_excludes(gitdir: Path, root: Path, sources: tuple, extra: tuple[str, ...]) -> None:
    """Write the exclude file of the stat-cache git dir ``gitdir`` of worktree ``root`` from
    ``sources`` (as ``exclude_sources`` returned them) and the daemon's ``extra`` patterns, and
    point that git dir's ``core.excludesFile`` at it."""
    lines: list[str] = ["# written by snapshotd; regenerated when its sources change"]
    for path, _mtime in sources[0]:
        if path is None:
            continue
        text = read_rules(Path(path), root)
        if text is not None:
            lines.append(text)
    lines.extend(extra)
    if not (root / ".git").exists():
        reincluded = _reincluded(root / ".gitignore")
        lines.extend(p for p in DEFAULT_PLAIN_EXCLUDES if p.strip("/") not in reincluded)
    exclude_file = gitdir / "exclude"
    tmp = gitdir / "exclude.tmp"
    tmp.write_text("\n".join(lines) + "\n")
    os.replace(tmp, exclude_file)
    # The user's global configuration applies to this git dir too (libgit2 and git read it):
    # every setting that would change what a capture holds is pinned here, where the worktree
    # config wins. ignoreCase drops one of two names differing in case; ignoreStat and a
    # minimal checkStat hide changed files from a scan; autocrlf converts (raw_bytes); the
    # protect* pair decides which names are ``invalid-path``; an fsmonitor would start a
    # monitor daemon on the user's worktree for the ``git add -A`` prime.
    config = (
        "[core]\n"
        f"\texcludesFile = {_config_quote(str(exclude_file))}\n"
        "\tfilemode = true\n"
        "\tsymlinks = true\n"
        "\tignoreCase = false\n"
        "\tignoreStat = false\n"
        "\tcheckStat = default\n"
        "\ttrustctime = true\n"
        "\tautocrlf = false\n"
        "\tprecomposeUnicode = false\n"
        "\tprotectNTFS = true\n"
        "\tprotectHFS = false\n"
        "\tfsmonitor = false\n"
        "\tuntrackedCache = false\n"
    )
    (gitdir / "config.worktree").write_text(config)


def read_rules(path: Path, root: Path) -> str | None:
    """The text of exclude file ``path`` (of worktree ``root``), or None, logged at warning,
    when it cannot be read safely. A nested repository's ``gitdir:`` file may point anywhere,
    so the file is read only when it is a regular file (opened without blocking: never a FIFO
    or a device), at most ``MAX_RULES_BYTES`` long, and owned by this process's user or by
    the owner of ``root``. A missing file is no rule (None, silently)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("cannot read the exclude file %s (its rules do not apply): %s", path, exc)
        return None
    try:
        st = os.fstat(fd)
        owners = {os.getuid(), os.stat(root).st_uid}
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_RULES_BYTES \
                or st.st_uid not in owners:
            log.warning("exclude file %s is not a regular file of at most %d bytes owned by "
                        "uid %s (its rules do not apply)", path, MAX_RULES_BYTES,
                        " or ".join(str(u) for u in sorted(owners)))
            return None
        return os.read(fd, MAX_RULES_BYTES + 1)[:MAX_RULES_BYTES].decode(errors="replace")
    except OSError as exc:
        log.warning("cannot read the exclude file %s (its rules do not apply): %s", path, exc)
        return None
    finally:
        os.close(fd)


def _reincluded(gitignore: Path) -> set[str]:
    """The names a ``.gitignore`` re-includes by a negation (``!node_modules/`` ->
    ``node_modules``). Read only when it is a regular file (through a symlink, as libgit2
    reads it) of at most ``MAX_RULES_BYTES``, as ``read_rules`` reads exclude files: a FIFO
    would block, and a device that never ends (a link to ``/dev/zero``) would be read until
    memory ran out."""
    try:
        text = read_regular(gitignore, MAX_RULES_BYTES).decode(errors="replace")
    except FileNotFoundError:
        return set()
    except OSError as exc:
        log.warning("cannot read %s for re-included folders (the default excludes of a plain "
                    "directory all apply): %s", gitignore, exc)
        return set()
    return {line.strip()[1:].strip("/") for line in text.splitlines()
            if line.strip().startswith("!")}


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
