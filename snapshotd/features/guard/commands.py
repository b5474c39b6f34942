"""Which shell commands destroy work in a worktree: the one list the guard checks (docs/guard.md).

Owns ``destructive(command, cwd)``: the command lexed as a POSIX shell does (``shlex`` with its
punctuation, so ``&&``, ``||``, ``;``, ``|``, ``&``, newlines and redirections are tokens), split
into simple commands, each unwrapped (``sh -c``/``bash -lc`` scripts, ``env``, ``sudo``,
``nohup``, ``time``, ``timeout``, ``xargs``, leading ``VAR=value``) and matched against the forms
docs/guard.md lists. ``cd DIR`` moves the directory later commands are resolved against.

Promises: a pure function of the text and, for the forms that depend on what exists (``mv``/``cp``
over a directory, a truncating redirection), of ``os.stat`` under ``cwd``; it never runs anything
and never raises on any input. Each ``Match`` says the form and why, in words. A command the
lexer cannot read (an unclosed quote) is read as if closed. It errs towards matching: a false
match costs one checkpoint, a missed one can cost the user's files.
"""

from __future__ import annotations

import logging
import os
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

# A script nested deeper than this (``sh -c "bash -c '...'"``) is not read further.
MAX_DEPTH = 4
# The most of a command read: a longer one is read up to here.
MAX_COMMAND_CHARS = 64 * 1024
SEPARATORS = frozenset({";", "&&", "||", "|", "&", "\n", "|&", ";;", "(", ")", "{", "}"})
REDIRECTIONS = frozenset({">", ">>", ">|", "<", "<<", "<<<", ">&", "<&", "&>", "&>>", "<>"})
TRUNCATING = frozenset({">", ">|", "&>"})
SHELLS = frozenset({"sh", "bash", "zsh", "dash", "ksh", "ash", "fish"})
# Prefix commands whose operands are a command: (name, options that take a value).
WRAPPERS: dict[str, frozenset[str]] = {
    "env": frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}),
    "sudo": frozenset({"-u", "-g", "-h", "-p", "-C", "-D", "-r", "-t", "-U", "-T"}),
    "doas": frozenset({"-u", "-C"}),
    "nohup": frozenset(), "time": frozenset(), "command": frozenset(), "exec": frozenset(),
    "builtin": frozenset(), "nice": frozenset({"-n"}), "ionice": frozenset({"-c", "-n"}),
    "stdbuf": frozenset({"-i", "-o", "-e"}),
    "timeout": frozenset({"-s", "--signal", "-k", "--kill-after"}), "xargs": frozenset(
        {"-I", "-L", "-n", "-P", "-s", "-d", "-E", "-a", "--delimiter", "--max-args",
         "--max-procs", "--arg-file"}),
}
GLOB_CHARS = frozenset("*?[")

log = logging.getLogger("snapshotd.guard")


@dataclass(frozen=True)
class Match:
    """One destructive simple command: ``form`` (as docs/guard.md names it), ``reason`` (in
    words, naming the operands that made it so) and ``command`` (its words, re-quoted)."""
    form: str
    reason: str
    command: str


def destructive(command: str, cwd: str | None = None) -> list[Match]:
    """Every destructive simple command in ``command`` (a shell command line), in order; empty
    when none is. ``cwd`` (absolute) resolves relative paths; without it the forms that depend
    on what exists do not match."""
    try:
        return list(_script(str(command)[:MAX_COMMAND_CHARS], cwd, 0))
    except (ValueError, RecursionError) as exc:  # a lexer corner: read it word by word
        log.info("guard: %r read word by word (%s)", str(command)[:80], exc)
        return list(_simple(str(command)[:MAX_COMMAND_CHARS].split(), cwd, 0))


def tokens(script: str) -> list[str]:
    """``script`` lexed as a POSIX shell does, separators and redirections as their own tokens
    and comments dropped; an unclosed quote is read as closed at the end."""
    for closing in ("", '"', "'"):
        try:
            return _lex(script + closing)
        except ValueError:
            continue
    return script.split()


def _lex(script: str) -> list[str]:
    lex = shlex.shlex(script, posix=True, punctuation_chars="();<>|&\n")
    lex.whitespace_split = True
    lex.whitespace = " \t\r"
    lex.commenters = ""
    out: list[str] = []
    comment = False
    for tok in lex:
        if comment:
            comment = "\n" not in tok
            if not comment:
                out.append("\n")
            continue
        if tok.startswith("#"):  # a word that starts with ``#``: a comment to the line's end
            comment = True
            continue
        out.append(tok)
    return out


def _script(script: str, cwd: str | None, depth: int) -> Iterator[Match]:
    """The matches of every simple command of ``script``; ``cd`` moves ``cwd`` for the rest."""
    words: list[str] = []
    for tok in [*tokens(script), ";"]:
        if tok in SEPARATORS or (tok and set(tok) <= set(";&|\n()")):
            if words:
                yield from _simple(words, cwd, depth)
                cwd = _after_cd(words, cwd)
            words = []
        else:
            words.append(tok)


def _after_cd(words: list[str], cwd: str | None) -> str | None:
    if not words or words[0] not in ("cd", "pushd") or cwd is None:
        return cwd
    args = [w for w in words[1:] if not w.startswith("-")]
    if not args or args[0].startswith(("~", "$")):
        return None  # somewhere this module cannot name: stop resolving paths
    return os.path.normpath(os.path.join(cwd, args[0]))


def _simple(words: list[str], cwd: str | None, depth: int) -> Iterator[Match]:
    """The matches of one simple command: its redirections, then the command it runs."""
    argv: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        if word in REDIRECTIONS:
            target = words[i + 1] if i + 1 < len(words) else ""
            if word in TRUNCATING:
                match = _truncation(target, cwd, words)
                if match:
                    yield match
            i += 2
            continue
        argv.append(word)
        i += 1
    yield from _argv(argv, cwd, depth)


def _truncation(target: str, cwd: str | None, words: list[str]) -> Match | None:
    if not target or target.startswith("/dev/") or target.isdigit() or target == "-":
        return None
    path = _existing(target, cwd)
    if path is None or not os.path.isfile(path):
        return None
    return Match("redirect-truncate", f"'>' truncates the existing file {target}",
                 shlex.join(words))


def _existing(name: str, cwd: str | None) -> str | None:
    """``name`` as a path that exists, or None (unknown when relative without ``cwd``)."""
    if name.startswith(("~", "$")) or "\0" in name:
        return None
    if not os.path.isabs(name):
        if cwd is None:
            return None
        name = os.path.join(cwd, name)
    try:
        os.lstat(name)
    except (OSError, ValueError):
        return None
    return name


def _argv(argv: list[str], cwd: str | None, depth: int) -> Iterator[Match]:
    """``argv`` unwrapped (assignments, prefix commands, shells running a script), matched."""
    while argv and "=" in argv[0] and not argv[0].startswith("=") \
            and argv[0].split("=", 1)[0].replace("_", "a").isalnum():
        argv = argv[1:]
    if not argv:
        return
    name = os.path.basename(argv[0])
    if name in SHELLS:
        script = _shell_script(argv)
        if script is not None and depth < MAX_DEPTH:
            yield from _script(script, cwd, depth + 1)
        return
    if name in WRAPPERS:
        inner = _unwrap(argv, WRAPPERS[name])
        if name == "xargs" and inner and os.path.basename(inner[0]) == "rm":
            yield Match("xargs rm", "rm of the paths xargs reads", shlex.join(argv))
            return
        yield from _argv(inner, cwd, depth)
        return
    match = _form(name, argv, cwd)
    if match:
        yield match


def _shell_script(argv: list[str]) -> str | None:
    """The script of ``sh -c SCRIPT`` (``-lc``, ``-e -c``, ``-o opt -c``), else None."""
    i = 1
    while i < len(argv) and argv[i].startswith(("-", "+")) and argv[i] != "--":
        opt = argv[i]
        if opt in ("-o", "+o", "-O", "+O"):
            i += 2
            continue
        if not opt.startswith("--") and "c" in opt[1:]:
            return argv[i + 1] if i + 1 < len(argv) else None
        i += 1
    return None


def _unwrap(argv: list[str], valued: frozenset[str]) -> list[str]:
    """The command a prefix command runs: past its options (and ``VAR=value`` for ``env``)."""
    name = os.path.basename(argv[0])
    i = 1
    while i < len(argv):
        word = argv[i]
        if word == "--":
            return argv[i + 1:]
        if word.startswith("-") and len(word) > 1:
            i += 2 if word in valued else 1
            continue
        if name == "env" and "=" in word:
            i += 1
            continue
        break
    if name == "timeout":
        i += 1  # the duration
    return argv[i:]


def _form(name: str, argv: list[str], cwd: str | None) -> Match | None:
    if name == "rm":
        return _rm(argv)
    if name == "git":
        return _git(argv)
    if name == "find":
        return _find(argv)
    if name == "rsync":
        opts = [a for a in argv[1:] if a.startswith("--delete") or a == "--remove-source-files"]
        if opts:
            return Match("rsync --delete", f"rsync {opts[0]} removes files at the destination",
                         shlex.join(argv))
        return None
    if name in ("mv", "cp"):
        return _over(name, argv, cwd)
    return None


def _flags(args: list[str]) -> tuple[set[str], list[str]]:
    """Short flags (each letter, ``-rf`` -> r, f), long options, and the operands."""
    flags: set[str] = set()
    operands: list[str] = []
    ended = False
    for arg in args:
        if ended or not arg.startswith("-") or arg == "-":
            operands.append(arg)
        elif arg == "--":
            ended = True
        elif arg.startswith("--"):
            flags.add(arg.split("=", 1)[0])
        else:
            flags.update(arg[1:])
    return flags, operands


def _rm(argv: list[str]) -> Match | None:
    flags, operands = _flags(argv[1:])
    if flags & {"r", "R", "--recursive"}:
        return Match("rm -r", "rm -r removes " + (", ".join(operands) or "its operands")
                     + " and everything under them", shlex.join(argv))
    globs = [o for o in operands if GLOB_CHARS & set(o)]
    if globs:
        return Match("rm glob", f"rm of every path matching {globs[0]}", shlex.join(argv))
    return None  # named files only: each is in the last checkpoint (docs/guard.md)


def _git(argv: list[str]) -> Match | None:
    i = 1
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in ("-C", "-c", "--git-dir", "--work-tree", "--namespace") else 1
    if i >= len(argv):
        return None
    sub, rest, text = argv[i], argv[i + 1:], shlex.join(argv)
    flags, operands = _flags(rest)
    if sub == "clean":
        if flags & {"n", "--dry-run"}:
            return None
        what = "ignored files too" if flags & {"x", "X"} else "untracked files"
        return Match("git clean", f"git clean removes {what}", text)
    if sub == "reset" and "--hard" in flags:
        return Match("git reset --hard", "git reset --hard discards uncommitted changes", text)
    if sub == "checkout":
        return _checkout(rest, flags, operands, text)
    if sub == "restore":
        staged_only = flags & {"S", "--staged"} and not flags & {"W", "--worktree"}
        if not staged_only:
            return Match("git restore", "git restore overwrites files in the worktree", text)
        return None
    if sub == "stash" and flags & {"u", "a", "--include-untracked", "--all"}:
        return Match("git stash -u", "git stash -u/-a removes untracked files from the worktree",
                     text)
    if sub == "switch" and flags & {"f", "--force", "--discard-changes"}:
        return Match("git switch -f", "git switch --force discards local changes", text)
    return None


def _checkout(rest: list[str], flags: set[str], operands: list[str], text: str) -> Match | None:
    if flags & {"f", "--force"}:
        return Match("git checkout", "git checkout --force discards local changes", text)
    if "--" in rest:
        paths = rest[rest.index("--") + 1:]
        if paths:
            return Match("git checkout -- paths",
                         f"git checkout -- {' '.join(paths)} overwrites those paths", text)
    if "." in operands or any(GLOB_CHARS & set(o) for o in operands):
        return Match("git checkout -- paths", "git checkout . overwrites the worktree", text)
    return None


def _find(argv: list[str]) -> Match | None:
    text = shlex.join(argv)
    if "-delete" in argv:
        return Match("find -delete", "find -delete removes what it matches", text)
    for opt in ("-exec", "-execdir", "-ok", "-okdir"):
        if opt in argv:
            i = argv.index(opt)
            if i + 1 < len(argv) and os.path.basename(argv[i + 1]) in ("rm", "shred", "unlink"):
                return Match("find -delete", f"find {opt} {argv[i + 1]} removes what it matches",
                             text)
    return None


def _over(name: str, argv: list[str], cwd: str | None) -> Match | None:
    """``mv``/``cp`` onto an existing directory (its same-named entry, or ``-T``) or file."""
    flags, operands = _flags(argv[1:])
    if flags & {"t", "--target-directory"} or len(operands) < 2:
        return None
    *sources, dest = operands
    target = _existing(dest, cwd)
    if target is None:
        return None
    text = shlex.join(argv)
    if not os.path.isdir(target):
        return Match(f"{name} over an existing path", f"{name} overwrites the existing {dest}",
                     text)
    if flags & {"T", "--no-target-directory"}:
        return Match(f"{name} over an existing directory", f"{name} -T replaces {dest}", text)
    for src in sources:
        inside = os.path.join(target, os.path.basename(src.rstrip("/")))
        if os.path.lexists(inside):
            return Match(f"{name} over an existing directory",
                         f"{name} replaces {os.path.join(dest, os.path.basename(src))}", text)
    return None
