"""Bringing objects of a user's repository into the store, for a seed (``seeding``).

Owns ``import_objects``: each pack of the user's repository of which at least half the objects
are wanted (judged on an even sample of ``_SAMPLE`` of them) is copied whole into the store's
``objects/pack`` (its bytes, hashed on the way and checked against its checksums: no git
process, nothing inflated or hashed per object); whatever is still wanted (loose objects,
objects of packs mostly holding others) is copied as one new pack by ``git pack-objects`` /
``git index-pack``. What each costs: docs/performance.md, "snapshotd/store/object_import.py".

Promises: the objects end up in files of the store's own, never borrowed through alternates
(the user's own gc could delete objects we depend on) nor hard-linked (the store's start-up
takes group and other bits off every file in the home: on a link, that would change the
user's own pack); a pack becomes visible only whole (the pack before its index, each under a
temporary name first); the store takes about at most twice the objects it wants from a pack
copied whole (the share is sampled); True only when every wanted object arrived.
"""

from __future__ import annotations

import hashlib
import logging
import os
import struct
import subprocess
from collections.abc import Iterator
from pathlib import Path

from snapshotd.core import (
    GIT_FSYNC_ARGS,
    common_dir,
    open_regular,
    read_regular,
    sync_dirs,
    write_all,
    write_new,
)

log = logging.getLogger("snapshotd.seeding")

_IDX_V2 = b"\377tOc\0\0\0\2"
_IDX_HEADER = 8 + 256 * 4  # magic, version, fan-out table (its last slot: the object count)
# How many of a pack's objects are looked up to judge whether most of it is wanted.
_SAMPLE = 1024


def import_objects(user_gitdir: Path, store: Path, oids: list[bytes], fsync: bool) -> bool:
    """Bring ``oids`` (distinct raw ids) from the repository at ``user_gitdir`` into ``store``:
    the packs most of whose objects are wanted, copied whole; the rest copied as one pack.
    True only when every one arrived."""
    rest = take_packs(user_gitdir, store, oids, fsync)
    return not rest or copy_objects(user_gitdir, store, rest, fsync)


def take_packs(user_gitdir: Path, store: Path, oids: list[bytes], fsync: bool) -> list[bytes]:
    """Copy into ``store`` each pack of the user's repository at least half of whose objects
    are among ``oids``; returns the ``oids`` no pack copied holds. A pack that fails its
    checks or cannot be copied is left out (its objects stay in the result)."""
    wanted = set(oids)
    try:
        indexes = sorted((common_dir(user_gitdir) / "objects" / "pack").glob("pack-*.idx"))
    except OSError:
        return oids  # no pack to take: they all go through git pack-objects
    taken = False
    for idx in indexes:
        if not wanted:
            break
        names = _names(idx, 2 * len(wanted))
        if names is None:
            continue
        if 2 * _share_wanted(names, wanted) >= 1 \
                and _take_pack(idx, store / "objects" / "pack", fsync):
            for ids in _ids(names):
                wanted.difference_update(ids)
            taken = True
    if taken and fsync:
        sync_dirs([store / "objects" / "pack"])
    return [oid for oid in oids if oid in wanted]


def _names(idx: Path, most: int) -> bytes | None:
    """The raw object ids the pack index ``idx`` (version 2) lists, or None when it lists more
    than ``most`` (mostly objects we do not want: not worth reading) or cannot be read."""
    try:
        with open_regular(idx) as f:
            header = f.read(_IDX_HEADER)
            if len(header) != _IDX_HEADER or header[:8] != _IDX_V2:
                return None
            count = struct.unpack(">I", header[-4:])[0]
            if count == 0 or count > most:
                return None
            names = f.read(20 * count)
    except OSError:
        return None
    return names if len(names) == 20 * count else None


def _share_wanted(names: bytes, wanted: set[bytes]) -> float:
    """The share of the objects of raw ``names`` that are ``wanted``, from an even sample of
    ``_SAMPLE`` of them (all when fewer): a million ids looked up cost a large part of a
    second, and this decides only whether copying the pack whole is worth it."""
    count = len(names) // 20
    step = max(1, count // _SAMPLE)
    picks = range(0, count, step)
    return sum(names[20 * i:20 * i + 20] in wanted for i in picks) / len(picks)


def _ids(names: bytes) -> Iterator[list[bytes]]:
    """The raw ids of ``names``, 65,536 at a time (a million at once would hold some fifty
    megabytes of objects beside the seed's own)."""
    step = 20 << 16
    for at in range(0, len(names), step):
        chunk = names[at:at + step]
        yield [chunk[i:i + 20] for i in range(0, len(chunk), 20)]


def _take_pack(idx: Path, pack_dir: Path, fsync: bool) -> bool:
    """Copy the pack of ``idx`` and then ``idx`` into ``pack_dir`` under their own names, each
    written to a temporary name, checked and renamed. True when both are there."""
    pack = idx.with_suffix(".pack")
    final_pack, final_idx = pack_dir / pack.name, pack_dir / idx.name
    if final_idx.exists() and final_pack.exists():
        return True  # the same name is the same objects: a pack's name is its checksum
    tmp_pack = pack_dir / f"tmp_seed_{os.getpid()}_{pack.name}"
    tmp_idx = pack_dir / f"tmp_seed_{os.getpid()}_{idx.name}"
    try:
        for tmp in (tmp_pack, tmp_idx):
            tmp.unlink(missing_ok=True)  # a leftover of a run that died here
        index = read_regular(idx)
        if not _index_whole(index) or not _copy_pack(pack, tmp_pack, index, fsync):
            log.warning("not copying %s into the store whole: its checksums do not match "
                        "(its objects go through git pack-objects)", pack)
            return False
        write_new(tmp_idx, index, 0o444, sync=fsync)
        os.replace(tmp_pack, final_pack)
        os.replace(tmp_idx, final_idx)
        return True
    except OSError as exc:
        log.warning("could not copy %s into the store whole (its objects go through git "
                    "pack-objects): %s", pack, exc)
        return False
    finally:
        for tmp in (tmp_pack, tmp_idx):
            tmp.unlink(missing_ok=True)


def _index_whole(index: bytes) -> bool:
    """Whether a pack index (version 2) is whole: its own SHA-1 checks out."""
    return len(index) >= _IDX_HEADER + 40 and index[:8] == _IDX_V2 \
        and hashlib.sha1(index[:-20]).digest() == index[-20:]


def _copy_pack(pack: Path, dest: Path, index: bytes, fsync: bool) -> bool:
    """Copy ``pack`` to the new file ``dest``, hashing it on the way: True when it is whole (its
    SHA-1 is the checksum it ends with, which ``index`` names too) and counts the objects
    ``index`` counts."""
    count = struct.unpack(">I", index[_IDX_HEADER - 4:_IDX_HEADER])[0]
    digest = hashlib.sha1()
    with open_regular(pack) as src:
        size = os.fstat(src.fileno()).st_size
        head = src.read(12)
        if len(head) < 12 or head[:4] != b"PACK" \
                or struct.unpack(">II", head[4:12]) not in ((2, count), (3, count)):
            return False
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o444)
        try:
            write_all(fd, head)
            digest.update(head)
            left = size - 12 - 20
            while left > 0:
                chunk = src.read(min(left, 1 << 20))
                if not chunk:
                    return False
                digest.update(chunk)
                write_all(fd, chunk)
                left -= len(chunk)
            trailer = src.read(20)
            write_all(fd, trailer)
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
    return digest.digest() == trailer == index[-40:-20]


def copy_objects(user_gitdir: Path, store: Path, oids: list[bytes], fsync: bool) -> bool:
    """Copy objects (distinct raw ids) from the user's repository into the store as one pack.
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
            packer.stdin.write(("\n".join(oid.hex() for oid in oids) + "\n").encode())
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
    except (OSError, subprocess.TimeoutExpired) as exc:
        # The seed is refused and the cache built cold instead: slower, nothing lost.
        log.warning("could not copy %d objects from %s into the store: %s", len(oids),
                    user_gitdir, exc)
        return False
