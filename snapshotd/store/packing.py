"""Packing the store beside live captures: git's packs are written while captures go on writing
loose objects; what deletes an object the caller does only while no capture is in flight.

Owns the git commands of maintenance and of a short-grace prune (docs/durability.md,
"Maintenance"): ``pack_store`` (``git repack -d``, incremental, or ``-a -d -k`` when packs pile
up), ``repack_cruft`` (reachable objects in one pack, every other one in a cruft pack),
``pin_tips``/``pack_since``/``drop_cruft`` (the prune's steps), and ``object_counts``
(``git count-objects -v`` in bytes). Promises: ``pack_store`` and ``repack_cruft`` never delete
an object that is not in a pack they leave behind, so they may run while captures write;
``drop_cruft`` deletes the cruft packs, the caller holding the store's gate alone after
``pack_since`` packed every object the refs reach that the reachable pack may lack.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from snapshotd.store.git_cli import run_store_git

PIN_PREFIX = "refs/snapshotd/maintenance-pin/"
# git's own gc must not start from inside our commands (``gc.auto``), nor detach.
_QUIET = ["-c", "gc.auto=0", "-c", "gc.autoDetach=false", "-c", "pack.useSparse=true",
          "-c", "repack.writeBitmaps=false"]
_ENV = {"GIT_CONFIG_NOSYSTEM": "1"}


def object_counts(store: Path) -> dict[str, int]:
    """``git count-objects -v`` of the store, its sizes in bytes (git says KiB): ``count``,
    ``size`` (loose), ``in-pack``, ``packs``, ``size-pack``, ``prune-packable``, ``garbage``,
    ``size-garbage``. Raises ``RuntimeError`` with git's words when it fails."""
    proc = run_store_git(store, ["count-objects", "-v"], timeout=300.0, env=_ENV)
    if proc.returncode != 0:
        raise RuntimeError(f"git count-objects failed: {proc.stderr.decode(errors='replace')}")
    out: dict[str, int] = {}
    for line in proc.stdout.decode().splitlines():
        key, _, value = line.partition(":")
        out[key.strip()] = int(value.strip()) * (1024 if key.startswith("size") else 1)
    return out


def loose_count(store: Path) -> int:
    """How many loose objects the store holds (a listing of its 256 fan-out directories)."""
    objects = store / "objects"
    total = 0
    for fan in range(256):
        try:
            total += len(os.listdir(objects / f"{fan:02x}"))
        except FileNotFoundError:
            continue
    return total


def pack_count(store: Path) -> int:
    return sum(1 for p in (store / "objects" / "pack").glob("pack-*.pack"))


def pack_store(store: Path, *, consolidate: bool) -> subprocess.CompletedProcess:
    """Pack the loose objects the refs reach into a new pack (delta-compressed) and remove the
    loose copies of packed objects (``prune-packed``); ``consolidate``: every pack and loose
    object, reachable or not, into one pack (``-a -d -k``: no object is dropped, a pack is
    deleted only once its objects are in the new one)."""
    args = ["repack", "-d", "-q"] + (["-a", "-k"] if consolidate else [])
    return run_store_git(store, [*_QUIET, *args], timeout=None, env=_ENV)


def repack_cruft(store: Path) -> subprocess.CompletedProcess:
    """Every object the refs reach into one pack, every other one into a cruft pack (none
    dropped: no expiration), the old packs and the packed loose objects removed."""
    return run_store_git(store, [*_QUIET, "repack", "-a", "-d", "-q", "--cruft"],
                         timeout=None, env=_ENV)


def cruft_packs(store: Path) -> list[Path]:
    """The cruft packs (``.pack`` paths): those with a ``.mtimes`` file."""
    return sorted(p.with_suffix(".pack") for p in (store / "objects" / "pack").glob("*.mtimes"))


def ref_tips(store: Path) -> dict[str, str]:
    """Every ref of the store (pins excluded) and what it names: ``"commit <id> <tree>"`` or
    ``"<type> <id> "``."""
    proc = run_store_git(store, ["for-each-ref", "--format=%(objectname) %(objecttype) "
                                 "%(tree) %(refname)"], timeout=300.0, env=_ENV)
    if proc.returncode != 0:
        raise RuntimeError(f"git for-each-ref failed: {proc.stderr.decode(errors='replace')}")
    tips: dict[str, str] = {}
    for line in proc.stdout.decode("utf-8", "surrogateescape").splitlines():
        oid, kind, tree, name = line.split(" ", 3)
        if not name.startswith(PIN_PREFIX):
            tips[name] = f"{kind} {oid} {tree}"
    return tips


def pin_tips(store: Path, tips: dict[str, str]) -> None:
    """Name every commit and tree of ``tips`` by a pin ref, so the reachable pack written next
    holds all they reach whatever ref moves meanwhile."""
    named = sorted({v.split()[1] for v in tips.values() if v.startswith(("commit ", "tree "))})
    script = "".join(f"update {PIN_PREFIX}{c} {c}\n" for c in named).encode()
    _update_refs(store, script)


def drop_pins(store: Path) -> None:
    proc = run_store_git(store, ["for-each-ref", "--format=%(refname)", PIN_PREFIX],
                         timeout=300.0, env=_ENV)
    names = proc.stdout.decode().split() if proc.returncode == 0 else []
    if names:
        _update_refs(store, "".join(f"delete {n}\n" for n in names).encode())


def pinned(store: Path) -> tuple[list[str], set[str]]:
    """The pinned commits and the pinned trees."""
    proc = run_store_git(store, ["for-each-ref", "--format=%(objecttype) %(objectname)",
                                 PIN_PREFIX], timeout=300.0, env=_ENV)
    if proc.returncode != 0:
        raise RuntimeError(f"git for-each-ref failed: {proc.stderr.decode(errors='replace')}")
    pairs = [line.split() for line in proc.stdout.decode().splitlines()]
    return [o for k, o in pairs if k == "commit"], {o for k, o in pairs if k == "tree"}


def pack_since(store: Path, positives: list[str], negatives: list[str]) -> None:
    """Pack into the store every object ``positives`` (commits and trees) reach that the
    commits ``negatives`` do not (git's sparse walk: only the paths that changed are read;
    it may take a few objects too many, never one too few)."""
    if not positives:
        return
    lines = positives + (["--not", *negatives] if negatives else [])
    base = str(store / "objects" / "pack" / "pack")
    proc = run_store_git(store, [*_QUIET, "pack-objects", "--revs", "--sparse", "-q", base],
                         timeout=None, stdin=("\n".join(lines) + "\n").encode(), env=_ENV)
    if proc.returncode != 0:
        raise RuntimeError(f"git pack-objects failed: {proc.stderr.decode(errors='replace')}")


def drop_cruft(packs: list[Path]) -> int:
    """Delete the cruft packs ``packs`` (``.idx`` first, so git never sees a pack without its
    index); the bytes they held. The caller holds the store's gate alone."""
    freed = 0
    for pack in packs:
        for suffix in (".idx", ".mtimes", ".rev", ".pack"):
            part = pack.with_suffix(suffix)
            try:
                freed += part.stat().st_size
                part.unlink()
            except FileNotFoundError:
                continue
    return freed


def _update_refs(store: Path, script: bytes) -> None:
    if not script:
        return
    proc = run_store_git(store, ["update-ref", "--stdin"], timeout=300.0, stdin=script, env=_ENV)
    if proc.returncode != 0:
        raise RuntimeError(f"git update-ref failed: {proc.stderr.decode(errors='replace')}")
