"""Export: an attempt's checkpoints as commits in the user's own repository, or as patches.

Owns ``export_checkpoints`` (the ``export`` op, ``snapshotd export``, the MCP tool),
``export_fields`` and ``attach``; front ends reach it through ``ops``. Promises (docs/review.md):
- One commit per checkpoint in (``from_seq``, ``to_seq``] of one attempt, or one with ``squash``;
  a checkpoint whose tree equals the previous one gives none (``skipped``); messages carry the
  label and the checkpoint's trailers (``Checkpoint.export_message``, ``squash_message``; a
  tier-2 checkpoint a tool call owns is named by that call). The first parent is the user's
  HEAD when the attempt began (the base trailer), else HEAD now, else none (``base_source``).
- ``branch`` writes only objects and a new ``refs/heads/NAME`` (existing: ``conflict``, before any
  write) in git's modes (umask, ``core.sharedRepository``); ``patches`` a ``git am``-able series.
- A tree holding an unreleased secret finding (the secrets trailer, ``withhold``) is refused
  (``secret-held``, naming path:line kind, never the value) before any write, unless
  ``allow_secrets``; a file the base already holds byte for byte is not counted. Trees are
  exported as the checkpoints hold them (bytes; ignored or skipped files not reconciled).
"""

from __future__ import annotations

import logging
import os
import re
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pygit2

from snapshotd.core import (
    BAD_REQUEST,
    CONFLICT,
    DEFAULT_UMASK,
    INTERNAL,
    NOT_FOUND,
    SECRET_HELD,
    Checkpoint,
    ServiceError,
    Trailers,
    abs_path_field,
    bool_field,
    common_dir,
    finding_text,
    not_regular,
    objects_dir,
    open_user_repo,
    opt_int_field,
    share_paths,
    shared_setting,
    squash_message,
    umask_field,
)
from snapshotd.features import blob_at, chain_findings
from snapshotd.service import find_checkpoint, format_seqs, selection, with_tool_calls
from snapshotd.store import SIGNATURE_EMAIL, SIGNATURE_NAME

if TYPE_CHECKING:
    from snapshotd.core import Config, Registry
    from snapshotd.service import Service

log = logging.getLogger("snapshotd.export")

FORMAT_PATCH_TIMEOUT_S = 600.0
MAX_FINDINGS_NAMED = 20
_GITLINK = 0o160000


# -- public entry --------------------------------------------------------------------------------


def export_fields(service: Service, fields: dict) -> dict:
    """``export_checkpoints`` on a request's fields, validated."""
    branch = fields.get("branch")
    if branch is not None and (not isinstance(branch, str) or not branch):
        raise ServiceError(BAD_REQUEST, "branch must be a branch name")
    return export_checkpoints(
        service, run_id=fields.get("run_id"), node_id=fields.get("node_id"),
        from_seq=opt_int_field(fields, "from_seq", 0), to_seq=fields.get("to_seq"),
        iteration=fields.get("iteration"), attempt=fields.get("attempt"), branch=branch,
        squash=bool_field(fields, "squash"), repo=abs_path_field(fields, "repo"),
        patches=abs_path_field(fields, "patches"),
        allow_secrets=bool_field(fields, "allow_secrets"), umask=umask_field(fields))


def export_checkpoints(service: Service, *, run_id: object, node_id: object,
                       from_seq: int | None = None, to_seq: object = None,
                       iteration: object = None, attempt: object = None,
                       branch: str | None = None, squash: bool = False,
                       repo: Path | None = None, patches: Path | None = None,
                       allow_secrets: bool = False, umask: int = DEFAULT_UMASK) -> dict:
    """Export checkpoints (``from_seq``, ``to_seq``] as ``branch`` or into ``patches``."""
    started = time.perf_counter()
    if (branch is None) == (patches is None):
        raise ServiceError(BAD_REQUEST, "name a new branch (--branch) or a directory "
                           "for patches (--patches), one of the two")
    run, node, to, i, a = selection(run_id, node_id, to_seq, iteration, attempt)
    tip = find_checkpoint(service.ledger, run, node, seq=to, iteration=i, attempt=a)
    rows = _rows(service, tip, from_seq)
    store = service.store.reader()
    user_path = repo or Path(tip["worktree"])
    user = _open(user_path)
    out: dict[str, Any] = {"run_id": run, "node_id": node, "iteration": tip["iteration"],
                           "attempt": tip["attempt"], "from_seq": from_seq, "to_seq": tip["seq"],
                           "squash": squash, "repo": user.workdir if user else None}
    if branch is not None:
        if user is None:
            raise ServiceError(NOT_FOUND, f"{user_path} is not in a git repository; "
                               "pass --repo DIR, or write patches with --patches DIR")
        ref = _check_branch(user, branch)
        base, out["base_source"] = _base(store, tip["commit"], user)
        out.update(_secrets_check(service, store, tip, rows, squash, base, user, allow_secrets))
        shared = _Shared(user, ref)
        commits, skipped = _write_commits(store, user, rows, base, squash, shared.objects)
        if not commits:
            raise ServiceError(NOT_FOUND, "nothing to export: every checkpoint in the "
                               "range has the tree of the base commit")
        try:
            user.references.create(ref, pygit2.Oid(hex=commits[-1]["commit"]), force=False)
        except (pygit2.GitError, ValueError) as exc:
            raise ServiceError(CONFLICT, f"could not create {ref}: {exc}") from exc
        shared.apply(umask)
        out.update(branch=branch, ref=ref)
    else:
        assert patches is not None
        base, out["base_source"] = _base(store, tip["commit"], user)
        out.update(_secrets_check(service, store, tip, rows, squash, base, user, allow_secrets))
        commits, skipped, files = _write_patches(store, user, rows, base, squash, patches, umask)
        out.update(patches=str(patches), files=files)
    out.update(base=base, commits=commits, skipped=skipped,
               elapsed_ms=round((time.perf_counter() - started) * 1000, 3))
    return out


def attach(service: Service, server: Registry, config: Config) -> None:
    """Register the ``export`` op on the daemon's server."""
    server.register("export", lambda fields: export_fields(service, fields))


# -- helpers -------------------------------------------------------------------------------------


def _rows(service: Service, tip: dict, from_seq: int | None) -> list[dict]:
    """The kept checkpoints of ``tip``'s attempt in (from_seq, tip], oldest first."""
    if from_seq is not None and from_seq >= tip["seq"]:
        raise ServiceError(BAD_REQUEST, f"--from-seq {from_seq} must be below the last "
                           f"exported checkpoint, seq {tip['seq']}")
    rows = sorted((c for c in service.ledger.checkpoints(tip["run_id"], tip["node_id"])
                   if c["iteration"] == tip["iteration"] and c["attempt"] == tip["attempt"]
                   and not c.get("pruned_at") and c["seq"] <= tip["seq"]
                   and (from_seq is None or c["seq"] > from_seq)), key=lambda c: c["seq"])
    if not rows:
        raise ServiceError(NOT_FOUND, f"no kept checkpoint in ({from_seq}, {tip['seq']}]")
    return with_tool_calls(service.ledger, rows)  # a tier-2 one is named by its owner


def _secrets_check(service: Service, store: pygit2.Repository, tip: dict, rows: list[dict],
                   squash: bool, base: str | None, user: pygit2.Repository | None,
                   allow: bool) -> dict:
    """The reply's ``secrets`` (the unreleased findings the export would write); refused with
    ``secret-held`` unless ``allow``. Runs before anything is written."""
    found = _carried_findings(service, store, tip, [rows[-1]] if squash else rows, base, user)
    if found and not allow:
        named = "; ".join(f"seq {f['seq']} {finding_text(f)} (commit {f['commit']})"
                          for f in found[:MAX_FINDINGS_NAMED])
        more = (f"; and {len(found) - MAX_FINDINGS_NAMED} more"
                if len(found) > MAX_FINDINGS_NAMED else "")
        raise ServiceError(SECRET_HELD, (
            f"not exported: {len(found)} unreleased secret finding(s) in what it would write: "
            f"{named}{more}. Review them; then release each with `snapshotd push --release "
            "COMMIT` or `--release-path PATH` (the release file replication reads), take the "
            "file out with `snapshotd purge`, or export anyway with --allow-secrets"))
    if found:
        log.warning("exported %d unreleased secret finding(s) of %s/%s (--allow-secrets): %s",
                    len(found), tip["run_id"], tip["node_id"],
                    ", ".join(finding_text(f) for f in found))
    return {"secrets": found, "allowed_secrets": bool(found)}


def _carried_findings(service: Service, store: pygit2.Repository, tip: dict,
                      chosen: list[dict], base: str | None, user: pygit2.Repository | None
                      ) -> list[dict]:
    """The attempt's unreleased findings whose file, byte for byte, is in a tree the export
    writes and not in the base's tree. A finding made before the range counts too: an
    unchanged file keeps its token in every later checkpoint, though only the checkpoint that
    changed it was scanned and marked."""
    findings = chain_findings(store, tip["commit"], service.home)
    if not findings:
        return []
    trees = [store[r["commit"]].peel(pygit2.Commit).tree for r in chosen]
    base_tree = user[base].peel(pygit2.Commit).tree if base and user is not None else None
    carried = []
    for f in findings:
        blob = f.pop("blob")
        if f.get("in") == "worktree-path":
            continue  # in every checkpoint's message, never in what an export writes
        if f.get("in") == "name":
            # The name is the secret, whatever the content under it: carried while an exported
            # tree holds the path and the base does not.
            if not any(_holds(t, f["path"]) for t in trees) or _holds(base_tree, f["path"]):
                continue
        # A mark naming no file of its tree (an unreadable trailer) cannot be matched: held.
        elif blob is not None and (not any(blob_at(t, f["path"]) == blob for t in trees)
                                   or (base_tree is not None
                                       and blob_at(base_tree, f["path"]) == blob)):
            continue
        carried.append(f)
    return carried


def _holds(tree: pygit2.Tree | None, path: object) -> bool:
    """Whether ``tree`` has an entry (file, link or directory) at ``path``."""
    if tree is None or not isinstance(path, str) or not path:
        return False
    try:
        tree[path]
    except (KeyError, ValueError):
        return False
    return True


def _open(path: Path) -> pygit2.Repository | None:
    try:
        return open_user_repo(path)
    except (pygit2.GitError, OSError) as exc:
        raise ServiceError(NOT_FOUND, f"cannot open the repository at {path}: "
                           f"{exc}") from exc


def _check_branch(user: pygit2.Repository, branch: str) -> str:
    ref = f"refs/heads/{branch}"
    if not pygit2.reference_is_valid_name(ref) or branch.startswith("-"):
        raise ServiceError(BAD_REQUEST, f"{branch!r} is not a valid branch name")
    special = _special_name(branch)
    if special:
        raise ServiceError(BAD_REQUEST, f"{branch!r} is not a valid branch name: {special}; "
                           "choose another name")
    odd = not_regular(common_dir(Path(user.path)) / ref)
    if odd is not None:
        raise ServiceError(CONFLICT, f"cannot tell whether branch {branch!r} exists in "
                           f"{user.workdir}: {odd} is not a regular file")
    if ref in user.references:
        raise ServiceError(CONFLICT, f"branch {branch!r} already exists in "
                           f"{user.workdir}; choose a new name")
    return ref


def _special_name(branch: str) -> str | None:
    """Why git would refuse ``branch`` as a branch or read the name as another ref (git's
    ``check-ref-format --branch`` refuses ``HEAD``; ``git rev-parse FETCH_HEAD`` reads the
    pseudo-ref, ``@`` is HEAD, ``refs/...`` would make ``refs/heads/refs/...``), else None."""
    if branch == "HEAD" or re.fullmatch(r"[A-Z][A-Z0-9_-]*_HEAD", branch):
        return "git reserves HEAD and the *_HEAD names for its own refs"
    if branch == "@":
        return "git reads @ as HEAD"
    if branch.startswith("refs/"):
        return "give the name without refs/ (it would become refs/heads/refs/...)"
    return None


def _base(store: pygit2.Repository, tip: str, user: pygit2.Repository | None
          ) -> tuple[str | None, str]:
    """The export's base commit and where it came from: ``recorded`` (the user's HEAD when
    the attempt began), ``head`` (HEAD now), or ``none``."""
    recorded = None
    commit = store[tip].peel(pygit2.Commit)
    while True:
        recorded = Trailers(commit.message).base or recorded
        if not commit.parents:
            break
        commit = commit.parents[0]
    if user is None:
        return None, "none"
    if recorded is not None and user.odb.exists(recorded):
        return recorded, "recorded"
    if user.head_is_unborn:
        return None, "none"
    return str(user.head.target), "head"


def _write_commits(store: pygit2.Repository, target: pygit2.Repository, rows: list[dict],
                   base: str | None, squash: bool, written: list[str] | None = None
                   ) -> tuple[list[dict], list[int]]:
    """The export's commits written into ``target`` (objects copied from the store first),
    oldest first, and the seqs that gave none (same tree as their parent). Every object id
    written is appended to ``written``."""
    written = [] if written is None else written
    parent = base
    parent_tree = str(target[base].peel(pygit2.Commit).tree_id) if base else None
    committer = _committer(target)
    chosen = [rows[-1]] if squash else rows
    commits: list[dict] = []
    skipped: list[int] = []
    for row in chosen:
        source = store[row["commit"]].peel(pygit2.Commit)
        tree = str(source.tree_id)
        if tree == parent_tree:
            skipped.append(row["seq"])
            continue
        _copy_tree(store, target, source.tree_id, written)
        author = pygit2.Signature(SIGNATURE_NAME, SIGNATURE_EMAIL, source.commit_time,
                                  source.commit_time_offset)
        message = _squash_message(rows) if squash else _message(row)
        oid = target.create_commit(None, author, committer or author, message,
                                   pygit2.Oid(hex=tree),
                                   [pygit2.Oid(hex=parent)] if parent else [])
        written.append(str(oid))
        commits.append({"seq": row["seq"] if not squash else [r["seq"] for r in rows],
                        "commit": str(oid), "tree": tree, "subject": message.split("\n", 1)[0]})
        parent, parent_tree = str(oid), tree
    return commits, skipped


def _write_patches(store: pygit2.Repository, user: pygit2.Repository | None, rows: list[dict],
                   base: str | None, squash: bool, directory: Path, umask: int
                   ) -> tuple[list[dict], list[int], list[str]]:
    """The series as ``git format-patch`` files in ``directory`` (new or empty), with the
    modes git gives files it creates under the user's ``umask``."""
    _check_patch_dir(directory)
    with tempfile.TemporaryDirectory(prefix="snapshotd-export-") as scratch_dir:
        pygit2.init_repository(scratch_dir, bare=True)
        if user is not None:
            # Read-only borrowing: the scratch repository reads the base's objects in place.
            (Path(scratch_dir) / "objects" / "info" / "alternates").write_text(
                f"{objects_dir(user)}\n")
        scratch = pygit2.Repository(scratch_dir)
        commits, skipped = _write_commits(store, scratch, rows, base, squash)
        if not commits:
            raise ServiceError(NOT_FOUND, "nothing to export: every checkpoint in the "
                               "range has the tree of the base commit")
        made = not directory.exists()
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ServiceError(CONFLICT, f"cannot create the directory {directory}: "
                               f"{_lower(exc.strerror or str(exc))}") from exc
        span = [f"{base}..{commits[-1]['commit']}"] if base else ["--root", commits[-1]["commit"]]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env["GIT_DIR"] = scratch_dir
        try:
            done = subprocess.run(["git", "format-patch", "--no-color", "-o", str(directory),
                                   *span], env=env, cwd=scratch_dir, capture_output=True,
                                  text=True, timeout=FORMAT_PATCH_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServiceError(INTERNAL, f"git format-patch could not run: {exc}") from exc
        if done.returncode != 0:
            raise ServiceError(INTERNAL, f"git format-patch failed: "
                               f"{done.stderr.strip()[:500]}")
    files = [line.strip() for line in done.stdout.splitlines() if line.strip()]
    share_paths(([(directory, 0o777)] if made else []) + [(Path(f), 0o666) for f in files],
                umask, 0)
    return commits, skipped, files


def _check_patch_dir(directory: Path) -> None:
    """``directory`` is new, or an empty directory (a symbolic link to one is followed);
    anything else is refused (``conflict``) with a sentence saying what it is."""
    if directory.is_symlink() and not directory.is_dir():
        try:
            where = f" to {os.readlink(directory)}"
        except OSError:
            where = ""
        raise ServiceError(CONFLICT, f"{directory} is a symbolic link{where} that does not lead "
                           "to a directory; remove it, create the directory, or give another "
                           "path")
    try:
        if directory.exists() and (not directory.is_dir() or any(directory.iterdir())):
            raise ServiceError(CONFLICT, f"{directory} exists and is not an empty directory")
    except OSError as exc:
        raise ServiceError(CONFLICT, f"cannot use {directory} for patches: "
                           f"{_lower(exc.strerror or str(exc))}") from exc


def _lower(text: str) -> str:
    return text[:1].lower() + text[1:]


def _copy_tree(src: pygit2.Repository, dst: pygit2.Repository, root: pygit2.Oid,
               written: list[str]) -> None:
    """Write the objects of tree ``root`` that ``dst`` lacks, children before their tree (an
    interrupted copy never leaves a tree whose entries are missing)."""
    stack: list[tuple[pygit2.Oid, bool]] = [(root, False)]
    while stack:
        oid, expanded = stack.pop()
        if dst.odb.exists(oid):
            continue
        obj = src[oid]
        if isinstance(obj, pygit2.Tree) and not expanded:
            stack.append((oid, True))
            stack.extend((e.id, False) for e in obj if e.filemode != _GITLINK)
            continue
        kind, data = src.odb.read(oid)[:2]
        dst.odb.write(kind, data)
        written.append(str(oid))


class _Shared:
    """What an export writes into the user's repository, given git's modes once written.

    Made before any write: it notes which fan-out directories and which directories above the
    ref and its reflog exist, so that ``apply`` changes only what the export created (a
    directory that was there keeps the mode its owner gave it)."""

    def __init__(self, user: pygit2.Repository, ref: str) -> None:
        self.git_dir = common_dir(Path(user.path))
        self.objects_dir = Path(objects_dir(user))
        self.ref = ref
        try:
            self.shared = shared_setting(user.config["core.sharedRepository"])
        except (KeyError, ValueError, pygit2.GitError):
            self.shared = 0
        self.fans = {p.name for p in self.objects_dir.iterdir()} \
            if self.objects_dir.is_dir() else set()
        self.missing = [d for top in ("refs/heads", "logs/refs/heads")
                        for d in self._dirs_between(top) if not d.exists()]
        self.objects: list[str] = []

    def _dirs_between(self, top: str) -> list[Path]:
        """``top`` (and above it, up to the git dir) and every directory down to the ref's."""
        base = "logs/" if top.startswith("logs/") else ""
        parts = (base + self.ref).split("/")[:-1]
        return [self.git_dir.joinpath(*parts[:i]) for i in range(1, len(parts) + 1)]

    def apply(self, umask: int) -> None:
        """Set git's modes on what the export wrote (``core.user_modes.share_paths``)."""
        paths: list[tuple[Path, int]] = []
        for oid in self.objects:
            if oid[:2] not in self.fans:
                self.fans.add(oid[:2])
                paths.append((self.objects_dir / oid[:2], 0o777))
            paths.append((self.objects_dir / oid[:2] / oid[2:], 0o444))
        paths.extend((d, 0o777) for d in self.missing)
        paths += [(self.git_dir / self.ref, 0o666), (self.git_dir / "logs" / self.ref, 0o666)]
        failed = share_paths(paths, umask, self.shared)
        if failed:
            log.warning("export into %s: %d path(s) kept the daemon's private mode",
                        self.git_dir, failed)


def _committer(target: pygit2.Repository) -> pygit2.Signature | None:
    """The repository's configured identity, or None (the author's is used)."""
    try:
        return target.default_signature
    except (KeyError, pygit2.GitError, ValueError):
        return None


def _message(row: dict) -> str:
    return Checkpoint.from_row(row).export_message(row.get("tool_call"))


def _squash_message(rows: list[dict]) -> str:
    return squash_message([Checkpoint.from_row(r) for r in rows],
                          format_seqs([r["seq"] for r in rows]),
                          [r.get("tool_call") for r in rows])
