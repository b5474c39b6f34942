"""powerfs: a FUSE file system for tests that keeps only what fsync made durable, and a "power
cut" that throws the rest away.

``PowerFS(backing, mountpoint)`` mounts a passthrough view of ``backing`` at ``mountpoint`` (a
child process running ``mfusepy`` over libfuse3). Every operation goes straight to ``backing``,
so programs on the mount see an ordinary file system; beside that the layer keeps a model of
what a disk would still hold after losing power, and ``cut()`` rewrites ``backing`` to exactly
that model (after unmounting). ``unmount()`` is a clean shutdown: nothing is lost.

The durability rules modelled (strict POSIX, what LazyFS checks; stricter than ext4):

- Everything present in ``backing`` when it is mounted is durable.
- A regular file's content (and mode) becomes durable only at ``fsync``/``fdatasync`` of that
  file: the durable content is the whole file as it was at its last fsync. A file never fsynced
  since it was created comes back **empty** (its name may still be durable, see below) -- the
  delayed-allocation outcome of ext4/xfs: the name reached the disk, the data did not.
- A directory's entries (names, and which file/directory/symlink each names) become durable
  only at ``fsync`` of that directory: the durable entries are the listing at its last fsync.
  So ``create``, ``rename``, ``link``, ``unlink``, ``mkdir``, ``rmdir`` and ``symlink`` are all
  lost unless the directory (each directory, for a rename across two) is fsynced afterwards. A
  directory created and never fsynced comes back empty. A rename made durable only in its
  target directory leaves the file under both names (hard links); a directory reachable under
  two durable names keeps the first in name order.
- Identity is by inode: fsyncing a file makes its content durable under every durable name
  that refers to it (hard links, names it was renamed from or to).
- Symlinks are durable with their entry (their target is part of the entry).

With ``journal=True`` (the "ext4" model: ext4 ``data=ordered``, the Linux default) namespace
operations are journaled in order: any fsync or directory fsync commits every create, rename,
link, unlink, mkdir and rmdir made before it, anywhere on the file system (a directory that
was renamed since it changed is committed as it is found under its new name). File data is
still durable only at fsync of that file -- delayed allocation: a name committed by someone
else's fsync comes back as an empty file. This is where a ``HEAD`` or a loose object "exists
but is empty" after a crash.

Not modelled: ``auto_da_alloc`` (ext4
flushing a file's data when it is renamed over another), ``sync(2)``/``syncfs(2)`` (FUSE does
not pass them on: a program that relies on them alone is treated as having made nothing
durable), torn or reordered writes inside one file (content is whole-file at fsync),
timestamps (a rebuilt file gets the time of the cut), extended attributes, and sockets/FIFOs
(not recreated). ``renameat2`` flags are not passed through by the binding (plain rename).

Power cut at a chosen point: durability changes only at fsync/fsyncdir, so a cut point is "after
the N-th sync". ``mount(sync_limit=N)`` or ``arm(kind, glob, nth)`` (cut right after the
nth operation of ``kind`` on a path matching ``glob``; any kind in ``KINDS``) set that point;
syncs after it are ignored (the process keeps running, unaware, as it would until the power
actually failed) and ``status()["frozen"]`` turns true at the first ignored sync. An
acknowledgement a client received while ``frozen`` was still false happened before the cut, so
it must survive ``cut()``. Control goes over the child's stdin/stdout (JSON lines).
"""

from __future__ import annotations

import errno
import fnmatch
import functools
import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

SYNC_KINDS = ("fsync", "fsyncdir")
KINDS = ("create", "mkdir", "unlink", "rmdir", "rename", "link", "symlink", "truncate",
         *SYNC_KINDS)


class PowerFSError(RuntimeError):
    """The layer failed (mount, control, unmount or rebuild)."""


@functools.lru_cache(maxsize=1)
def unavailable() -> str | None:
    """Why powerfs cannot run here (a reason for ``pytest.skip``), or None when it can: probes
    ``/dev/fuse``, ``fusermount3``, the binding and one real mount."""
    if not sys.platform.startswith("linux"):
        return "powerfs needs Linux FUSE"
    if not os.path.exists("/dev/fuse"):
        return "/dev/fuse is missing (no FUSE in this kernel or container)"
    if shutil.which("fusermount3") is None:
        return "fusermount3 is missing (install the fuse3 package)"
    try:
        import mfusepy  # noqa: F401 - the probe is the import (it loads libfuse)
    except Exception as exc:  # ImportError, or OSError when libfuse3 is not installed
        return f"the mfusepy binding cannot load libfuse: {exc}"
    probe = Path(tempfile.mkdtemp(prefix="powerfs-probe-"))
    try:
        (probe / "b").mkdir()
        (probe / "m").mkdir()
        fs = PowerFS(probe / "b", probe / "m")
        try:
            fs.mount(timeout=10.0)
        except PowerFSError as exc:
            return f"cannot mount a FUSE file system here: {exc}"
        fs.unmount()
    finally:
        shutil.rmtree(probe, ignore_errors=True)
    return None


class PowerFS:
    """The parent side: mount, steer the cut point, cut power, unmount."""

    def __init__(self, backing: Path, mountpoint: Path, state: Path | None = None,
                 journal: bool = False) -> None:
        self.backing = Path(backing)
        self.journal = journal
        self.mountpoint = Path(mountpoint)
        self.state = Path(state) if state else self.backing.parent / (self.backing.name + ".pfs")
        self.proc: subprocess.Popen | None = None
        self._ctl_lock = threading.Lock()
        self.cuts = 0

    def mount(self, sync_limit: int | None = None, timeout: float = 20.0) -> Path:
        if self.proc is not None:
            raise PowerFSError("already mounted")
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        self.state.mkdir(parents=True, exist_ok=True)
        stderr = open(self.state / "fs.log", "ab")  # noqa: SIM115 - the child owns it
        cmd = [sys.executable, __file__, "--backing", str(self.backing),
               "--mount", str(self.mountpoint), "--state", str(self.state)]
        if sync_limit is not None:
            cmd += ["--sync-limit", str(sync_limit)]
        if self.journal:
            cmd.append("--journal")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=stderr)
        stderr.close()
        deadline = time.monotonic() + timeout
        while not os.path.ismount(self.mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._reap_failed()
                raise PowerFSError(f"mount failed: {self.log_tail()}")
            time.sleep(0.02)
        return self.mountpoint

    def status(self) -> dict[str, Any]:
        """``syncs`` admitted, ``limit`` (None: no cut point), ``frozen`` (a sync was ignored)."""
        return self._ctl({"op": "status"})

    def freeze(self) -> dict[str, Any]:
        """Cut point now: no later sync counts."""
        return self._ctl({"op": "freeze"})

    def arm(self, kind: str, glob: str, nth: int = 1) -> None:
        """Cut point right after the ``nth`` ``kind`` operation on a path matching ``glob``
        (relative to the mount, no leading slash)."""
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        self._ctl({"op": "arm", "kind": kind, "glob": glob, "nth": nth})

    def log(self) -> list[tuple[int, str, str]]:
        """Operations so far: (syncs admitted after it, kind, path)."""
        return [tuple(e) for e in self._ctl({"op": "log"})["log"]]

    def cut(self, timeout: float = 30.0) -> None:
        """Power loss: unmount and rewrite ``backing`` to the durable state. Every process
        using the mount must be gone (a power cut kills them too: SIGKILL them first)."""
        self._ctl({"op": "cut"})
        self._unmount(timeout)
        self.cuts += 1

    def unmount(self, timeout: float = 30.0) -> None:
        """Clean unmount: ``backing`` keeps everything."""
        self._unmount(timeout)

    def log_tail(self, n: int = 2000) -> str:
        try:
            return (self.state / "fs.log").read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def _ctl(self, request: dict[str, Any]) -> dict[str, Any]:
        if self.proc is None or self.proc.poll() is not None:
            raise PowerFSError(f"not mounted: {self.log_tail()}")
        with self._ctl_lock:
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        if not line:
            raise PowerFSError(f"the file system process died: {self.log_tail()}")
        reply = json.loads(line)
        if "error" in reply:
            raise PowerFSError(reply["error"])
        return reply

    def _unmount(self, timeout: float) -> None:
        if self.proc is None:
            return
        deadline = time.monotonic() + timeout
        while True:
            done = subprocess.run(["fusermount3", "-u", str(self.mountpoint)],
                                  capture_output=True, text=True)
            if done.returncode == 0 or not os.path.ismount(self.mountpoint):
                break
            if time.monotonic() > deadline:
                raise PowerFSError(f"cannot unmount (still in use?): {done.stderr.strip()}")
            time.sleep(0.1)
        try:
            code = self.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
        finally:
            self._close_pipes()
        self.proc = None
        if code != 0:
            raise PowerFSError(f"the file system process exited {code}: {self.log_tail()}")

    def _reap_failed(self) -> None:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if os.path.ismount(self.mountpoint):
            subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)],
                           capture_output=True)
        self._close_pipes()
        self.proc = None

    def _close_pipes(self) -> None:
        assert self.proc is not None
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                pipe.close()


# ---------------------------------------------------------------------------------------------
# The child: the FUSE operations and the durability model.


def _operations_base() -> type:
    import mfusepy
    return mfusepy.Operations


class Model:
    """What a disk would hold after a power loss, by node id (one per backing inode, renewed
    when an inode dies so that a reused inode number is a new node)."""

    def __init__(self, backing: str, state: str, sync_limit: int | None,
                 journal: bool = False) -> None:
        self.backing = backing
        self.journal = journal
        self.dirty: dict[int, str] = {}  # journal model: directories changed since a commit
        self.files_dir = os.path.join(state, "files")
        shutil.rmtree(self.files_dir, ignore_errors=True)
        os.makedirs(self.files_dir)
        self.ids: dict[int, int] = {}
        self.next_id = 0
        self.dirs: dict[int, dict[str, tuple[str, Any]]] = {}
        self.synced: dict[int, int] = {}  # file id -> mode; content in files_dir/<id>
        self.initial: set[int] = set()  # files whose durable content is still the live one
        self.syncs = 0
        self.limit = sync_limit
        self.frozen = False
        self.trigger: dict[str, Any] | None = None
        self.log: list[tuple[int, str, str]] = []
        self.cut_requested = False
        self.lock = threading.RLock()
        self.root = self._id(os.lstat(backing).st_ino)
        for top, _dirnames, _files in os.walk(backing):
            self.dirs[self._id(os.lstat(top).st_ino)] = self._listing(top, initial=True)

    # -- identity and bookkeeping

    def _id(self, ino: int) -> int:
        node = self.ids.get(ino)
        if node is None:
            node = self.ids[ino] = self.next_id
            self.next_id += 1
        return node

    def _listing(self, directory: str, initial: bool = False) -> dict[str, tuple[str, Any]]:
        entries: dict[str, tuple[str, Any]] = {}
        for name in os.listdir(directory):
            full = os.path.join(directory, name)
            st = os.lstat(full)
            if stat.S_ISDIR(st.st_mode):
                entries[name] = ("d", self._id(st.st_ino))
            elif stat.S_ISREG(st.st_mode):
                node = self._id(st.st_ino)
                entries[name] = ("f", node)
                if initial:
                    self.initial.add(node)
            elif stat.S_ISLNK(st.st_mode):
                entries[name] = ("l", os.readlink(full))
        return entries

    def touch_dir(self, path: str) -> None:
        """A namespace operation changed the directory holding ``path`` (journal model)."""
        if self.journal:
            parent = os.path.dirname(path.rstrip("/")) or self.backing
            try:
                self.dirty[self._id(os.lstat(parent).st_ino)] = parent
            except FileNotFoundError:
                pass

    def moved(self, old: str, new: str) -> None:
        """A directory was renamed: its pending changes (and its subdirectories') follow it."""
        for node, path in list(self.dirty.items()):
            if path == old or path.startswith(old + "/"):
                self.dirty[node] = new + path[len(old):]

    def commit_journal(self) -> None:
        """Any sync commits the journal: every changed directory as it is now."""
        for node, path in list(self.dirty.items()):
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue
            if self.ids.get(st.st_ino) == node:
                self.dirs[node] = self._listing(path)
        self.dirty.clear()

    def note(self, kind: str, path: str) -> None:
        """Log an operation (after it took effect) and fire an armed cut point."""
        rel = path.lstrip("/")
        self.log.append((self.syncs, kind, rel))
        t = self.trigger
        if t and t["kind"] == kind and fnmatch.fnmatchcase(rel, t["glob"]):
            t["seen"] += 1
            if t["seen"] >= t["nth"]:
                self.limit = self.syncs if self.limit is None else min(self.limit, self.syncs)
                self.trigger = None

    def admit_sync(self) -> bool:
        if self.limit is not None and self.syncs >= self.limit:
            self.frozen = True
            return False
        self.syncs += 1
        if self.journal:
            self.commit_journal()
        return True

    # -- the durable state

    def preserve(self, st: os.stat_result, fd_path: str) -> None:
        """Before a mount-time file changes or loses its last name, keep its content aside:
        that content is what the disk holds until the file is fsynced."""
        if not stat.S_ISREG(st.st_mode):
            return
        node = self.ids.get(st.st_ino)
        if node is None or node not in self.initial:
            return
        self._copy(fd_path, node)
        self.synced[node] = stat.S_IMODE(st.st_mode)
        self.initial.discard(node)

    def forget_if_dying(self, st: os.stat_result) -> None:
        if stat.S_ISDIR(st.st_mode) or st.st_nlink <= 1:
            self.ids.pop(st.st_ino, None)

    def sync_file(self, fd: int) -> None:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return
        node = self._id(st.st_ino)
        self._copy(f"/proc/self/fd/{fd}", node)
        self.synced[node] = stat.S_IMODE(st.st_mode)
        self.initial.discard(node)

    def sync_dir(self, directory: str) -> None:
        self.dirs[self._id(os.lstat(directory).st_ino)] = self._listing(directory)

    def _copy(self, source: str, node: int) -> None:
        tmp = os.path.join(self.files_dir, f"{node}.tmp")
        with open(source, "rb") as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, os.path.join(self.files_dir, str(node)))

    # -- the cut

    def rebuild(self) -> None:
        """Rewrite the backing directory to the durable state (the file system is unmounted)."""
        live: dict[int, str] = {}
        for top, _dirs, files in os.walk(self.backing):
            for name in files:
                full = os.path.join(top, name)
                node = self.ids.get(os.lstat(full).st_ino)
                if node is not None and node in self.initial:
                    live[node] = full
        target = self.backing.rstrip("/") + ".powercut"
        shutil.rmtree(target, ignore_errors=True)
        os.mkdir(target)
        placed_files: dict[int, str] = {}
        placed_dirs = {self.root}
        self._build(self.root, target, live, placed_files, placed_dirs)
        shutil.rmtree(self.backing)
        os.rename(target, self.backing)

    def _build(self, node: int, dest: str, live: dict[int, str],
               placed_files: dict[int, str], placed_dirs: set[int]) -> None:
        for name, (kind, value) in sorted(self.dirs.get(node, {}).items()):
            path = os.path.join(dest, name)
            if kind == "l":
                os.symlink(value, path)
            elif kind == "d":
                if value in placed_dirs:
                    continue
                placed_dirs.add(value)
                os.mkdir(path)
                self._build(value, path, live, placed_files, placed_dirs)
            elif value in placed_files:
                os.link(placed_files[value], path)
            else:
                placed_files[value] = path
                if value in self.synced:
                    shutil.copyfile(os.path.join(self.files_dir, str(value)), path)
                    os.chmod(path, self.synced[value])
                elif value in live:
                    shutil.copy2(live[value], path)
                else:
                    open(path, "wb").close()  # named durably, never fsynced: empty


def _make_operations(model: Model) -> Any:
    base = _operations_base()
    from mfusepy import FuseOSError

    root = model.backing

    def full(path: str) -> str:
        return os.path.join(root, path.lstrip("/"))

    class PowerOps(base):  # type: ignore[misc, valid-type]
        use_ns = True

        def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
            st = os.fstat(fh) if fh is not None and path is None else os.lstat(full(path))
            attrs = {key: getattr(st, key) for key in (
                "st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")}
            attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns,
                         st_ctime=st.st_ctime_ns)
            return attrs

        def access(self, path: str, amode: int) -> int:
            if not os.access(full(path), amode, follow_symlinks=False):
                raise FuseOSError(errno.EACCES)
            return 0

        def readlink(self, path: str) -> str:
            return os.readlink(full(path))

        def opendir(self, path: str) -> int:
            return 0

        def readdir(self, path: str, fh: int) -> list[Any]:
            # With use_ino the entries need their inode numbers: readdir(3) skips inode 0.
            out: list[Any] = []
            for name in (".", "..", *os.listdir(full(path))):
                st = os.lstat(os.path.join(full(path), name))
                out.append((name, {"st_mode": st.st_mode, "st_ino": st.st_ino}, 0))
            return out

        def releasedir(self, path: str, fh: int) -> int:
            return 0

        def statfs(self, path: str) -> dict[str, int]:
            sv = os.statvfs(root)
            return {key: getattr(sv, key) for key in (
                "f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail", "f_files", "f_ffree",
                "f_favail", "f_flag", "f_namemax")}

        def mknod(self, path: str, mode: int, dev: int) -> int:
            with model.lock:
                os.mknod(full(path), mode, dev)
                model.touch_dir(full(path))
                model.note("create", path)
            return 0

        def mkdir(self, path: str, mode: int) -> int:
            with model.lock:
                os.mkdir(full(path), mode)
                model.touch_dir(full(path))
                model.note("mkdir", path)
            return 0

        def symlink(self, target: str, source: str) -> int:
            with model.lock:
                os.symlink(source, full(target))
                model.touch_dir(full(target))
                model.note("symlink", target)
            return 0

        def link(self, target: str, source: str) -> int:
            with model.lock:
                os.link(full(source), full(target))
                model.touch_dir(full(target))
                model.note("link", target)
            return 0

        def unlink(self, path: str) -> int:
            with model.lock:
                st = os.lstat(full(path))
                model.preserve(st, full(path))
                os.unlink(full(path))
                model.touch_dir(full(path))
                model.forget_if_dying(st)
                model.note("unlink", path)
            return 0

        def rmdir(self, path: str) -> int:
            with model.lock:
                st = os.lstat(full(path))
                os.rmdir(full(path))
                model.touch_dir(full(path))
                model.forget_if_dying(st)
                model.note("rmdir", path)
            return 0

        def rename(self, old: str, new: str) -> int:
            with model.lock:
                try:
                    replaced: os.stat_result | None = os.lstat(full(new))
                except FileNotFoundError:
                    replaced = None
                if replaced is not None:
                    model.preserve(replaced, full(new))
                os.rename(full(old), full(new))
                model.touch_dir(full(old))
                model.touch_dir(full(new))
                if model.journal and os.path.isdir(full(new)):
                    model.moved(full(old), full(new))
                if replaced is not None and os.lstat(full(new)).st_ino != replaced.st_ino:
                    model.forget_if_dying(replaced)
                model.note("rename", new)
            return 0

        def chmod(self, path: str, mode: int) -> int:
            os.chmod(full(path), mode)
            return 0

        def chown(self, path: str, uid: int, gid: int) -> int:
            os.lchown(full(path), uid, gid)
            return 0

        def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
            if times is None:
                os.utime(full(path), follow_symlinks=False)
            else:
                os.utime(full(path), ns=(int(times[0]), int(times[1])), follow_symlinks=False)
            return 0

        def open(self, path: str, flags: int) -> int:
            with model.lock:
                if flags & os.O_TRUNC:
                    model.preserve(os.lstat(full(path)), full(path))
                    model.note("truncate", path)
                return os.open(full(path), flags)

        def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
            with model.lock:
                try:
                    existing: os.stat_result | None = os.lstat(full(path))
                except FileNotFoundError:
                    existing = None
                if existing is not None and flags & os.O_TRUNC:
                    model.preserve(existing, full(path))
                fd = os.open(full(path), flags | os.O_CREAT, mode)
                if existing is None:
                    model.touch_dir(full(path))
                model.note("create" if existing is None else "truncate", path)
                return fd

        def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
            return os.pread(fh, size, offset)

        def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
            with model.lock:
                model.preserve(os.fstat(fh), f"/proc/self/fd/{fh}")
                return os.pwrite(fh, data, offset)

        def truncate(self, path: str, length: int, fh: int | None = None) -> int:
            with model.lock:
                if fh is not None:
                    model.preserve(os.fstat(fh), f"/proc/self/fd/{fh}")
                    os.ftruncate(fh, length)
                else:
                    model.preserve(os.lstat(full(path)), full(path))
                    os.truncate(full(path), length)
                model.note("truncate", path or "")
            return 0

        def flush(self, path: str, fh: int) -> int:
            return 0

        def release(self, path: str, fh: int) -> int:
            os.close(fh)
            return 0

        def fsync(self, path: str, datasync: int, fh: int) -> int:
            with model.lock:
                if model.admit_sync():
                    model.sync_file(fh)
                model.note("fsync", path or "")
            return 0

        def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
            with model.lock:
                if model.admit_sync():
                    model.sync_dir(full(path))
                model.note("fsyncdir", path)
            return 0

    return PowerOps()


def _serve_control(model: Model, replies: Any) -> None:
    for line in sys.stdin:
        request = json.loads(line)
        with model.lock:
            reply = _control(model, request)
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


def _control(model: Model, request: dict[str, Any]) -> dict[str, Any]:
    op = request.get("op")
    if op == "status":
        return {"syncs": model.syncs, "limit": model.limit, "frozen": model.frozen}
    if op in ("freeze", "cut"):
        model.limit = model.syncs if model.limit is None else min(model.limit, model.syncs)
        model.cut_requested = model.cut_requested or op == "cut"
        return {"syncs": model.syncs, "limit": model.limit, "frozen": model.frozen}
    if op == "arm":
        model.trigger = {"kind": request["kind"], "glob": request["glob"],
                         "nth": int(request.get("nth", 1)), "seen": 0}
        return {}
    if op == "log":
        return {"log": model.log}
    return {"error": f"unknown control op {op!r}"}


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backing", required=True)
    parser.add_argument("--mount", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--sync-limit", type=int, default=None)
    parser.add_argument("--journal", action="store_true")
    args = parser.parse_args(argv)
    # The control replies own the real stdout; anything libfuse prints goes to stderr.
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import mfusepy

    model = Model(os.path.abspath(args.backing), args.state, args.sync_limit, args.journal)
    threading.Thread(target=_serve_control, args=(model, replies), daemon=True).start()
    # Single-threaded: the model sees operations in the order the kernel answered them.
    mfusepy.FUSE(_make_operations(model), args.mount, foreground=True, nothreads=True,
                 hard_remove=True, use_ino=True, fsname="powerfs")
    if model.cut_requested:
        with model.lock:
            model.rebuild()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
