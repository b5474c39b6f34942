"""Creating the store durably, and repairing it at start-up after a crash or a power cut.

Owns the creation of ``<home>/store.git`` (``ensure_store``: built beside its final name, every
file and directory fsynced, then renamed into place, so after a cut there is either no store or
a whole one) and the checks of the store and the stat caches under ``<home>/worktrees`` before
the daemon trusts them, made while it holds the home lock: an empty or unparsable ``HEAD`` or
``config`` or a missing ``objects``/``refs`` is rebuilt; an ``info/attributes`` that is not
``attributes.STORE_ATTRIBUTES`` is rewritten and the stat caches dropped; stale ``*.lock`` files
are removed; at the first start of each boot (``<home>/checked-boot``) loose objects that do not
inflate to their name and loose refs that do not parse are removed (the service then points the
attempt's ref at its newest surviving checkpoint). Why each, and why only a reboot leaves the
last two: docs/durability.md ("Start-up repair").

Promises: nothing valid is removed; every removal is fsynced (its directory) and reported in
``status`` (``recovery``) and the log.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import pygit2

from snapshotd.core import (
    boot_id,
    fsync_path,
    is_spare,
    make_dirs,
    sync_dirs,
    sync_tree,
    write_file,
)
from snapshotd.store.attributes import drop_stat_caches, ensure_raw_attributes
from snapshotd.store.loose_refs import spare_in_use

log = logging.getLogger("snapshotd.recovery")

# Loose objects up to this size are inflated and hashed in full; bigger ones only have their
# header checked (a blob near max_file_bytes would cost start-up seconds).
FULL_CHECK_BYTES = 1 << 20
_HEADER = re.compile(rb"^(blob|tree|commit|tag) (\d+)\0")
_HEX = re.compile(r"^[0-9a-f]+$")
_TOP_LOCKS = ("HEAD.lock", "config.lock", "packed-refs.lock", "index.lock", "shallow.lock")
# The store's settings: worktree config carries each stat cache's excludes file; gc stays ours.
STORE_CONFIG: dict[str, object] = {
    "core.repositoryformatversion": 1, "core.bare": True, "extensions.worktreeConfig": True,
    "gc.auto": 0, "core.logAllRefUpdates": False,
}
_STORE_DIRS = ("objects", "objects/pack", "objects/info", "refs", "refs/heads", "refs/tags")
_HEAD = b"ref: refs/heads/master\n"


@dataclass
class Recovery:
    """What start-up repaired (``status``'s ``recovery``)."""

    stale_locks: list[str] = field(default_factory=list)
    bad_objects: list[str] = field(default_factory=list)
    bad_refs: list[str] = field(default_factory=list)
    repaired_files: list[str] = field(default_factory=list)
    # The first start of this boot (or of this home): what a power cut can leave is checked.
    fresh_boot: bool = False

    def as_dict(self) -> dict:
        return {"stale_locks": list(self.stale_locks), "bad_objects": len(self.bad_objects),
                "bad_refs": list(self.bad_refs), "repaired_files": list(self.repaired_files)}


def ensure_store(home: Path) -> list[str]:
    """Create ``<home>/store.git`` (and the home, and ``worktrees``) so that it survives a power
    cut, or repair the store's own files; the files repaired (relative to the store)."""
    make_dirs(home)
    # The home may have been created just now by someone who fsynced nothing (the home lock
    # makes it first): its name, and its parents', are made durable here, at every start.
    for directory in (home, *home.parents):
        fsync_path(directory)
    store = home / "store.git"
    repaired: list[str] = []
    if not store.is_dir() or not any(store.iterdir()):
        building = home / "store.git.new"
        shutil.rmtree(building, ignore_errors=True)
        repo = pygit2.init_repository(str(building), bare=True)
        _configure(repo.config)
        del repo
        ensure_raw_attributes(building, fsync=False)
        sync_tree(building)
        if store.is_dir():
            store.rmdir()  # an empty directory: a store whose entries never reached the disk
        os.rename(building, store)
        fsync_path(home)
    else:
        repaired = _repair_store(store)
        if ensure_raw_attributes(store):
            # Made before files were stored as their bytes, or damaged: the stat caches hold
            # what the old rules made of some files; each worktree is read again.
            repaired.append("info/attributes")
            drop_stat_caches(home)
    make_dirs(home / "worktrees")
    return repaired


def recover_home(home: Path) -> Recovery:
    """Every check above, on ``home`` (call under the home lock, before the store is opened)."""
    out = Recovery()
    store = home / "store.git"
    out.stale_locks = remove_stale_locks(home)
    marker = home / "checked-boot"
    boot = boot_id()
    try:
        checked = marker.read_text().strip() == boot != ""
    except OSError:
        checked = False
    out.fresh_boot = not checked
    if (store / "objects").is_dir() and not checked:
        out.bad_objects = remove_bad_loose_objects(store)
        if (store / "refs").is_dir():
            out.bad_refs = remove_bad_refs(store)
        write_file(marker, f"{boot}\n".encode())
    if out.stale_locks:
        log.warning("removed %d stale lock file(s) left by a crash: %s", len(out.stale_locks),
                    ", ".join(out.stale_locks))
    if out.bad_objects:
        log.warning("removed %d damaged loose object(s) (empty or unreadable after a crash); "
                    "they are written again when needed", len(out.bad_objects))
    if out.bad_refs:
        log.warning("removed %d damaged ref file(s): %s", len(out.bad_refs),
                    ", ".join(out.bad_refs))
    return out


def remove_stale_locks(home: Path) -> list[str]:
    """Remove lock files left in the store and the stat caches; their paths relative to home."""
    store = home / "store.git"
    found = [store / name for name in _TOP_LOCKS if (store / name).is_file()]
    for top, _dirs, files in os.walk(store / "refs"):
        names = set(files)  # a moved ref's spare stays while its ref does (``loose_refs``)
        found += [Path(top, name) for name in files
                  if name.endswith(".lock") and not spare_in_use(name, names)]
    caches = home / "worktrees"
    if caches.is_dir():
        for gitdir in caches.iterdir():
            if gitdir.is_dir():
                found += [gitdir / name for name in os.listdir(gitdir)
                          if name.endswith(".lock")]
    return _remove(home, found)


def remove_bad_loose_objects(store: Path) -> list[str]:
    """Remove loose objects that are empty or do not inflate to their id; their ids."""
    bad: list[Path] = []
    objects = store / "objects"
    for fan in os.scandir(objects):
        if len(fan.name) != 2 or not _HEX.match(fan.name) or not fan.is_dir():
            continue
        for entry in os.scandir(fan.path):
            if len(entry.name) == 38 and _HEX.match(entry.name) \
                    and not _loose_object_ok(Path(entry.path), fan.name + entry.name):
                bad.append(Path(entry.path))
    removed = _remove(store, bad)
    return [name.replace("objects/", "").replace("/", "") for name in removed]


def remove_bad_refs(store: Path) -> list[str]:
    """Remove loose ref files that do not hold an object id or a symbolic ref."""
    bad: list[Path] = []
    for top, _dirs, files in os.walk(store / "refs"):
        for name in files:
            if is_spare(name):
                continue  # not a ref: a moved ref's spare
            path = Path(top, name)
            try:
                text = path.read_bytes().decode("ascii").strip()
            except (OSError, UnicodeDecodeError):
                text = ""
            if not (len(text) == 40 and _HEX.match(text)) and not text.startswith("ref: "):
                bad.append(path)
    return _remove(store, bad)


def _repair_store(store: Path) -> list[str]:
    repaired: list[str] = []
    for name in _STORE_DIRS:
        if not (store / name).is_dir():
            make_dirs(store / name)
            repaired.append(name)
    try:
        head = (store / "HEAD").read_bytes()
    except OSError:
        head = b""
    text = head.strip()
    if not (head.endswith(b"\n") and (text.startswith(b"ref: refs/")
                                      or (len(text) == 40 and _HEX.match(text.decode())))):
        write_file(store / "HEAD", _HEAD)
        repaired.append("HEAD")
    if not _config_ok(store / "config"):
        config_path = store / "config"
        if config_path.exists():
            os.replace(config_path, store / "config.damaged")
        config_path.write_bytes(b"")
        _configure(pygit2.Config(str(config_path)))
        fsync_path(config_path)
        fsync_path(store)
        repaired.append("config")
    if repaired:
        log.warning("repaired the store's %s (empty or unreadable after a crash)",
                    ", ".join(repaired))
    return repaired


def _config_ok(path: Path) -> bool:
    try:
        config = pygit2.Config(str(path))
        return all(_config_value(config, key, value) == value
                   for key, value in STORE_CONFIG.items())
    except (pygit2.GitError, OSError, KeyError, ValueError):
        return False


def _config_value(config: pygit2.Config, key: str, like: object) -> object:
    if isinstance(like, bool):
        return config.get_bool(key)
    if isinstance(like, int):
        return config.get_int(key)
    return config[key]


def _configure(config: pygit2.Config) -> None:
    for key, value in STORE_CONFIG.items():
        config[key] = value


def _loose_object_ok(path: Path, oid: str) -> bool:
    try:
        with open(path, "rb") as f:
            data = f.read(FULL_CHECK_BYTES + 1)
    except OSError:
        return False
    try:
        inflater = zlib.decompressobj()
        if len(data) > FULL_CHECK_BYTES:
            head = inflater.decompress(data, 64)
            return _HEADER.match(head) is not None
        body = inflater.decompress(data)
    except zlib.error:
        return False
    match = _HEADER.match(body)
    if match is None or not inflater.eof:
        return False
    if len(body) - match.end() != int(match.group(2)):
        return False
    return hashlib.sha1(body).hexdigest() == oid


def _remove(base: Path, paths: list[Path]) -> list[str]:
    for path in paths:
        try:
            path.unlink()
        except FileNotFoundError:
            continue
    sync_dirs({path.parent for path in paths})
    return sorted(str(path.relative_to(base)) for path in paths)
