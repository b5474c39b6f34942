"""Who a checkpoint belongs to, and the ref that names its chain.

Owns ``AttemptKey`` ``(run_id, node_id, iteration, attempt)``, its one printed form
(``run/node/iteration/attempt``, ``str(key)``) and the mapping between a key and its store ref
``refs/snapshotd/runs/<run>/<node>/<iteration>/<attempt>``.

Promises: ``AttemptKey.from_ref(key.ref) == key`` for every key whose ids passed
``snapshotd.fields.id_field``; ref components are percent-encoded, so any valid id is a legal ref
name component. Imports nothing of snapshotd: the ledger, the store and everything above use it.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import quote, unquote

REF_PREFIX = "refs/snapshotd/runs/"


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
