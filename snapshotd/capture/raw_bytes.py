"""Files are stored as their bytes: no git attribute converts what a checkpoint holds.

Owns the seed's checks for entries of the user's index whose blob is not the file's bytes: an
entry whose stat size differs from its blob's (``converted_entries``, asked only when the user's
repository can convert at all: ``conversion_possible``), or one with a filter or working-tree
encoding, which may keep the size (``size_keeping_entries``). Such an entry's stat data is
spoiled so the first scan stores the file itself. The store's ``info/attributes`` that makes
every capture path store raw bytes is ``store.attributes``'. Why, and the cost:
docs/durability.md ("Bytes, not conversions"), performance.md.

Promises: a seeded entry whose blob may not be its file's bytes is spoiled, never trusted.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import stat
import struct
import subprocess
import threading
from array import array
from collections.abc import Iterator
from pathlib import Path

import pygit2

from snapshotd.core import NotRegularFile, read_regular
from snapshotd.store import cache_git_env

log = logging.getLogger("snapshotd.store")

# Attribute names that make git convert a file on its way into a blob.
_CONVERTING = re.compile(rb"\b(text|crlf|eol|ident|filter|working-tree-encoding)\b")
# Those of them that may keep a file's size (the seed's size check cannot see them).
_SIZE_KEEPING = re.compile(rb"\b(filter|working-tree-encoding)\b")
# Every path but those with neither a filter nor an encoding specified (or only unset): one
# pathspec each costs git about 0.3 s at a million paths.
_SPECIFIED = (":(exclude,attr:!filter !working-tree-encoding)",
              ":(exclude,attr:-filter !working-tree-encoding)")
_ENTRY_HEAD = struct.Struct(">36xI20sH")  # file size, object id, flags
_FLAGS = struct.Struct(">H")
_U32 = struct.Struct(">I")
_GITLINK_MODE_AT = 24
_GITLINK = 0o160000
_BATCH_CHECK = ["git"]
_LS_FILES = ["git"]
# A larger attributes file is not read: the seed checks every entry instead.
_MAX_ATTRIBUTES_BYTES = 1 << 20
_LIST_TIMEOUT_S = 600


def conversion_possible(gitdir: Path, entries: bytes, sources: list[Path] | None) -> bool:
    """Whether git in the user's repository (git dir ``gitdir``; ``entries`` its index's
    entries; ``sources`` its attributes files, ``attribute_sources``) may convert a file on
    ``git add``: ``core.autocrlf`` set, or an attributes source that names a converting
    attribute. A tracked ``.gitattributes`` anywhere counts without being read (its name in
    ``entries``)."""
    try:
        config = pygit2.Repository(str(gitdir)).config
        autocrlf = str(config["core.autocrlf"]).lower() if "core.autocrlf" in config else ""
    except (pygit2.GitError, OSError, KeyError, ValueError):
        return True  # cannot tell: check every entry
    if autocrlf not in ("", "false", "no", "off", "0"):
        return True
    if b".gitattributes\0" in entries:
        return True
    return _attributes_name(sources, _CONVERTING)


def size_keeping_entries(root: Path, gitdir: Path, entries: bytes, scratch: Path,
                         sources: list[Path] | None) -> list[int] | None:
    """The offsets (as ``converted_entries``) of the size field of each entry a conversion
    that may keep a file's size applies to: a ``filter`` (a clean filter may map bytes one to
    one; Git LFS's pointer to a 128-byte file is 128 bytes) or a ``working-tree-encoding``
    (UTF-16's form of a text may be as long as its UTF-8). The size check cannot see those.
    Asked only when an attributes file (``sources``, None when unknown, and the tracked
    ``.gitattributes`` read from the worktree) may name one, of git over ``entries`` written
    to the index file ``scratch`` (``ls-files`` with attribute pathspecs: 0.6 s at a million);
    None (logged) when git cannot say. A path that sets or unsets a filter without naming one
    is read again too: slower, never wrong."""
    nested = [root / os.fsdecode(entries[name_at:nul])
              for _off, name_at, nul in _entry_spans(entries)
              if entries.endswith(b".gitattributes", name_at, nul)
              and (nul - name_at == 14 or entries[nul - 15] == 0x2F)] \
        if b".gitattributes\0" in entries else []
    # A FIFO where an attributes file belongs names nothing here: when another file names
    # a filter, git meets it and waits for the guards to release it.
    if sources is not None and not _attributes_name([*sources, *nested], _SIZE_KEEPING,
                                                    odd_reads_empty=True):
        return []
    # git reads a device at info/attributes (a link there is followed) until memory runs out.
    device = _first_device([*(sources or []), *nested])
    if device is not None:
        log.warning("%s is a device, not a regular file: git is not asked which files a "
                    "filter or encoding converts, and every seeded file is read again", device)
        return None
    listed = _list_size_keeping(root, gitdir, entries, scratch)
    if listed is None:
        return None
    return [at for at, name in _entry_paths(entries) if name in listed] if listed else []


def _first_device(paths: list[Path]) -> Path | None:
    """The first of ``paths`` that is a device (followed through links)."""
    for path in paths:
        try:
            mode = os.stat(path).st_mode
        except OSError:
            continue
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
            return path
    return None


def all_entries(entries: bytes) -> list[int]:
    """The offsets (as ``converted_entries``) of every entry's size field but gitlinks'."""
    return [at for at, _name in _entry_paths(entries)]


def attribute_sources(root: Path, gitdir: Path, common: Path) -> list[Path] | None:
    """The attributes files git reads besides the tracked ones: the root's ``.gitattributes``,
    ``info/attributes``, the user's (``core.attributesFile``) and the system's; None when the
    user's configuration cannot be read."""
    try:
        config = pygit2.Repository(str(gitdir)).config
        attributes_file = config["core.attributesFile"] \
            if "core.attributesFile" in config else None
    except (pygit2.GitError, OSError, KeyError, ValueError):
        return None
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config")
    return [root / ".gitattributes", common / "info" / "attributes",
            Path(os.path.expanduser(attributes_file)) if attributes_file
            else Path(xdg) / "git" / "attributes", Path("/etc/gitattributes")]


def _attributes_name(sources: list[Path] | None, names: re.Pattern[bytes], *,
                     odd_reads_empty: bool = False) -> bool:
    """Whether any of the attributes files ``sources`` may name one of ``names``: True too
    when one cannot be read safely or the list is unknown (None); ``odd_reads_empty`` as
    ``_read_attributes``."""
    if sources is None:
        return True
    for source in sources:
        text = _read_attributes(source, odd_reads_empty=odd_reads_empty)
        if text is None or names.search(text):
            return True
    return False


def _read_attributes(path: Path, *, odd_reads_empty: bool = False) -> bytes | None:
    """The text of attributes file ``path`` (b"" when there is none), or None when it cannot
    be read safely (``user_repo.read_regular``: never a FIFO, which would stall the capture)
    or is over ``_MAX_ATTRIBUTES_BYTES``: its answer is then unknown. With
    ``odd_reads_empty``, one that is not a regular file is b"": git reads such a file as empty
    (a FIFO once the daemon's guards release it), so it names nothing for git either."""
    try:
        return read_regular(path, _MAX_ATTRIBUTES_BYTES)
    except FileNotFoundError:
        return b""
    except NotRegularFile:
        return b"" if odd_reads_empty else None
    except OSError:  # FileTooLarge among them
        return None


def converted_entries(entries: bytes, store: Path) -> list[int]:
    """The offsets (in ``entries``, an index's header and entries, format 2 or 3, already
    validated) of the size field of each entry whose blob in ``store`` is not the size its
    stat data records: git converted the file on its way in. The blobs' sizes come from ``git
    cat-file --batch-check`` in a process of its own (2.5 s in all at a million, where
    libgit2's header reads in the daemon took 7 s); when git cannot say, every entry is taken
    as converted (each file is read again: slow, never wrong)."""
    at, sizes, ids = _entry_sizes(entries)
    stored = _blob_sizes(store, ids, len(at))
    if stored is None:
        return list(at)
    return [offset for offset, size, blob in zip(at, sizes, stored, strict=True) if size != blob]


def _entry_sizes(entries: bytes) -> tuple[array, array, bytes]:
    """For each entry but gitlinks: where its size field is, that size; and their object ids,
    raw, one after another (arrays and one buffer: a million entries as objects would cost
    the daemon 150 MB more). Its own loop, not ``_entry_spans``: 0.2 s less at a million."""
    at = array("q")
    sizes = array("q")
    ids = bytearray()
    version, count = struct.unpack_from(">II", entries, 4)
    head = _ENTRY_HEAD.unpack_from
    u32 = _U32.unpack_from
    off = 12
    for _ in range(count):
        size, oid, flags = head(entries, off)
        name_at = off + 62 + (2 if version >= 3 and flags & 0x4000 else 0)
        name_len = flags & 0xFFF
        nul = name_at + name_len if name_len < 0xFFF else entries.index(b"\0", name_at)
        if u32(entries, off + _GITLINK_MODE_AT)[0] != _GITLINK:
            at.append(off + 36)
            sizes.append(size)
            ids += oid
        off += (nul - off + 8) & ~7
    return at, sizes, bytes(ids)


def _entry_paths(entries: bytes) -> Iterator[tuple[int, bytes]]:
    """For each entry but gitlinks: where its size field is, and its path."""
    for off, name_at, nul in _entry_spans(entries):
        yield off + 36, entries[name_at:nul]


def _entry_spans(entries: bytes) -> Iterator[tuple[int, int, int]]:
    """For each entry but gitlinks: where it starts, where its name starts and ends."""
    version, count = struct.unpack_from(">II", entries, 4)
    flags_of = _FLAGS.unpack_from
    u32 = _U32.unpack_from
    off = 12
    for _ in range(count):
        flags = flags_of(entries, off + 60)[0]
        name_at = off + 62 + (2 if version >= 3 and flags & 0x4000 else 0)
        name_len = flags & 0xFFF
        nul = name_at + name_len if name_len < 0xFFF else entries.index(b"\0", name_at)
        if u32(entries, off + _GITLINK_MODE_AT)[0] != _GITLINK:
            yield off, name_at, nul
        off += (nul - off + 8) & ~7


def _list_size_keeping(root: Path, gitdir: Path, entries: bytes,
                       scratch: Path) -> set[bytes] | None:
    """The paths of ``entries`` whose filter or working-tree encoding is specified, by ``git
    ls-files`` over them (written to ``scratch``) in the user's repository; None (logged)
    when git cannot say."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(GIT_DIR=str(gitdir), GIT_WORK_TREE=str(root), GIT_INDEX_FILE=str(scratch),
               GIT_OPTIONAL_LOCKS="0")
    try:
        scratch.write_bytes(entries + hashlib.sha1(entries).digest())
        proc = subprocess.run([*_LS_FILES, "ls-files", "-z", "--", ".", *_SPECIFIED],
                              cwd=str(root), env=env, capture_output=True,
                              timeout=_LIST_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.warning("cannot ask git which files a filter or encoding converts (%s): every "
                    "seeded file is read again", exc)
        return None
    finally:
        scratch.unlink(missing_ok=True)
    if proc.returncode != 0:
        log.warning("git could not tell which files a filter or encoding converts (exit %s: "
                    "%s): every seeded file is read again", proc.returncode,
                    proc.stderr.decode(errors="replace").strip()[-300:])
        return None
    return set(proc.stdout.split(b"\0")[:-1])


def _blob_sizes(store: Path, ids: bytes, count: int) -> array | None:
    """The size of each of the ``count`` objects ``ids`` names (raw ids one after another) in
    ``store`` (-1 for one it lacks, never equal to a stat size), in order; None when git could
    not say."""
    if not count:
        return array("q")
    request = ids.hex("\n", 20).encode() + b"\n"
    try:
        proc = subprocess.Popen([*_BATCH_CHECK, "cat-file", "--batch-check=%(objectsize)"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=cache_git_env(store))
    except OSError as exc:
        log.warning("cannot ask git for the seed's blob sizes (%s): every seeded file is read "
                    "again", exc)
        return None
    # Written from a thread while the answer is read: neither pipe may fill up and stall git.
    feeder = threading.Thread(target=_feed, args=(proc, request), daemon=True)
    feeder.start()
    out = proc.stdout.read() if proc.stdout is not None else b""
    err = proc.stderr.read() if proc.stderr is not None else b""
    proc.wait()
    feeder.join()
    lines = out.split(b"\n")[:-1]
    if proc.returncode != 0 or len(lines) != count:
        log.warning("git could not tell the seed's blob sizes (exit %s: %s): every seeded file "
                    "is read again", proc.returncode, err.decode(errors="replace").strip()[-300:])
        return None
    return array("q", (int(line) if line.isdigit() else -1 for line in lines))


def _feed(proc: subprocess.Popen, request: bytes) -> None:
    try:
        if proc.stdin is not None:
            proc.stdin.write(request)
            proc.stdin.close()
    except OSError:
        pass  # git exited early: its status and stderr say why


def spoil_sizes(entries: bytes, offsets: list[int]) -> bytes:
    """``entries`` with the size field at each of ``offsets`` changed, so that no file matches
    its stat data and the next scan reads it."""
    out = bytearray(entries)
    for at in offsets:
        size = _U32.unpack_from(out, at)[0]
        _U32.pack_into(out, at, (size + 1) & 0xFFFFFFFF)
    return bytes(out)
