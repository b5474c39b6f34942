"""A home opened for reading: what the review reads (show, log, find, the web app's diffs) get.

Owns ``HomeView``, the ledger, a store read handle and the gap spool of one home. The front-end
surface (``snapshotd.ops.backend.read_home``) opens it, beside a running daemon or without one;
the review code only reads through it, so it needs nothing from the layers above.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pygit2

    from snapshotd.ledger import Ledger
    from snapshotd.service import GapSpool


@dataclass
class HomeView:
    """A home opened for reading only: its ledger, a store read handle and its gap spool."""

    home: Path
    ledger: Ledger
    repo: pygit2.Repository
    gaps: GapSpool
