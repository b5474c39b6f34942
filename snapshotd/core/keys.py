"""Who a checkpoint belongs to, and the ref that names its chain.

Owns ``AttemptKey`` ``(run_id, node_id, iteration, attempt)``, its one printed form
(``run/node/iteration/attempt``, ``str(key)``) and the mapping between a key and its store ref
``refs/snapshotd/runs/<run>/<node>/<iteration>/<attempt>``; the names of the files a moved ref
keeps beside it (``is_spare``: the store writes them, the ledger skips them when it looks for
refs); and ``worktree_id``, a worktree's stable id (its stat cache's directory, its ledger row).

Promises: ``AttemptKey.from_ref(key.ref) == key`` for every key whose ids passed
``snapshotd.fields.id_field``; ref components are percent-encoded, so any valid id is a legal ref
name component. Imports nothing of snapshotd: the ledger, the store and everything above use it.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, unquote

REF_PREFIX = "refs/snapshotd/runs/"
# The files ``store.loose_refs.LooseRefMover`` keeps beside a moved ref: not refs.
SPARE_SUFFIX = ".spare.lock"
OLD_SUFFIX = ".old.lock"


@dataclass(frozen=True)
class AttemptKey:
    """Who a checkpoint belongs to: ``(run_id, node_id, iteration, attempt)``."""

    run_id: str
    node_id: str
    iteration: int
    attempt: int

    def __str__(self) -> str:
        return f"{self.run_id}/{self.node_id}/{self.iteration}/{self.attempt}"

    @property
    def ref(self) -> str:
        parts = (self.run_id, self.node_id, str(self.iteration), str(self.attempt))
        return REF_PREFIX + "/".join(ref_component(p) for p in parts)

    @classmethod
    def from_ref(cls, ref: str) -> AttemptKey:
        run, node, iteration, attempt = ref[len(REF_PREFIX):].split("/")
        return cls(unquote(run), unquote(node), int(iteration), int(attempt))

    def as_dict(self) -> dict:
        return {"run_id": self.run_id, "node_id": self.node_id,
                "iteration": self.iteration, "attempt": self.attempt}


def ref_component(value: str) -> str:
    """``value`` as one legal ref name component (percent-encoded, dots too)."""
    encoded = quote(value, safe="-_")
    return encoded.replace(".", "%2E")


def is_spare(name: str) -> bool:
    """Whether a file name under ``refs/`` is one of the files ``LooseRefMover`` keeps."""
    return name.endswith(SPARE_SUFFIX) or name.endswith(OLD_SUFFIX)


def worktree_id(root: Path) -> str:
    """A stable id for a worktree path (its stat cache directory name)."""
    digest = hashlib.sha256(os.fsencode(str(root))).hexdigest()[:16]
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in root.name)[:40] or "root"
    return f"{name}-{digest}"
