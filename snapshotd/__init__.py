"""snapshotd: a per-host daemon that makes the work of coding agents durable; its packages are
layers, lowest first, as docs/architecture.md ("The import rule") lists them."""

__version__ = "0.1.0"
