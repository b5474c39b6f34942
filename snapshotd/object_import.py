"""Bringing objects of a user's repository into the store, for a seed (``seeding``).

Owns ``import_objects``: each pack of the user's repository of which at least half the objects
are wanted is taken whole, hard-linked into the store's ``objects/pack`` (copied when the link
cannot be made, e.g. across file systems) after its checksums are verified; whatever is still
wanted (loose objects, objects of packs mostly holding others) is copied as one new pack by
``git pack-objects`` / ``git index-pack``. A link costs no copy and no git process: for a fresh
clone of 10,000 files the pack-objects copy was about half of the first capture's CPU.

Promises: the objects end up in the store's own files, never borrowed through alternates (the
user's own gc could delete objects we depend on; a git pack is never changed in place, and
our link keeps the inode when their gc removes their name); a pack becomes visible only whole
(the pack before its index, each under a temporary name first); the store takes at most twice
the objects it wants from a linked pack; True only when every wanted object arrived.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import struct
import subprocess
from pathlib import Path

from snapshotd.durable import GIT_FSYNC_ARGS, fsync_path, sync_dirs

log = logging.getLogger("snapshotd.seeding")

_IDX_V2 = b"\377tOc\0\0\0\2"
_IDX_HEADER = 8 + 256 * 4  # magic, version, fan-out table (its last slot: the object count)


def import_objects(user_gitdir: Path, store: Path, oids: list[str], fsync: bool) -> bool:
    """Bring ``oids`` (distinct ids) from the repository at ``user_gitdir`` into ``store``:
    the packs most of whose objects are wanted, linked whole; the rest copied as one pack.
    True only when every one arrived."""
    rest = link_packs(user_gitdir, store, oids, fsync)
    return not rest or copy_objects(user_gitdir, store, rest, fsync)


def link_packs(user_gitdir: Path, store: Path, oids: list[str], fsync: bool) -> list[str]:
    """Link into ``store`` each pack of the user's repository at least half of whose objects
    are among ``oids``; returns the ``oids`` no linked pack holds. A pack that fails its
    checks, or cannot be linked or copied, is left out (its objects stay in the result)."""
    pack_dir = _objects_dir(user_gitdir) / "pack"
    wanted = set(oids)
    try:
        indexes = sorted(pack_dir.glob("pack-*.idx"))
    except OSError:
        return oids
    linked = False
    for idx in indexes:
        if not wanted:
            break
        held = _wanted_in(idx, wanted)
        if held and _link_pack(idx, store / "objects" / "pack", fsync):
            wanted -= held
            linked = True
    if linked and fsync:
        sync_dirs([store / "objects" / "pack"])
    return [oid for oid in oids if oid in wanted]


def _wanted_in(idx: Path, wanted: set[str]) -> set[str]:
    """The ids of ``wanted`` the pack of index ``idx`` (version 2) holds, when they are at
    least half of its objects; else (or when it cannot be read) an empty set."""
    try:
        with open(idx, "rb") as f:
            header = f.read(_IDX_HEADER)
            if len(header) != _IDX_HEADER or header[:8] != _IDX_V2:
                return set()
            count = struct.unpack(">I", header[-4:])[0]
            if count == 0 or count > 2 * len(wanted):
                return set()  # mostly objects we do not want: not worth reading its names
            names = f.read(20 * count).hex()
    except OSError:
        return set()
    held = wanted.intersection([names[i:i + 40] for i in range(0, len(names), 40)])
    return held if 2 * len(held) >= count else set()


def _link_pack(idx: Path, pack_dir: Path, fsync: bool) -> bool:
    """Put the pack of ``idx`` and then ``idx`` into ``pack_dir`` under their own names, each
    linked (or copied) to a temporary name, checked and renamed. True when both are there."""
    pack = idx.with_suffix(".pack")
    final_pack, final_idx = pack_dir / pack.name, pack_dir / idx.name
    if final_idx.exists() and final_pack.exists():
        return True  # the same name is the same objects: a pack's name is its checksum
    tmp_pack = pack_dir / f"tmp_link_{os.getpid()}_{pack.name}"
    tmp_idx = pack_dir / f"tmp_link_{os.getpid()}_{idx.name}"
    try:
        for src, tmp in ((pack, tmp_pack), (idx, tmp_idx)):
            _place(src, tmp)
            if fsync:
                fsync_path(tmp)
        if not _verified(tmp_pack, tmp_idx):
            log.warning("not linking %s into the store: its checksums do not match", pack)
            return False
        os.replace(tmp_pack, final_pack)
        os.replace(tmp_idx, final_idx)
        return True
    except OSError as exc:
        log.warning("could not link %s into the store (its objects are copied): %s", pack, exc)
        return False
    finally:
        for tmp in (tmp_pack, tmp_idx):
            tmp.unlink(missing_ok=True)


def _place(src: Path, dest: Path) -> None:
    """``dest`` as a hard link to ``src``, or a copy of it where no link can be made."""
    dest.unlink(missing_ok=True)  # a leftover of a run that died here
    try:
        os.link(src, dest)
    except OSError:
        shutil.copyfile(src, dest)


def _verified(pack: Path, idx: Path) -> bool:
    """Whether ``idx`` is whole (its own SHA-1), names the checksum ``pack`` ends with, and
    ``pack`` is whole (the SHA-1 of everything before that checksum) with as many objects as
    ``idx`` counts."""
    data = idx.read_bytes()
    if len(data) < _IDX_HEADER + 40 or hashlib.sha1(data[:-20]).digest() != data[-20:]:
        return False
    count = struct.unpack(">I", data[_IDX_HEADER - 4:_IDX_HEADER])[0]
    digest = hashlib.sha1()
    with open(pack, "rb") as f:
        head = f.read(12)
        if head[:4] != b"PACK" or struct.unpack(">II", head[4:12]) not in ((2, count), (3, count)):
            return False
        size = os.fstat(f.fileno()).st_size
        digest.update(head)
        left = size - 12 - 20
        while left > 0:
            chunk = f.read(min(left, 1 << 20))
            if not chunk:
                return False
            digest.update(chunk)
            left -= len(chunk)
        trailer = f.read(20)
    return digest.digest() == trailer == data[-40:-20]


def _objects_dir(gitdir: Path) -> Path:
    """The object directory of the repository at ``gitdir`` (its common dir's, for a linked
    worktree)."""
    try:
        text = (gitdir / "commondir").read_text().strip()
    except OSError:
        return gitdir / "objects"
    common = Path(text)
    return (common if common.is_absolute() else gitdir / common) / "objects"


def copy_objects(user_gitdir: Path, store: Path, oids: list[str], fsync: bool) -> bool:
    """Copy objects (distinct ids) from the user's repository into the store as one pack.
    True only when every one arrived: ``pack-objects`` given ids packs exactly those (and fails
    on one it cannot read), so a new pack whose index counts ``len(oids)`` objects holds them
    all, which spares looking each of them up again."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_CONFIG_NOSYSTEM"] = "1"
    try:
        # --window=0: deltas the user's packs hold are reused as they are, and no new delta
        # search runs (for a clone of 1,000,000 files that search is most of the copy's CPU;
        # what it would save in store size the user's repository did not bother to save).
        packer = subprocess.Popen(["git", "--git-dir", str(user_gitdir), "pack-objects",
                                   "--stdout", "-q", "--window=0"], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        # index-pack fsyncs the pack and its index; their names need objects/pack fsynced.
        indexer = subprocess.Popen(["git", *GIT_FSYNC_ARGS, "--git-dir", str(store),
                                    "index-pack", "--stdin"],
                                   stdin=packer.stdout, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, env=env)
        assert packer.stdin is not None and packer.stdout is not None
        packer.stdout.close()  # the indexer holds it now
        try:
            packer.stdin.write(("\n".join(oids) + "\n").encode())
        finally:
            packer.stdin.close()
        out, _ = indexer.communicate(timeout=3600)
        if packer.wait(timeout=3600) != 0 or indexer.returncode != 0:
            return False
        kind, _, name = out.decode(errors="replace").strip().partition("\t")
        if kind not in ("pack", "keep") or len(name) != 40:
            return False
        with open(store / "objects" / "pack" / f"pack-{name}.idx", "rb") as idx:
            header = idx.read(_IDX_HEADER)
        if header[:8] != _IDX_V2 or len(header) != _IDX_HEADER:
            return False
        if fsync:
            sync_dirs([store / "objects" / "pack"])
        return struct.unpack(">I", header[-4:])[0] == len(oids)
    except (OSError, subprocess.TimeoutExpired):
        return False
