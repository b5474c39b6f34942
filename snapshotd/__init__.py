"""snapshotd: a per-host daemon that makes the work of coding agents durable.

The daemon captures worktrees into a shared git store (``store``), numbers checkpoints per
attempt in a SQLite ledger (``ledger``), attributes and serializes captures (``service``), serves
the control socket (``server``), watches worktrees for tier-2 captures (``watcher``), restores
checkpoints safely (``restore``) and keeps attempts (``engine``). The CLI lives in ``cli``.
"""

__version__ = "0.1.0"
